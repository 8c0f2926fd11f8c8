//go:build ort

package ort

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/internal/testenv"
)

// tolerance is the absolute logit tolerance against the Python reference and between equivalent
// computations (MODEL_FORMAT.md, "golden/").
const tolerance = 1e-3

func requireClose(t *testing.T, want, got []float32, msg string, args ...any) {
	t.Helper()
	require.Len(t, got, len(want), msg)
	worst, at := 0.0, 0
	for i := range want {
		if d := math.Abs(float64(want[i] - got[i])); d > worst || math.IsNaN(d) {
			worst, at = d, i
		}
	}
	require.LessOrEqual(t, worst, tolerance, "%s: worst |diff| at %d: want %v, got %v", fmt.Sprintf(msg, args...), at, want[at], got[at])
}

func TestLogitsGolden(t *testing.T) {
	f := loadFixture(t)
	path := filepath.Join(f.dir, "golden", "logits.jsonl")
	fh, err := os.Open(path)
	if os.IsNotExist(err) {
		testenv.Missing(t, "no %s: training/ writes it with the fixture", path)
	}
	require.NoError(t, err)
	defer fh.Close()
	lines, err := io.ReadAll(fh)
	require.NoError(t, err)
	// Every way of spinning gives the golden logits: the threads' waiting changes when work runs, never what.
	for _, spin := range []struct {
		name string
		opts Options
	}{{"stop_after_run", Options{}}, {"spin_between_runs", Options{SpinBetweenRuns: true}}, {"no_spin", Options{Threads: 2, NoSpin: true}}} {
		t.Run(spin.name, func(t *testing.T) { checkGoldenLogits(t, f, path, lines, f.load(t, spin.opts)) })
	}
}

