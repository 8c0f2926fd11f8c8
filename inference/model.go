package inference

import (
	"context"
	"errors"
	"fmt"
)

// ErrNativeDisabled is returned by the native seams when the binary was built without the native
// libraries (build with -tags "ort tokenizers", see the Makefile).
var ErrNativeDisabled = errors.New("native inference disabled: build with -tags \"ort tokenizers\" (make build)")

// Tokenizer turns text into token ids exactly as the training pipeline did (MODEL_FORMAT.md,
// "Tokenisation rules"). Implementations must be safe for concurrent use.
type Tokenizer interface {
	// Encode returns the ids of text without adding special tokens. Added special tokens that occur in
	// text (such as "[COPY]") are recognised. The returned slice is owned by the caller.
	Encode(text string) ([]int64, error)
	// Close releases native resources. It is idempotent.
	Close() error
}

// Step is one forward call of a decoder with tree attention (MODEL_FORMAT.md, "model.onnx").
//
// With n = len(IDs) new tokens and past = cache.Len() tokens already in the cache:
//   - IDs, Positions: length n.
//   - Mask: n x (past+n) float32, row-major, additive (0 attends, MaskedValue masks). Row i belongs to new
//     token i; columns are the past tokens followed by the new ones.
//   - LogitsIndex: indices into the new tokens whose logits the caller wants, m >= 1.
//
// The caller owns every slice and may reuse them after Forward returns.
type Step struct {
	IDs         []int64
	Positions   []int64
	Mask        []float32
	LogitsIndex []int64
}

// MaskedValue is the additive mask value for a position a token must not attend to.
const MaskedValue float32 = -1e9

// Model runs one decoder step with an explicit KV cache. Implementations need not be safe for
// concurrent use; the engine serialises calls per model instance.
type Model interface {
	// Forward runs step against the first cache.Len() positions of cache, appends the n new tokens' keys
	// and values to cache (so cache.Len() grows by n), and returns the logits at step.LogitsIndex as an
	// m x VocabSize row-major slice. The returned slice is owned by the model and valid only until the
	// next Forward or Close. ctx is checked before the native Run, and its end stops a Run in progress
	// (the error then wraps ctx.Err(); the cache is left as it was).
	Forward(ctx context.Context, step Step, cache *KVCache) ([]float32, error)
	// Spec describes the model's shapes.
	Spec() Spec
	// Close releases native resources. It is idempotent.
	Close() error
}

// Spec gives the shapes a Model works with; it mirrors the manifest.
type Spec struct {
	VocabSize  int
	NumLayers  int
	NumKVHeads int
	HeadDim    int
}

// KVCache holds the keys and values of every position fed to a model so far, per layer, in the
// sequence-major layout [position][kv_head][head_dim] float32. Each layer's keys and values are one
// buffer whose first Len() positions are valid, so a native model can pass that prefix to the runtime
// without copying. Positions of pruned beams stay in the cache; the attention mask hides them.
type KVCache struct {
	spec   Spec
	stride int // floats per position per layer (kv_heads * head_dim)
	n      int
	keys   [][]float32
	values [][]float32
}

// NewKVCache allocates a cache for up to capacity positions of a model with the given spec.
func NewKVCache(spec Spec, capacity int) *KVCache {
	stride := spec.NumKVHeads * spec.HeadDim
	c := &KVCache{spec: spec, stride: stride, keys: make([][]float32, spec.NumLayers), values: make([][]float32, spec.NumLayers)}
	for l := range spec.NumLayers {
		c.keys[l] = make([]float32, capacity*stride)
		c.values[l] = make([]float32, capacity*stride)
	}
	return c
}

// Len returns the number of positions held.
func (c *KVCache) Len() int { return c.n }

// Cap returns the number of positions the cache can hold.
func (c *KVCache) Cap() int {
	if len(c.keys) == 0 {
		return 0
	}
	return len(c.keys[0]) / c.stride
}

// Reset empties the cache without freeing its buffers, so it can serve the next request.
func (c *KVCache) Reset() { c.n = 0 }

// Truncate drops every position from n on (used to roll back a speculative step).
func (c *KVCache) Truncate(n int) {
	if n < c.n {
		c.n = n
	}
}

// Past returns layer l's valid keys and values (Len() positions).
func (c *KVCache) Past(l int) (keys, values []float32) {
	end := c.n * c.stride
	return c.keys[l][:end], c.values[l][:end]
}

// Append copies n new positions of every layer into the cache. newKeys[l] and newValues[l] hold n
// positions each in the cache layout. It fails, leaving the cache unchanged, when capacity is exceeded.
func (c *KVCache) Append(n int, newKeys, newValues [][]float32) error {
	if c.n+n > c.Cap() {
		return fmt.Errorf("append %d positions to kv cache of %d/%d: %w", n, c.n, c.Cap(), ErrContextFull)
	}
	start, end := c.n*c.stride, (c.n+n)*c.stride
	for l := range c.keys {
		copy(c.keys[l][start:end], newKeys[l][:n*c.stride])
		copy(c.values[l][start:end], newValues[l][:n*c.stride])
	}
	c.n += n
	return nil
}

// ErrContextFull means a request needs more positions than the KV cache or the model allows.
var ErrContextFull = errors.New("context full")
