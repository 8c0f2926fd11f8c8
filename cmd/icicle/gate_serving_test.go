//go:build ort && tokenizers

package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/config"
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/internal/gate"
	"github.com/icicle-search/sidecar/plugin"
)

// TestOpenModelGateServing: a gate fitted under other settings than the sidecar's is loaded as one that never
// promotes, its source saying which settings differ; under the same settings it is applied. models/tiny with
// a crafted gate.json (the real engine, the real loader).
func TestOpenModelGateServing(t *testing.T) {
	lib := os.Getenv("ICICLE_ORT_LIB")
	require.NotEmpty(t, lib, "ICICLE_ORT_LIB (scripts/env.sh sets it)")
	require.NoError(t, ort.Init(lib))
	t.Cleanup(func() { _ = ort.Shutdown() })

	dir := t.TempDir()
	tiny, err := filepath.Abs(filepath.Join("..", "..", "models", "tiny"))
	require.NoError(t, err)
	entries, err := os.ReadDir(tiny)
	require.NoError(t, err)
	for _, e := range entries {
		require.NoError(t, os.Symlink(filepath.Join(tiny, e.Name()), filepath.Join(dir, e.Name())))
	}
	n := len(gate.FeatureNames)
	g := &gate.Gate{Version: gate.Version, Features: gate.FeatureNames, Mean: make([]float64, n), Scale: make([]float64, n),
		Weights: make([]float64, n), Threshold: 0.5, Fit: &gate.FitInfo{N: 10, Folds: 2, Serving: map[string]string{"experimental.scoring": "vocab"}}}
	for i := range g.Scale {
		g.Scale[i] = 1
	}
	_, err = g.Save(dir)
	require.NoError(t, err)

	cfg := config.Default()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, scoring := range []string{"vocab", "trie"} {
		cfg.Experimental.Scoring = scoring
		m, err := openModel(dir, cfg.Model, runPlan{sessions: 1, threads: 1}, cfg.Decode.BeamWidth, cfg.Experimental,
			plugin.Settings(cfg.ServingSettings()), nil, log)
		require.NoError(t, err)
		require.Equal(t, scoring, (*m.Info.Serving)["experimental.scoring"], "/v1/model says what it serves under")
		if scoring == "vocab" {
			require.False(t, m.Gate.Never, "fitted under these settings: applied")
		} else {
			require.True(t, m.Gate.Never, "fitted under vocab, served under trie: not applied")
			require.Contains(t, m.Info.Gate.Source, "not applied: fitted under other settings (experimental.scoring: fitted under vocab, now trie)")
		}
		require.NoError(t, m.Close())
	}
}
