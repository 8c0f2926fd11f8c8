//go:build ort && tokenizers

package loader

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/internal/testenv"
)

func TestOpen(t *testing.T) {
	lib := os.Getenv("ICICLE_ORT_LIB")
	if lib == "" {
		testenv.Missing(t, "ICICLE_ORT_LIB not set (eval \"$(scripts/env.sh)\")")
	}
	require.NoError(t, ort.Init(lib))
	t.Cleanup(func() { _ = ort.Shutdown() })
	dir := filepath.Join("..", "..", "models", "tiny")

	t.Run("fp32 and int8 with two sessions", func(t *testing.T) {
		for _, q := range []bool{false, true} {
			m, err := Open(dir, Options{Sessions: 2, Quantized: q})
			require.NoError(t, err)
			res, err := m.Engine.Rank(t.Context(), "who wrote hamlet", []inference.Candidate{{Title: "Hamlet", Summary: "a play"}}, inference.Options{BeamWidth: 3})
			require.NoError(t, err)
			require.NotEmpty(t, res.Beams)
			require.Len(t, m.Seen, len(m.Engine.SeenCorpus()))
			require.NoError(t, m.Close())
			require.NoError(t, m.Close(), "idempotent")
		}
	})
	t.Run("a broken directory names what is wrong", func(t *testing.T) {
		_, err := Open(t.TempDir(), Options{})
		require.ErrorIs(t, err, inference.ErrBadModelDir)
		require.ErrorContains(t, err, "manifest.json")
	})
}
