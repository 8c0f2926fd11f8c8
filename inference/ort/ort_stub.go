//go:build !ort

package ort

import (
	"context"
	"errors"
	"log/slog"

	"github.com/icicle-search/sidecar/inference"
)

// ErrClosed is returned by Forward after Close.
var ErrClosed = errors.New("model closed")

// Init returns inference.ErrNativeDisabled: this binary was built without the "ort" tag.
func Init(libPath string) error { return inference.ErrNativeDisabled }

// Shutdown does nothing and returns nil.
func Shutdown() error { return nil }

// Version returns "".
func Version() string { return "" }

// Model is the stub built without the "ort" tag; it cannot be loaded.
type Model struct{}

var _ inference.Model = (*Model)(nil)

// Load returns inference.ErrNativeDisabled: this binary was built without the "ort" tag.
func Load(modelPath string, spec inference.Spec, opts Options, logger *slog.Logger) (*Model, error) {
	return nil, inference.ErrNativeDisabled
}

// Forward returns inference.ErrNativeDisabled.
func (m *Model) Forward(ctx context.Context, step inference.Step, cache *inference.KVCache) ([]float32, error) {
	return nil, inference.ErrNativeDisabled
}

// Spec returns the zero Spec.
func (m *Model) Spec() inference.Spec { return inference.Spec{} }

// Provider returns "".
func (m *Model) Provider() string { return "" }

// Close does nothing and returns nil.
func (m *Model) Close() error { return nil }

// Encoder is the stub built without the "ort" tag; it cannot be loaded.
type Encoder struct{}

// LoadEncoder returns inference.ErrNativeDisabled: this binary was built without the "ort" tag.
func LoadEncoder(path string, dims int, typeIDs bool, opts Options, logger *slog.Logger) (*Encoder, error) {
	return nil, inference.ErrNativeDisabled
}

// Run returns inference.ErrNativeDisabled.
func (e *Encoder) Run(ctx context.Context, ids, mask []int64, batch, seqLen int) ([]float32, error) {
	return nil, inference.ErrNativeDisabled
}

// Provider returns "".
func (e *Encoder) Provider() string { return "" }

// Close does nothing and returns nil.
func (e *Encoder) Close() error { return nil }
