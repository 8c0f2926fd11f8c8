//go:build ort

package ort

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	onnx "github.com/yalue/onnxruntime_go"

	"github.com/icicle-search/sidecar/inference"
)

// ErrClosed is returned by Forward after Close.
var ErrClosed = errors.New("model closed")

var (
	envMu  sync.Mutex
	envLib string // library the environment was initialised from; "" when none
)

// Init loads the ONNX Runtime shared library at libPath (scripts/ort.sh prints it) and creates the
// process's runtime environment. Call it once at start-up, before Load. Calling it again with the same
// path is a no-op; with a different path it is an error, since a process has one runtime.
func Init(libPath string) error {
	if libPath == "" {
		return errors.New("init onnx runtime: library path is empty (point it at the libonnxruntime.so that scripts/ort.sh prints)")
	}
	envMu.Lock()
	defer envMu.Unlock()
	if onnx.IsInitialized() {
		if libPath == envLib {
			return nil
		}
		return fmt.Errorf("init onnx runtime from %s: already initialised from %s", libPath, envLib)
	}
	onnx.SetSharedLibraryPath(libPath)
	if err := onnx.InitializeEnvironment(onnx.WithLogLevelWarning()); err != nil {
		return fmt.Errorf("init onnx runtime from %s: %w", libPath, err)
	}
	envLib = libPath
	return nil
}

// Shutdown destroys the runtime environment created by Init. Close every Model first. It is idempotent.
func Shutdown() error {
	envMu.Lock()
	defer envMu.Unlock()
	if !onnx.IsInitialized() {
		return nil
	}
	envLib = ""
	if err := onnx.DestroyEnvironment(); err != nil {
		return fmt.Errorf("shut down onnx runtime: %w", err)
	}
	return nil
}

// Version returns the version of the loaded ONNX Runtime library, such as "1.30.0", or "" before Init.
func Version() string {
	if !onnx.IsInitialized() {
		return ""
	}
	return onnx.GetVersion()
}

// Model is a decoder session implementing inference.Model (MODEL_FORMAT.md, "model.onnx"). It is not
// meant for concurrent use (the engine serialises calls per instance), but concurrent calls are safe:
// they are serialised by a mutex, and Close waits for a running Forward.
type Model struct {
	mu       sync.Mutex
	session  *onnx.DynamicAdvancedSession
	spec     inference.Spec
	provider string
	stride   int // floats per position per layer

	// Buffers owned by the model and reused across calls; ONNX Runtime writes the outputs into them.
	logits   []float32   // m x VocabSize
	presentK [][]float32 // per layer, n x stride
	presentV [][]float32
	// Tensors of the current call, in input and output name order; destroyed when Forward returns.
	inputs  []onnx.Value
	outputs []onnx.Value
}

var _ inference.Model = (*Model)(nil)

// inputNames and outputNames give the model's inputs and outputs in the order Forward passes them.
func inputNames(layers int) []string {
	names := []string{"input_ids", "position_ids", "attention_mask", "logits_index"}
	for l := range layers {
		names = append(names, fmt.Sprintf("past_key_values.%d.key", l), fmt.Sprintf("past_key_values.%d.value", l))
	}
	return names
}

func outputNames(layers int) []string {
	names := []string{"logits"}
	for l := range layers {
		names = append(names, fmt.Sprintf("present.%d.key", l), fmt.Sprintf("present.%d.value", l))
	}
	return names
}

// ErrCUDAUnavailable means the CUDA execution provider could not be set up on the requested device
// (the CPU build of ONNX Runtime, no GPU, a device id out of range, missing CUDA or cuDNN libraries).
var ErrCUDAUnavailable = errors.New("cuda execution provider unavailable")

