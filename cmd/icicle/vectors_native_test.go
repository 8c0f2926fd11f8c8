//go:build ort && tokenizers

package main

import (
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/config"
	"github.com/icicle-search/sidecar/inference/dense"
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/internal/testenv"
	"github.com/icicle-search/sidecar/internal/vecfile"
)

// demoVectors is the demo corpus's vector file, made by `icicle vectors` with the default encoder.
const demoVectors = "../../data/nq_qed/vectors.bge-small-en-v1.5-q.gz"

// TestDemoVectorsAreTheEncoders: the vectors shipped with the demo corpus are what the default encoder makes
// of its documents (a sample of them embedded again here, real encoder), so `make demo` ingesting them ranks as
// embedding the corpus would.
func TestDemoVectorsAreTheEncoders(t *testing.T) {
	lib := os.Getenv("ICICLE_ORT_LIB")
	require.NotEmpty(t, lib, "ICICLE_ORT_LIB (scripts/env.sh sets it)")
	require.NoError(t, ort.Init(lib))
	t.Cleanup(func() { _ = ort.Shutdown() })

	set, err := vecfile.Read(demoVectors)
	require.NoError(t, err)
	docs, err := readCorpus("../../data/nq_qed/corpus.jsonl.gz")
	require.NoError(t, err)
	require.Equal(t, len(docs), set.Len(), "one vector per document of the corpus")

	fc := config.Default().FirstStage
	fc.EncoderDir = filepath.Join("..", "..", fc.EncoderDir)
	enc, err := openEncoder(fc, 1, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = enc.Close() })
	require.Equal(t, enc.Name(), set.Encoder)

	// The file was made on VNNI cores; elsewhere the int8 encoder's vectors move a little (testenv.Int8Kind).
	each, median := 0.9999, 0.9999
	if testenv.Int8Kind() != "vnni" {
		each, median = 0.995, 0.999
	}
	r := rand.New(rand.NewPCG(7, 7))
	var cos []float64
	for range 12 {
		d := docs[r.IntN(len(docs))]
		want, ok := set.Get(d.Title, d.Text)
		require.True(t, ok, d.DocID)
		got, err := enc.Passages(t.Context(), []string{dense.PassageText(d.Title, d.Text)})
		require.NoError(t, err)
		c := dense.Dot(got[0], want)
		require.GreaterOrEqual(t, c, each, "%s: the file's vector is the encoder's", d.DocID)
		cos = append(cos, c)
	}
	slices.Sort(cos)
	require.GreaterOrEqual(t, cos[len(cos)/2], median, "the median cosine of the file's vectors to the encoder's")
}
