//go:build !tokenizers

package tok

import (
	"errors"

	"github.com/icicle-search/sidecar/inference"
)

// ErrNULByte is returned by Encode for text that contains a NUL byte: the native library reads text as a
// C string and would silently drop everything from the NUL on.
var ErrNULByte = errors.New("text contains a NUL byte")

// ErrClosed is returned by Encode after Close.
var ErrClosed = errors.New("tokenizer closed")

// Tokenizer is the stub built without the "tokenizers" tag; it cannot be loaded.
type Tokenizer struct{}

var _ inference.Tokenizer = (*Tokenizer)(nil)

// Load returns inference.ErrNativeDisabled: this binary was built without the "tokenizers" tag.
func Load(path string) (*Tokenizer, error) { return nil, inference.ErrNativeDisabled }

// Encode returns inference.ErrNativeDisabled.
func (t *Tokenizer) Encode(text string) ([]int64, error) { return nil, inference.ErrNativeDisabled }

// VocabSize returns 0.
func (t *Tokenizer) VocabSize() int { return 0 }

// Close does nothing and returns nil.
func (t *Tokenizer) Close() error { return nil }
