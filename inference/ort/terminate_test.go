//go:build ort

package ort

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/internal/testenv"
)

// TestForwardStopsAtContextEnd cancels a long prefill of the 30-layer default model (models/reader135,
// whose model.onnx scripts/model.sh builds) while it runs: the Run is terminated, Forward returns the
// context's error, the cache is untouched, and the session serves the next call.
func TestForwardStopsAtContextEnd(t *testing.T) {
	requireRuntime(t)
	dir := filepath.Join("..", "..", "models", "reader135")
	if _, err := os.Stat(filepath.Join(dir, "model.onnx")); err != nil {
		testenv.Missing(t, "%s/model.onnx missing: run scripts/model.sh %s", dir, dir)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	require.NoError(t, err)
	var man inference.Manifest
	require.NoError(t, json.Unmarshal(raw, &man))
	m, err := Load(filepath.Join(dir, "model.onnx"), man.Spec(), Options{Threads: 1}, nil)
	require.NoError(t, err)
	defer m.Close()

	ids := randomIDs(rand.New(rand.NewPCG(1, 2)), 512, man.VocabSize)
	cache := inference.NewKVCache(man.Spec(), 600)
	ctx, cancel := context.WithCancel(t.Context())
	// 512 tokens through 30 layers on one thread take hundreds of milliseconds; the cancellation lands
	// inside the Run.
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err = m.Forward(ctx, causalStep(ids, 0), cache)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, cache.Len(), "a stopped run appends nothing")

	logits, err := m.Forward(t.Context(), causalStep(ids[:8], 0), cache)
	require.NoError(t, err, "the session still serves")
	require.Len(t, logits, man.VocabSize)
}
