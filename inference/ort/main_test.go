//go:build ort

package ort

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/internal/testenv"
)

// The native tests need the runtime library ($ICICLE_ORT_LIB, printed by scripts/ort.sh) and the model
// fixture ($ICICLE_MODEL_DIR, default models/tiny at the repository root, written by training/); each
// test skips with the reason when one is missing.
var (
	ortLib  = os.Getenv("ICICLE_ORT_LIB")
	initErr error
)

func TestMain(m *testing.M) {
	if ortLib != "" {
		initErr = Init(ortLib)
	}
	code := m.Run()
	if err := Shutdown(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

func requireRuntime(t testing.TB) {
	t.Helper()
	if ortLib == "" {
		testenv.Missing(t, "ICICLE_ORT_LIB is not set: run with ICICLE_ORT_LIB=$(scripts/ort.sh)")
	}
	require.NoError(t, initErr, "ort.Init(%s)", ortLib)
}

// fixture is the model directory under test.
type fixture struct {
	dir   string
	onnx  string
	spec  inference.Spec
	maxCx int
}

func loadFixture(t testing.TB) fixture {
	t.Helper()
	requireRuntime(t)
	dir := os.Getenv("ICICLE_MODEL_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "models", "tiny")
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if os.IsNotExist(err) {
		testenv.Missing(t, "no model fixture at %s: produce models/tiny with training/ or set ICICLE_MODEL_DIR", dir)
	}
	require.NoError(t, err)
	var m struct {
		ONNX       string `json:"onnx"`
		VocabSize  int    `json:"vocab_size"`
		NumLayers  int    `json:"num_layers"`
		NumKVHeads int    `json:"num_kv_heads"`
		HeadDim    int    `json:"head_dim"`
		MaxContext int    `json:"max_context_tokens"`
	}
	require.NoError(t, json.Unmarshal(raw, &m), "manifest.json")
	if m.ONNX == "" {
		m.ONNX = "model.onnx"
	}
	return fixture{
		dir:   dir,
		onnx:  filepath.Join(dir, m.ONNX),
		spec:  inference.Spec{VocabSize: m.VocabSize, NumLayers: m.NumLayers, NumKVHeads: m.NumKVHeads, HeadDim: m.HeadDim},
		maxCx: m.MaxContext,
	}
}

func (f fixture) load(t testing.TB, opts Options) *Model {
	t.Helper()
	m, err := Load(f.onnx, f.spec, opts, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m
}

// causalStep is a prefill or chain step: ids at positions past.., each attending to every past position
// and the new ones before it; logits for the given indices (the last token when none).
func causalStep(ids []int64, past int, logitsIndex ...int64) inference.Step {
	n := len(ids)
	s := inference.Step{IDs: ids, Positions: make([]int64, n), Mask: make([]float32, n*(past+n)), LogitsIndex: logitsIndex}
	for i := range n {
		s.Positions[i] = int64(past + i)
		for j := past + i + 1; j < past+n; j++ {
			s.Mask[i*(past+n)+j] = inference.MaskedValue
		}
	}
	if len(s.LogitsIndex) == 0 {
		s.LogitsIndex = []int64{int64(n - 1)}
	}
	return s
}

func randomIDs(r *rand.Rand, n, vocab int) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = r.Int64N(int64(vocab))
	}
	return ids
}