// Load opens the ONNX decoder at modelPath, checks its inputs and outputs against MODEL_FORMAT.md and
// spec, and creates a session. Init must have been called. A nil logger discards logs. With
// opts.Provider == ProviderCUDA it returns ErrCUDAUnavailable, naming the device and ONNX Runtime's
// reason, when the CUDA provider cannot be set up on opts.CUDADevice; only with opts.CUDAFallbackCPU
// does it fall back to the CPU, logging a warning. Provider reports which one is in use.
func Load(modelPath string, spec inference.Spec, opts Options, logger *slog.Logger) (*Model, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if !onnx.IsInitialized() {
		return nil, fmt.Errorf("load model %s: onnx runtime not initialised: call ort.Init with the library path first", modelPath)
	}
	if err := checkSpec(spec); err != nil {
		return nil, fmt.Errorf("load model %s: %w", modelPath, err)
	}
	if err := checkOptions(opts); err != nil {
		return nil, fmt.Errorf("load model %s: %w", modelPath, err)
	}
	start := time.Now()
	ins, outs := inputNames(spec.NumLayers), outputNames(spec.NumLayers)
	if err := checkIO(modelPath, spec, ins, outs); err != nil {
		return nil, err
	}

	provider := ProviderCPU
	var session *onnx.DynamicAdvancedSession
	if opts.Provider == ProviderCUDA {
		s, err := newSession(modelPath, ins, outs, opts, true)
		switch {
		case err != nil && !opts.CUDAFallbackCPU:
			return nil, fmt.Errorf("load model %s: %w on device %d (the CPU build of ONNX Runtime, no such GPU, or CUDA 12/cuDNN 9 not on the loader path; scripts/env.sh --gpu fetches the CUDA build): %w",
				modelPath, ErrCUDAUnavailable, opts.CUDADevice, err)
		case err != nil:
			logger.Warn("cuda execution provider unavailable, falling back to cpu", "model", modelPath, "cuda_device", opts.CUDADevice, "err", err)
		default:
			session, provider = s, ProviderCUDA
		}
	}
	if session == nil {
		s, err := newSession(modelPath, ins, outs, opts, false)
		if err != nil {
			return nil, fmt.Errorf("load model %s: %w", modelPath, err)
		}
		session = s
	}

	m := &Model{
		session:  session,
		spec:     spec,
		provider: provider,
		stride:   spec.NumKVHeads * spec.HeadDim,
		presentK: make([][]float32, spec.NumLayers),
		presentV: make([][]float32, spec.NumLayers),
		inputs:   make([]onnx.Value, len(ins)),
		outputs:  make([]onnx.Value, len(outs)),
	}
	logger.Info("onnx model loaded", "model", modelPath, "provider", provider, "threads", opts.Threads,
		"inter_op_threads", opts.InterOpThreads, "ort_version", onnx.GetVersion(), "took_ms", time.Since(start).Milliseconds())
	return m, nil
}

