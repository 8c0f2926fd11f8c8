//go:build ort && tokenizers

package rank_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference/loader"
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/rank"
)

var update = flag.Bool("update", false, "rewrite rank/testdata/*.golden.json")

// denseGolden is one query of the dense reader's golden file: its candidates, and the reading.
type denseGolden struct {
	Query      string           `json:"query"`
	Candidates []rank.Candidate `json:"candidates"`
	Order      []string         `json:"order"`
	Scores     []float64        `json:"scores"`
}

// TestDenseReaderGolden: the dense reader over the real bge-small-en-v1.5 (fp32) ranks three questions'
// candidates as its golden file says, cosines within 1e-4: a second kind of reader behind rank.Reader, real
// model and tokenizer, beside the ICICLE reader's parity tests.
func TestDenseReaderGolden(t *testing.T) {
	lib := os.Getenv("ICICLE_ORT_LIB")
	require.NotEmpty(t, lib, "ICICLE_ORT_LIB (scripts/env.sh sets it)")
	require.NoError(t, ort.Init(lib))
	t.Cleanup(func() { _ = ort.Shutdown() })
	enc, err := loader.OpenEncoder(filepath.Join("..", "models", "bge-small-en-v15"), loader.EncoderOptions{Runtime: ort.Options{Threads: 1}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = enc.Close() })
	r := rank.NewDenseReader(enc, nil)

	path := filepath.Join("testdata", "dense_reader.golden.json")
	var cases []denseGolden
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &cases))
	require.Len(t, cases, 3)
	for i, c := range cases {
		reading, err := r.Read(t.Context(), rank.Query{Text: c.Query, Candidates: c.Candidates})
		require.NoError(t, err)
		var order []string
		var scores []float64
		for _, s := range reading.Scored {
			order, scores = append(order, s.DocID), append(scores, s.Score)
			require.Equal(t, rank.RouteCopy, s.Route)
		}
		if *update {
			cases[i].Order, cases[i].Scores = order, scores
			continue
		}
		require.Equal(t, c.Order, order, c.Query)
		require.InDeltaSlice(t, c.Scores, scores, 1e-4, c.Query)
	}
	if *update {
		out, err := json.MarshalIndent(cases, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, append(out, '\n'), 0o644))
	}
}
