//go:build ort

package ort

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	onnx "github.com/yalue/onnxruntime_go"

	"github.com/icicle-search/sidecar/inference/dense"
)

// Encoder is a bi-encoder session (a BERT-style graph: input_ids, attention_mask and optionally
// token_type_ids in, last_hidden_state out) implementing dense.Session. Runs may be concurrent (ONNX
// Runtime sessions are); Close waits for the Runs in progress.
type Encoder struct {
	mu       sync.RWMutex
	session  *onnx.DynamicAdvancedSession
	dims     int
	typeIDs  bool
	provider string
}

var _ dense.Session = (*Encoder)(nil)

// LoadEncoder opens the encoder graph at path, checks that it takes int64 input_ids and attention_mask
// (token_type_ids too when typeIDs) and gives a float last_hidden_state of dims values per position,
// and creates a session. Init must have been called.
func LoadEncoder(path string, dims int, typeIDs bool, opts Options, logger *slog.Logger) (*Encoder, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if !onnx.IsInitialized() {
		return nil, fmt.Errorf("load encoder %s: onnx runtime not initialised: call ort.Init with the library path first", path)
	}
	if err := checkOptions(opts); err != nil {
		return nil, fmt.Errorf("load encoder %s: %w", path, err)
	}
	start := time.Now()
	ins := []string{"input_ids", "attention_mask"}
	if typeIDs {
		ins = append(ins, "token_type_ids")
	}
	outs := []string{"last_hidden_state"}
	if err := checkEncoderIO(path, dims, ins, outs); err != nil {
		return nil, err
	}
	session, err := newSession(path, ins, outs, opts, opts.Provider == ProviderCUDA)
	if err != nil {
		return nil, fmt.Errorf("load encoder %s: %w", path, err)
	}
	logger.Info("onnx encoder loaded", "model", path, "dims", dims, "threads", opts.Threads,
		"took_ms", time.Since(start).Milliseconds())
	return &Encoder{session: session, dims: dims, typeIDs: typeIDs, provider: cmpOr(opts.Provider, ProviderCPU)}, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// checkEncoderIO compares the graph's inputs and outputs with what Run passes, reporting every mismatch.
func checkEncoderIO(path string, dims int, ins, outs []string) error {
	gotIn, gotOut, err := signature(path)
	if err != nil {
		return fmt.Errorf("check encoder %s: %w", path, err)
	}
	var errs []error
	find := func(kind string, got []onnx.InputOutputInfo, name string, dtype onnx.TensorElementDataType, rank int, last int64) {
		for _, g := range got {
			if g.Name != name {
				continue
			}
			switch {
			case g.OrtValueType != onnx.ONNXTypeTensor || g.DataType != dtype:
				errs = append(errs, fmt.Errorf("%s %q is %s, want a %s tensor", kind, name, g.String(), dtype))
			case len(g.Dimensions) != rank:
				errs = append(errs, fmt.Errorf("%s %q has shape %s, want rank %d", kind, name, g.Dimensions, rank))
			case last > 0 && g.Dimensions[rank-1] >= 0 && g.Dimensions[rank-1] != last:
				errs = append(errs, fmt.Errorf("%s %q has shape %s, want last dim %d", kind, name, g.Dimensions, last))
			}
			return
		}
		errs = append(errs, fmt.Errorf("%s %q missing", kind, name))
	}
	for _, n := range ins {
		find("input", gotIn, n, onnx.TensorElementDataTypeInt64, 2, 0)
	}
	if len(gotIn) != len(ins) {
		errs = append(errs, fmt.Errorf("graph has %d inputs, the manifest describes %d (token_type_ids?)", len(gotIn), len(ins)))
	}
	find("output", gotOut, outs[0], onnx.TensorElementDataTypeFloat, 3, int64(dims))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("check encoder %s (dims %d): %w", path, dims, err)
	}
	return nil
}

// Run implements dense.Session.
func (e *Encoder) Run(ctx context.Context, ids, mask []int64, batch, seqLen int) (hidden []float32, err error) {
	defer func() {
		if r := recover(); r != nil {
			hidden, err = nil, fmt.Errorf("encoder run: panic: %v", r)
		}
	}()
	n := batch * seqLen
	if batch < 1 || seqLen < 1 || len(ids) != n || len(mask) != n {
		return nil, fmt.Errorf("encoder run: %d ids and %d mask values for %d x %d", len(ids), len(mask), batch, seqLen)
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.session == nil {
		return nil, ErrClosed
	}
	shape := onnx.Shape{int64(batch), int64(seqLen)}
	var values []onnx.Value
	defer func() {
		for _, v := range values {
			_ = v.Destroy()
		}
	}()
	wrap := func(data []int64) error {
		t, err := onnx.NewTensor(shape, data)
		if err != nil {
			return err
		}
		values = append(values, t)
		return nil
	}
	if err := wrap(ids); err != nil {
		return nil, fmt.Errorf("wrap input_ids: %w", err)
	}
	if err := wrap(mask); err != nil {
		return nil, fmt.Errorf("wrap attention_mask: %w", err)
	}
	if e.typeIDs {
		if err := wrap(make([]int64, n)); err != nil {
			return nil, fmt.Errorf("wrap token_type_ids: %w", err)
		}
	}
	hidden = make([]float32, n*e.dims)
	out, err := onnx.NewTensor(onnx.Shape{int64(batch), int64(seqLen), int64(e.dims)}, hidden)
	if err != nil {
		return nil, fmt.Errorf("wrap last_hidden_state: %w", err)
	}
	inputs := values
	values = append(values, out)
	if err := runCtx(ctx, e.session, inputs, []onnx.Value{out}); err != nil {
		return nil, fmt.Errorf("run encoder: %w", err)
	}
	return hidden, nil
}

// Provider returns the execution provider in use.
func (e *Encoder) Provider() string { return e.provider }

// Close destroys the session after the Runs in progress. It is idempotent.
func (e *Encoder) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.session == nil {
		return nil
	}
	err := e.session.Destroy()
	e.session = nil
	if err != nil {
		return fmt.Errorf("close encoder: %w", err)
	}
	return nil
}