func checkGoldenLogits(t *testing.T, f fixture, path string, lines []byte, m *Model) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(lines))
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		var g struct {
			InputIDs []int64      `json:"input_ids"`
			Top      [][2]float64 `json:"last_logits_top"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &g), "%s:%d", path, line)
		t.Run(fmt.Sprintf("line%d_n%d", line, len(g.InputIDs)), func(t *testing.T) {
			require.NotEmpty(t, g.Top)
			cache := inference.NewKVCache(f.spec, len(g.InputIDs))
			logits, err := m.Forward(t.Context(), causalStep(g.InputIDs, 0), cache)
			require.NoError(t, err)
			require.Len(t, logits, f.spec.VocabSize)
			require.Equal(t, len(g.InputIDs), cache.Len())
			for _, top := range g.Top {
				id, want := int(top[0]), top[1]
				require.InDelta(t, want, float64(logits[id]), tolerance, "logit of id %d", id)
			}
			best := 0
			for i, v := range logits {
				if v > logits[best] {
					best = i
				}
			}
			require.Equal(t, int(g.Top[0][0]), best, "top-1 id")
		})
	}
	require.NoError(t, sc.Err())
}

// TestIncrementalMatchesPrefill feeds the same tokens as one prefill (past = 0) and in chunks against the
// growing cache; every token's logits must agree, which checks positions, the past/new split of the
// mask, zero-copy past tensors and the append of present.*.
func TestIncrementalMatchesPrefill(t *testing.T) {
	f := loadFixture(t)
	m := f.load(t, Options{})
	r := rand.New(rand.NewPCG(1, 2))
	ids := randomIDs(r, 24, f.spec.VocabSize)
	all := make([]int64, len(ids))
	for i := range all {
		all[i] = int64(i)
	}

	full := inference.NewKVCache(f.spec, len(ids))
	logits, err := m.Forward(t.Context(), causalStep(ids, 0, all...), full)
	require.NoError(t, err)
	want := append([]float32(nil), logits...)

	for _, chunk := range []int{1, 5, 8} {
		t.Run(fmt.Sprintf("chunk%d", chunk), func(t *testing.T) {
			cache := inference.NewKVCache(f.spec, len(ids))
			for start := 0; start < len(ids); start += chunk {
				end := min(start+chunk, len(ids))
				idx := make([]int64, end-start)
				for i := range idx {
					idx[i] = int64(i)
				}
				got, err := m.Forward(t.Context(), causalStep(ids[start:end], start, idx...), cache)
				require.NoError(t, err)
				V := f.spec.VocabSize
				requireClose(t, want[start*V:end*V], got, "tokens %d..%d", start, end)
			}
			require.Equal(t, len(ids), cache.Len())
			for l := range f.spec.NumLayers {
				wk, wv := full.Past(l)
				gk, gv := cache.Past(l)
				requireClose(t, wk, gk, "layer %d keys", l)
				requireClose(t, wv, gv, "layer %d values", l)
			}
		})
	}
}

// TestTreeMatchesBranches scores two branches after a shared prefix in one tree-shaped step and compares
// each branch's logits with running that branch alone as a chain; then it extends one branch by a token
// (the other branch's positions stay in the cache, masked) and compares again.
func TestTreeMatchesBranches(t *testing.T) {
	f := loadFixture(t)
	m := f.load(t, Options{})
	V := f.spec.VocabSize
	r := rand.New(rand.NewPCG(3, 4))
	prefix := randomIDs(r, 9, V)
	a := randomIDs(r, 2, V) // branch A: a0 -> a1
	b := randomIDs(r, 3, V) // branch B: b0 -> b1 -> b2
	next := randomIDs(r, 1, V)
	P := len(prefix)

	// Tree step: new tokens [a0 a1 b0 b1 b2]; parents: a0, b0 -> prefix end; a1 -> a0; b1 -> b0; b2 -> b1.
	parent := []int{-1, 0, -1, 2, 3}
	ids := append(append([]int64{}, a...), b...)
	n := len(ids)
	step := inference.Step{IDs: ids, Positions: make([]int64, n), Mask: make([]float32, n*(P+n)), LogitsIndex: []int64{0, 1, 2, 3, 4}}
	for i := range n {
		depth := 0
		for j := range P + n {
			step.Mask[i*(P+n)+j] = inference.MaskedValue
		}
		for j := range P {
			step.Mask[i*(P+n)+j] = 0
		}
		for j := i; j >= 0; j = parent[j] {
			step.Mask[i*(P+n)+P+j] = 0
			if j != i {
				depth++
			}
		}
		step.Positions[i] = int64(P + depth)
	}

	tree := inference.NewKVCache(f.spec, P+n+1)
	_, err := m.Forward(t.Context(), causalStep(prefix, 0), tree)
	require.NoError(t, err)
	got, err := m.Forward(t.Context(), step, tree)
	require.NoError(t, err)
	treeLogits := append([]float32(nil), got...)

	branch := func(tokens []int64) []float32 {
		c := inference.NewKVCache(f.spec, P+len(tokens)+1)
		_, err := m.Forward(t.Context(), causalStep(prefix, 0), c)
		require.NoError(t, err)
		idx := make([]int64, len(tokens))
		for i := range idx {
			idx[i] = int64(i)
		}
		out, err := m.Forward(t.Context(), causalStep(tokens, P, idx...), c)
		require.NoError(t, err)
		return append([]float32(nil), out...)
	}
	requireClose(t, branch(a), treeLogits[:2*V], "branch A in the tree")
	requireClose(t, branch(b), treeLogits[2*V:], "branch B in the tree")

	// Extend branch A by one token: it attends to the prefix, a0, a1 and itself; b0..b2 stay masked.
	T := P + n
	ext := inference.Step{IDs: next, Positions: []int64{int64(P + len(a))}, Mask: make([]float32, T+1), LogitsIndex: []int64{0}}
	for j := P + len(a); j < T; j++ {
		ext.Mask[j] = inference.MaskedValue
	}
	got, err = m.Forward(t.Context(), ext, tree)
	require.NoError(t, err)
	got = append([]float32(nil), got...) // the next Forward reuses the model's buffer
	want := branch(append(append([]int64{}, a...), next...))
	requireClose(t, want[len(a)*V:], got, "branch A extended after the tree")
}

func TestForwardRejectsBadSteps(t *testing.T) {
	f := loadFixture(t)
	m := f.load(t, Options{})
	ok := causalStep([]int64{1, 2, 3}, 0)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		cap   int
		step  func(s inference.Step) inference.Step
		is    error
		parts string
	}{
		{name: "empty", step: func(inference.Step) inference.Step { return inference.Step{} }, parts: "no tokens"},
		{name: "positions", step: func(s inference.Step) inference.Step { s.Positions = s.Positions[:2]; return s }, parts: "positions"},
		{name: "mask", step: func(s inference.Step) inference.Step { s.Mask = s.Mask[:8]; return s }, parts: "mask"},
		{name: "no logits", step: func(s inference.Step) inference.Step { s.LogitsIndex = nil; return s }, parts: "no logits"},
		{name: "logits index", step: func(s inference.Step) inference.Step { s.LogitsIndex = []int64{3}; return s }, parts: "logits index 3"},
		{name: "id", step: func(s inference.Step) inference.Step { s.IDs = []int64{1, int64(f.spec.VocabSize), 3}; return s }, parts: "outside vocabulary"},
		{name: "cache full", cap: 2, step: func(s inference.Step) inference.Step { return s }, is: inference.ErrContextFull},
		{name: "canceled", ctx: canceled, step: func(s inference.Step) inference.Step { return s }, is: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = t.Context()
			}
			c := tc.cap
			if c == 0 {
				c = 8
			}
			cache := inference.NewKVCache(f.spec, c)
			_, err := m.Forward(ctx, tc.step(ok), cache)
			require.Error(t, err)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
			}
			require.ErrorContains(t, err, tc.parts)
			require.Zero(t, cache.Len(), "cache must be unchanged")
		})
	}
	// The model still works after rejected steps.
	_, err := m.Forward(t.Context(), ok, inference.NewKVCache(f.spec, 3))
	require.NoError(t, err)
}

func TestLogitsBufferReused(t *testing.T) {
	f := loadFixture(t)
	m := f.load(t, Options{})
	cache := inference.NewKVCache(f.spec, 8)
	first, err := m.Forward(t.Context(), causalStep([]int64{1, 2}, 0), cache)
	require.NoError(t, err)
	second, err := m.Forward(t.Context(), causalStep([]int64{3}, 2), cache)
	require.NoError(t, err)
	require.Same(t, &first[0], &second[0], "logits buffer is owned by the model and reused")
}

func TestLoadChecksContract(t *testing.T) {
	f := loadFixture(t)
	for _, tc := range []struct {
		name  string
		spec  func(inference.Spec) inference.Spec
		parts []string
	}{
		{"head_dim", func(s inference.Spec) inference.Spec { s.HeadDim++; return s }, []string{`"past_key_values.0.key"`, `"present.0.value"`}},
		{"vocab", func(s inference.Spec) inference.Spec { s.VocabSize++; return s }, []string{`"logits"`}},
		{"layers", func(s inference.Spec) inference.Spec { s.NumLayers++; return s }, []string{fmt.Sprintf(`"past_key_values.%d.key" missing`, f.spec.NumLayers)}},
		{"zero", func(s inference.Spec) inference.Spec { s.NumKVHeads = 0; return s }, []string{"num_kv_heads"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(f.onnx, tc.spec(f.spec), Options{}, nil)
			require.Error(t, err)
			for _, p := range tc.parts {
				require.ErrorContains(t, err, p)
			}
		})
	}
	_, err := Load(filepath.Join(t.TempDir(), "missing.onnx"), f.spec, Options{}, nil)
	require.ErrorContains(t, err, "missing.onnx")
	_, err = Load(f.onnx, f.spec, Options{Provider: "tpu", Threads: -1}, nil)
	require.ErrorContains(t, err, `provider "tpu"`)
	require.ErrorContains(t, err, "threads = -1")
}

// TestSignatureFollowsTheFile: the signature kept per model file is that file's version: the same file opened
// again is served from it, and a file replaced at the same path is read anew and checked against the contract.
func TestSignatureFollowsTheFile(t *testing.T) {
	f := loadFixture(t)
	path := filepath.Join(t.TempDir(), "model.onnx")
	raw, err := os.ReadFile(f.onnx)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, raw, 0o644))
	for range 2 {
		m, err := Load(path, f.spec, Options{}, nil)
		require.NoError(t, err)
		require.NoError(t, m.Close())
	}
	n := 0
	signatures.Range(func(k, _ any) bool {
		if k.(fileKey).path == path {
			n++
		}
		return true
	})
	require.Equal(t, 1, n, "one signature for one version of the file")

	other, err := os.ReadFile(filepath.Join("..", "..", "models", "bge-small-en-v15-q", "model.onnx"))
	if os.IsNotExist(err) {
		testenv.Missing(t, "no encoder graph in models/bge-small-en-v15-q: run scripts/encoder.sh (scripts/test.sh does)")
	}
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, other, 0o644))
	_, err = Load(path, f.spec, Options{}, nil)
	require.ErrorContains(t, err, `input "position_ids" missing`, "the replaced file is checked, not its old signature")
}

// cudaExpected says whether the CUDA provider can work here: ONNX Runtime's CUDA provider library
// beside the runtime library and an NVIDIA device node. ICICLE_EXPECT_CUDA=1 or 0 overrides the guess.
func cudaExpected() (bool, string) {
	switch os.Getenv("ICICLE_EXPECT_CUDA") {
	case "1":
		return true, "ICICLE_EXPECT_CUDA=1"
	case "0":
		return false, "ICICLE_EXPECT_CUDA=0"
	}
	lib := filepath.Join(filepath.Dir(ortLib), "libonnxruntime_providers_cuda.so")
	if _, err := os.Stat(lib); err != nil {
		return false, "no " + lib + " (a CPU-only ONNX Runtime build)"
	}
	if _, err := os.Stat("/dev/nvidiactl"); err != nil {
		return false, "no /dev/nvidiactl (no NVIDIA driver or device)"
	}
	return true, lib + " and /dev/nvidiactl present"
}

// TestCUDAUnavailable asks for CUDA and asserts what happened: on a device that cannot exist (ordinal 1000)
// Load fails with ErrCUDAUnavailable naming the device, never a silent CPU session; on device 0 it gives the
// CUDA provider where cudaExpected says CUDA can work here, and ErrCUDAUnavailable where it cannot (the
// CPU-only runtime scripts/ort.sh installs, or no GPU).
func TestCUDAUnavailable(t *testing.T) {
	f := loadFixture(t)
	_, err := Load(f.onnx, f.spec, Options{Provider: ProviderCUDA, CUDADevice: 1000, Threads: 1}, nil)
	require.ErrorIs(t, err, ErrCUDAUnavailable)
	require.ErrorContains(t, err, "on device 1000")
	wantCUDA, why := cudaExpected()
	m, err := Load(f.onnx, f.spec, Options{Provider: ProviderCUDA, Threads: 1}, nil)
	if wantCUDA {
		require.NoError(t, err, "CUDA should work here: %s", why)
		defer m.Close()
		require.Equal(t, ProviderCUDA, m.Provider())
		return
	}
	require.ErrorIs(t, err, ErrCUDAUnavailable, "CUDA cannot work here (%s), so Load must say so", why)
}

// TestCUDAFallback asks for CUDA on an impossible device with CUDAFallbackCPU (the opt-in): Load falls back
// to the CPU with a warning naming the cause, reports the CPU provider, and still computes.
func TestCUDAFallback(t *testing.T) {
	f := loadFixture(t)
	var logs bytes.Buffer
	m, err := Load(f.onnx, f.spec, Options{Provider: ProviderCUDA, CUDADevice: 1000, CUDAFallbackCPU: true, Threads: 1, NoSpin: true}, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	defer m.Close()
	t.Logf("provider %s; log: %s", m.Provider(), logs.String())
	require.Equal(t, ProviderCPU, m.Provider())
	require.Contains(t, logs.String(), "falling back to cpu")
	_, err = m.Forward(t.Context(), causalStep([]int64{1, 2, 3}, 0), inference.NewKVCache(f.spec, 3))
	require.NoError(t, err)
}

func TestCloseIdempotent(t *testing.T) {
	f := loadFixture(t)
	m, err := Load(f.onnx, f.spec, Options{}, nil)
	require.NoError(t, err)
	require.Equal(t, f.spec, m.Spec())
	require.NoError(t, m.Close())
	require.NoError(t, m.Close())
	_, err = m.Forward(t.Context(), causalStep([]int64{1}, 0), inference.NewKVCache(f.spec, 1))
	require.ErrorIs(t, err, ErrClosed)
}

func TestInit(t *testing.T) {
	requireRuntime(t)
	require.NoError(t, Init(ortLib), "same library again is a no-op")
	require.ErrorContains(t, Init("/elsewhere/libonnxruntime.so"), "already initialised")
	require.NotEmpty(t, Version())
	t.Logf("onnx runtime %s", Version())
}
