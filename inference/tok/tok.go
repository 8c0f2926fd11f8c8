//go:build tokenizers

package tok

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/daulet/tokenizers"

	"github.com/icicle-search/sidecar/inference"
)

// ErrNULByte is returned by Encode for text that contains a NUL byte: the native library reads text as a
// C string and would silently drop everything from the NUL on.
var ErrNULByte = errors.New("text contains a NUL byte")

// ErrClosed is returned by Encode after Close.
var ErrClosed = errors.New("tokenizer closed")

// Tokenizer encodes text with a Hugging Face tokenizer.json. It implements inference.Tokenizer and is
// safe for concurrent use: Encode calls run in parallel (the Rust tokenizer is immutable once loaded);
// Close waits for running calls to finish.
type Tokenizer struct {
	mu sync.RWMutex // read-held by Encode, write-held by Close, so Close never frees a tokenizer in use
	t  *tokenizers.Tokenizer
}

var _ inference.Tokenizer = (*Tokenizer)(nil)

// Load reads the tokenizer.json file at path.
func Load(path string) (*Tokenizer, error) {
	// The native loader's error for a missing file is terse; name the file ourselves.
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	t, err := tokenizers.FromFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	return &Tokenizer{t: t}, nil
}

// Encode returns the ids of text without adding special tokens; see inference.Tokenizer. Empty text
// gives an empty slice. Invalid UTF-8 is replaced by U+FFFD before encoding (the native library does
// this). Text containing a NUL byte is refused with ErrNULByte.
func (t *Tokenizer) Encode(text string) ([]int64, error) {
	if strings.IndexByte(text, 0) >= 0 {
		return nil, fmt.Errorf("encode %d bytes: %w", len(text), ErrNULByte)
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.t == nil {
		return nil, ErrClosed
	}
	if text == "" {
		return []int64{}, nil
	}
	// EncodeWithOptions without options asks the library for ids only (Encode would also build the token
	// strings).
	enc := t.t.EncodeWithOptions(text, false)
	ids := make([]int64, len(enc.IDs))
	for i, id := range enc.IDs {
		ids[i] = int64(id)
	}
	return ids, nil
}

// VocabSize returns the number of ids the tokenizer can produce, added tokens included, or 0 after Close.
func (t *Tokenizer) VocabSize() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.t == nil {
		return 0
	}
	return int(t.t.VocabSize())
}

// Close frees the native tokenizer. It is idempotent; Encode after Close returns ErrClosed.
func (t *Tokenizer) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.t == nil {
		return nil
	}
	err := t.t.Close()
	t.t = nil
	return err
}
