//go:build ort && tokenizers

package loader

import (
	"encoding/json"
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

// TestInt8Runs: an int8 file with 8-bit weights (int8_weight_bits absent or 8) is refused on an x86 CPU
// without VNNI, naming the setting and the fix; 7-bit weights run everywhere, 8-bit ones with VNNI or off x86.
func TestInt8Runs(t *testing.T) {
	eight := &inference.Manifest{ONNXQuantized: "model.int8.onnx"}
	seven := &inference.Manifest{ONNXQuantized: "model.int8.onnx", Int8WeightBits: 7}
	avx2, vnni, arm := cpuFacts{x86: true}, cpuFacts{x86: true, vnni: true}, cpuFacts{}
	err := int8Runs(eight, avx2)
	require.ErrorContains(t, err, "model.quantized: model.int8.onnx has 8-bit weights")
	require.ErrorContains(t, err, "python -m icicle.export int8 --model DIR")
	eight.Int8WeightBits = 8
	require.Error(t, int8Runs(eight, avx2), "8 written out is refused as absent is")
	for _, c := range []cpuFacts{vnni, arm} {
		require.NoError(t, int8Runs(eight, c))
	}
	for _, c := range []cpuFacts{avx2, vnni, arm} {
		require.NoError(t, int8Runs(seven, c))
	}
}

// TestBlockFileIdentity: the block file is named by what computes the blocks. models/tiny with and without
// its onnx_quantized field (an int8 file added later) names the same file; another template names another.
func TestBlockFileIdentity(t *testing.T) {
	src, err := filepath.Abs(filepath.Join("..", "..", "models", "tiny"))
	require.NoError(t, err)
	variant := func(edit func(m map[string]any)) string {
		dir := testenv.BlockModel(t, src)
		raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(raw, &m))
		edit(m)
		raw, err = json.Marshal(m)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "manifest.json"), raw, 0o644))
		name, _, err := BlockFile("store", dir, inference.BlockShared, "int8")
		require.NoError(t, err)
		return name
	}
	with := variant(func(map[string]any) {})
	without := variant(func(m map[string]any) { delete(m, "onnx_quantized"); delete(m, "int8_weight_bits") })
	require.Equal(t, with, without, "an int8 file does not change the blocks")
	other := variant(func(m map[string]any) { m["template"].(map[string]any)["query"] = "Q: {query}\nOutput:\n" })
	require.NotEqual(t, with, other, "another template computes other blocks")
	require.Contains(t, with, "-shared-int8.blocks")
}