func checkSpec(spec inference.Spec) error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"vocab_size", spec.VocabSize}, {"num_layers", spec.NumLayers}, {"num_kv_heads", spec.NumKVHeads}, {"head_dim", spec.HeadDim}} {
		if f.v <= 0 {
			errs = append(errs, fmt.Errorf("spec %s = %d, want > 0", f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

func checkOptions(opts Options) error {
	var errs []error
	switch opts.Provider {
	case "", ProviderCPU, ProviderCUDA:
	default:
		errs = append(errs, fmt.Errorf("provider %q: want %q or %q", opts.Provider, ProviderCPU, ProviderCUDA))
	}
	if opts.Threads < 0 {
		errs = append(errs, fmt.Errorf("threads = %d, want >= 0", opts.Threads))
	}
	if opts.InterOpThreads < 0 {
		errs = append(errs, fmt.Errorf("inter_op_threads = %d, want >= 0", opts.InterOpThreads))
	}
	if opts.CUDADevice < 0 {
		errs = append(errs, fmt.Errorf("cuda_device = %d, want >= 0", opts.CUDADevice))
	}
	return errors.Join(errs...)
}

// fileKey names one version of a model file: its path, size and modification time.
type fileKey struct {
	path  string
	size  int64
	mtime int64
}

type ioSignature struct {
	ins, outs []onnx.InputOutputInfo
}

// signatures holds the inputs and outputs of the model files read so far, so that opening the same unchanged
// file again (a hot swap back, a second engine) does not load it a second time only to read its signature.
var signatures sync.Map // fileKey -> ioSignature

// signature returns the declared inputs and outputs of the ONNX file at path. ONNX Runtime reads them from
// a throwaway session without graph optimisation, which still loads every weight: for a 539 MB reader that is
// as long as creating the real session, so the answer is kept per file version.
func signature(path string) ([]onnx.InputOutputInfo, []onnx.InputOutputInfo, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, nil, err
	}
	key := fileKey{abs, fi.Size(), fi.ModTime().UnixNano()}
	if v, ok := signatures.Load(key); ok {
		sig := v.(ioSignature)
		return sig.ins, sig.outs, nil
	}
	so, err := onnx.NewSessionOptions()
	if err != nil {
		return nil, nil, err
	}
	defer so.Destroy()
	if err := so.SetGraphOptimizationLevel(onnx.GraphOptimizationLevelDisableAll); err != nil {
		return nil, nil, err
	}
	ins, outs, err := onnx.GetInputOutputInfoWithOptions(path, so)
	if err != nil {
		return nil, nil, err
	}
	signatures.Store(key, ioSignature{ins, outs})
	return ins, outs, nil
}

// checkIO compares the model's declared inputs and outputs with the contract, reporting every mismatch.
// Dimensions the model leaves symbolic (-1) are not checked.
func checkIO(path string, spec inference.Spec, ins, outs []string) error {
	gotIn, gotOut, err := signature(path)
	if err != nil {
		return fmt.Errorf("check model %s: %w", path, err)
	}
	kv := []int64{1, -1, int64(spec.NumKVHeads), int64(spec.HeadDim)}
	want := map[string]struct {
		dtype onnx.TensorElementDataType
		dims  []int64 // -1: any
	}{
		"input_ids":      {onnx.TensorElementDataTypeInt64, []int64{1, -1}},
		"position_ids":   {onnx.TensorElementDataTypeInt64, []int64{1, -1}},
		"attention_mask": {onnx.TensorElementDataTypeFloat, []int64{1, -1, -1}},
		"logits_index":   {onnx.TensorElementDataTypeInt64, []int64{-1}},
		"logits":         {onnx.TensorElementDataTypeFloat, []int64{1, -1, int64(spec.VocabSize)}},
	}
	for _, name := range ins[4:] {
		want[name] = struct {
			dtype onnx.TensorElementDataType
			dims  []int64
		}{onnx.TensorElementDataTypeFloat, kv}
	}
	for _, name := range outs[1:] {
		want[name] = struct {
			dtype onnx.TensorElementDataType
			dims  []int64
		}{onnx.TensorElementDataTypeFloat, kv}
	}

	var errs []error
	check := func(kind string, names []string, got []onnx.InputOutputInfo, extraOK bool) {
		byName := make(map[string]onnx.InputOutputInfo, len(got))
		for _, g := range got {
			byName[g.Name] = g
			if _, ok := want[g.Name]; !ok && !extraOK {
				errs = append(errs, fmt.Errorf("%s %q is not in the model contract", kind, g.Name))
			}
		}
		for _, name := range names {
			g, ok := byName[name]
			if !ok {
				errs = append(errs, fmt.Errorf("%s %q missing", kind, name))
				continue
			}
			w := want[name]
			if g.OrtValueType != onnx.ONNXTypeTensor || g.DataType != w.dtype {
				errs = append(errs, fmt.Errorf("%s %q is %s, want a %s tensor", kind, name, g.String(), w.dtype))
				continue
			}
			if len(g.Dimensions) != len(w.dims) {
				errs = append(errs, fmt.Errorf("%s %q has shape %s, want rank %d", kind, name, g.Dimensions, len(w.dims)))
				continue
			}
			for i, d := range g.Dimensions {
				if w.dims[i] >= 0 && d >= 0 && d != w.dims[i] {
					errs = append(errs, fmt.Errorf("%s %q has shape %s, want dim %d = %d", kind, name, g.Dimensions, i, w.dims[i]))
				}
			}
		}
	}
	check("input", ins, gotIn, false)
	check("output", outs, gotOut, true) // extra outputs are never requested
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("check model %s against spec (vocab_size %d, num_layers %d, num_kv_heads %d, head_dim %d): %w",
			path, spec.VocabSize, spec.NumLayers, spec.NumKVHeads, spec.HeadDim, err)
	}
	return nil
}

func newSession(path string, ins, outs []string, opts Options, cuda bool) (*onnx.DynamicAdvancedSession, error) {
	so, err := onnx.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("create session options: %w", err)
	}
	defer so.Destroy()
	if opts.Threads > 0 {
		if err := so.SetIntraOpNumThreads(opts.Threads); err != nil {
			return nil, fmt.Errorf("set intra-op threads %d: %w", opts.Threads, err)
		}
	}
	if opts.InterOpThreads > 0 {
		if err := so.SetInterOpNumThreads(opts.InterOpThreads); err != nil {
			return nil, fmt.Errorf("set inter-op threads %d: %w", opts.InterOpThreads, err)
		}
	}
	if !opts.NoSpin && !opts.SpinBetweenRuns {
		if err := so.AddSessionConfigEntry("session.force_spinning_stop", "1"); err != nil {
			return nil, fmt.Errorf("set session.force_spinning_stop: %w", err)
		}
	}
	if opts.NoSpin {
		for _, key := range []string{"session.intra_op.allow_spinning", "session.inter_op.allow_spinning"} {
			if err := so.AddSessionConfigEntry(key, "0"); err != nil {
				return nil, fmt.Errorf("set %s: %w", key, err)
			}
		}
	}
	if cuda {
		co, err := onnx.NewCUDAProviderOptions()
		if err != nil {
			return nil, fmt.Errorf("create cuda provider options: %w", err)
		}
		defer co.Destroy()
		if err := co.Update(map[string]string{"device_id": strconv.Itoa(opts.CUDADevice)}); err != nil {
			return nil, fmt.Errorf("set cuda device %d: %w", opts.CUDADevice, err)
		}
		if err := so.AppendExecutionProviderCUDA(co); err != nil {
			return nil, fmt.Errorf("append cuda execution provider: %w", err)
		}
	}
	s, err := onnx.NewDynamicAdvancedSession(path, ins, outs, so)
	if err != nil {
		return nil, fmt.Errorf("create session: %w", err)
	}
	return s, nil
}

// Spec returns the shapes the model was loaded with.
func (m *Model) Spec() inference.Spec { return m.spec }

// Provider returns the execution provider in use: ProviderCPU or ProviderCUDA.
func (m *Model) Provider() string { return m.provider }

// Forward runs one decoder step; see inference.Model. The past keys and values are handed to ONNX
// Runtime as views of cache (no copy); the new positions' keys and values are appended to cache, which
// must have room for them. An empty cache is passed as zero-length past tensors, which ONNX Runtime
// accepts. A panic in the native call path is returned as an error.
func (m *Model) Forward(ctx context.Context, step inference.Step, cache *inference.KVCache) (logits []float32, err error) {
	n, past, nl := len(step.IDs), cache.Len(), len(step.LogitsIndex)
	defer func() {
		if r := recover(); r != nil {
			logits, err = nil, fmt.Errorf("forward %d tokens after %d: panic: %v", n, past, r)
		}
	}()
	if err := m.checkStep(step, cache); err != nil {
		return nil, fmt.Errorf("forward %d tokens after %d: %w", n, past, err)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.session == nil {
		return nil, ErrClosed
	}
	// Checked after taking the lock, since waiting for it may have used up the budget; a Run that has
	// started is stopped by runCtx when ctx ends (ONNX Runtime's run termination).
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("forward %d tokens after %d: %w", n, past, err)
	}
	m.grow(n, nl)
	defer m.release()

	n64, p64, s := int64(n), int64(past), m.spec
	kvPast := []int64{1, p64, int64(s.NumKVHeads), int64(s.HeadDim)}
	kvNew := []int64{1, n64, int64(s.NumKVHeads), int64(s.HeadDim)}
	if m.inputs[0], err = onnx.NewTensor(onnx.Shape{1, n64}, step.IDs); err != nil {
		return nil, fmt.Errorf("wrap input_ids: %w", err)
	}
	if m.inputs[1], err = onnx.NewTensor(onnx.Shape{1, n64}, step.Positions); err != nil {
		return nil, fmt.Errorf("wrap position_ids: %w", err)
	}
	if m.inputs[2], err = onnx.NewTensor(onnx.Shape{1, n64, p64 + n64}, step.Mask); err != nil {
		return nil, fmt.Errorf("wrap attention_mask: %w", err)
	}
	if m.inputs[3], err = onnx.NewTensor(onnx.Shape{int64(nl)}, step.LogitsIndex); err != nil {
		return nil, fmt.Errorf("wrap logits_index: %w", err)
	}
	if m.outputs[0], err = onnx.NewTensor(onnx.Shape{1, int64(nl), int64(s.VocabSize)}, m.logits); err != nil {
		return nil, fmt.Errorf("wrap logits: %w", err)
	}
	for l := range s.NumLayers {
		k, v := cache.Past(l)
		if m.inputs[4+2*l], err = onnx.NewTensor(onnx.Shape(kvPast), k); err != nil {
			return nil, fmt.Errorf("wrap past keys of layer %d: %w", l, err)
		}
		if m.inputs[5+2*l], err = onnx.NewTensor(onnx.Shape(kvPast), v); err != nil {
			return nil, fmt.Errorf("wrap past values of layer %d: %w", l, err)
		}
		if m.outputs[1+2*l], err = onnx.NewTensor(onnx.Shape(kvNew), m.presentK[l]); err != nil {
			return nil, fmt.Errorf("wrap present keys of layer %d: %w", l, err)
		}
		if m.outputs[2+2*l], err = onnx.NewTensor(onnx.Shape(kvNew), m.presentV[l]); err != nil {
			return nil, fmt.Errorf("wrap present values of layer %d: %w", l, err)
		}
	}

	if err := runCtx(ctx, m.session, m.inputs, m.outputs); err != nil {
		return nil, fmt.Errorf("run model on %d tokens after %d: %w", n, past, err)
	}
	if err := cache.Append(n, m.presentK, m.presentV); err != nil {
		return nil, fmt.Errorf("forward %d tokens after %d: %w", n, past, err)
	}
	return m.logits[:nl*s.VocabSize], nil
}

// checkStep validates a step before any native call: ONNX Runtime reports shape errors, but an id or
// logits index out of range may read out of bounds inside a Gather kernel instead.
func (m *Model) checkStep(step inference.Step, cache *inference.KVCache) error {
	n, past := len(step.IDs), cache.Len()
	switch {
	case n == 0:
		return errors.New("step has no tokens")
	case len(step.Positions) != n:
		return fmt.Errorf("step has %d positions for %d ids", len(step.Positions), n)
	case len(step.Mask) != n*(past+n):
		return fmt.Errorf("step mask has %d values, want %d x (%d past + %d new)", len(step.Mask), n, past, n)
	case len(step.LogitsIndex) == 0:
		return errors.New("step asks for no logits")
	case past+n > cache.Cap():
		return fmt.Errorf("cache holds %d of %d positions: %w", past, cache.Cap(), inference.ErrContextFull)
	}
	for _, id := range step.IDs {
		if id < 0 || id >= int64(m.spec.VocabSize) {
			return fmt.Errorf("token id %d outside vocabulary of %d", id, m.spec.VocabSize)
		}
	}
	for _, p := range step.Positions {
		if p < 0 {
			return fmt.Errorf("negative position %d", p)
		}
	}
	for _, i := range step.LogitsIndex {
		if i < 0 || i >= int64(n) {
			return fmt.Errorf("logits index %d outside the %d new tokens", i, n)
		}
	}
	if k, _ := cache.Past(0); len(k) != past*m.stride {
		return fmt.Errorf("cache has %d floats per position, model needs %d (num_kv_heads x head_dim)", len(k)/max(past, 1), m.stride)
	}
	return nil
}

// grow makes the output buffers large enough for n new tokens and nl logits rows. They only grow, so
// steady-state decoding allocates nothing here.
func (m *Model) grow(n, nl int) {
	if need := nl * m.spec.VocabSize; len(m.logits) < need {
		m.logits = make([]float32, need)
	}
	if need := n * m.stride; len(m.presentK[0]) < need {
		for l := range m.presentK {
			m.presentK[l] = make([]float32, need)
			m.presentV[l] = make([]float32, need)
		}
	}
}

// release destroys the current call's tensors. Destroying a tensor frees the OrtValue only; the Go
// buffers it wrapped stay with their owners.
func (m *Model) release() {
	for i, v := range m.inputs {
		if v != nil {
			_ = v.Destroy() // Tensor.Destroy cannot fail
			m.inputs[i] = nil
		}
	}
	for i, v := range m.outputs {
		if v != nil {
			_ = v.Destroy()
			m.outputs[i] = nil
		}
	}
}

// Close destroys the session. It is idempotent; Forward after Close returns ErrClosed.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.session == nil {
		return nil
	}
	err := m.session.Destroy()
	m.session = nil
	m.logits, m.presentK, m.presentV = nil, nil, nil
	if err != nil {
		return fmt.Errorf("close model: %w", err)
	}
	return nil
}
