package dense

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
)

// Tokenizer turns text into word-piece ids without special tokens (inference/tok implements it). It
// must be safe for concurrent use.
type Tokenizer interface {
	Encode(text string) ([]int64, error)
	Close() error
}

// Session runs the encoder graph on one padded batch (inference/ort's Encoder implements it). It must be
// safe for concurrent use.
type Session interface {
	// Run takes input_ids and attention_mask as batch x seqLen row-major int64 (token_type_ids, when the
	// graph has them, are zeros the session supplies) and returns last_hidden_state, batch x seqLen x dims
	// row-major, owned by the caller. ctx ending stops a Run in progress (an error wrapping ctx.Err()).
	Run(ctx context.Context, ids, mask []int64, batch, seqLen int) ([]float32, error)
	Close() error
}

// Options tune an Encoder. The zero value is valid.
type Options struct {
	// BatchSize is the most passages one Run embeds, at most the manifest's max_batch. Default 16.
	BatchSize int
	// MaxBatchTokens bounds batch x padded length of one Run, so a batch of long passages does not hold
	// gigabytes of activations. Default 8192.
	MaxBatchTokens int
	// MaxRuns is the most Runs at once; a call beyond it waits for a free one (until its context ends), so
	// that a burst of queries queues in Go instead of running as as many CPU-bound threads, which starve the
	// process's own network and timers (a request's deadline then fires seconds late). Default: the cores Go
	// may use (runtime.GOMAXPROCS).
	MaxRuns int
	// PassageRuns is how many of one Passages call's batches run at once (each still within MaxRuns).
	// Default 1. A command that embeds a corpus on one-thread sessions sets it to the cores, so that the
	// cores each run a passage instead of sharing one passage's products: about 1.3x the documents a second
	// of one run on two threads, on two cores (docs/evaluation.md, "Enrichment over several workers").
	PassageRuns int
}

// Encoder embeds queries and passages. It is safe for concurrent use; Close releases the session and
// the tokenizer once the calls in progress have returned.
type Encoder struct {
	man    *Manifest
	tok    Tokenizer
	sess   Session
	opts   Options
	runs   chan struct{} // a token a Run in progress (Options.MaxRuns)
	closed atomic.Bool
}

// ErrClosed is returned by the Encoder's methods after Close.
var ErrClosed = errors.New("encoder closed")

// New builds an Encoder from its manifest and native seams, which it owns from then on (Close closes them).
func New(man *Manifest, tok Tokenizer, sess Session, opts Options) (*Encoder, error) {
	if man == nil || tok == nil || sess == nil {
		return nil, errors.New("new encoder: manifest, tokenizer and session are required")
	}
	if err := man.Validate(); err != nil {
		return nil, fmt.Errorf("new encoder: %w", err)
	}
	opts.BatchSize = cmp.Or(opts.BatchSize, 16)
	if man.MaxBatch > 0 {
		opts.BatchSize = min(opts.BatchSize, man.MaxBatch)
	}
	opts.MaxBatchTokens = cmp.Or(opts.MaxBatchTokens, 8192)
	opts.MaxRuns = cmp.Or(opts.MaxRuns, runtime.GOMAXPROCS(0))
	opts.PassageRuns = cmp.Or(opts.PassageRuns, 1)
	if opts.BatchSize < 1 || opts.MaxBatchTokens < man.MaxTokens || opts.MaxRuns < 1 || opts.PassageRuns < 1 {
		return nil, fmt.Errorf("new encoder: batch size %d (want >= 1), max batch tokens %d (want >= max_tokens %d), max runs %d (want >= 1), passage runs %d (want >= 1)",
			opts.BatchSize, opts.MaxBatchTokens, man.MaxTokens, opts.MaxRuns, opts.PassageRuns)
	}
	return &Encoder{man: man, tok: tok, sess: sess, opts: opts, runs: make(chan struct{}, opts.MaxRuns)}, nil
}

// Name returns the manifest's name: the identity of the vectors this encoder makes.
func (e *Encoder) Name() string { return e.man.Name }

// Dims returns the vectors' length.
func (e *Encoder) Dims() int { return e.man.Dims }

// Manifest returns the encoder's manifest.
func (e *Encoder) Manifest() *Manifest { return e.man }

// PassageText is the text a document is embedded from: its title and its text on the next line. Ingest,
// backfill and evaluation all use it, so a document's vector is the same whichever wrote it.
func PassageText(title, text string) string {
	switch {
	case title == "":
		return text
	case text == "":
		return title
	}
	return title + "\n" + text
}

// Query embeds one query (with the manifest's query prefix).
func (e *Encoder) Query(ctx context.Context, query string) ([]float32, error) {
	vs, err := e.embed(ctx, []string{e.man.QueryPrefix + query})
	if err != nil {
		return nil, fmt.Errorf("embed query: %w", err)
	}
	return vs[0], nil
}

// Passages embeds texts (each with the manifest's passage prefix; see PassageText), in batches of
// similar length, and returns their vectors in the order of texts.
func (e *Encoder) Passages(ctx context.Context, texts []string) ([][]float32, error) {
	in := make([]string, len(texts))
	for i, t := range texts {
		in[i] = e.man.PassagePrefix + t
	}
	vs, err := e.embed(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("embed %d passages: %w", len(texts), err)
	}
	return vs, nil
}

// Tokens returns the ids the encoder runs on for text: [CLS], at most max_tokens-2 word pieces, [SEP]
// (the tokenizer's own truncation is not used: tokenizer.json files of these models set none).
func (e *Encoder) Tokens(text string) ([]int64, error) {
	if strings.IndexByte(text, 0) >= 0 {
		return nil, errors.New("text contains a NUL byte")
	}
	ids, err := e.tok.Encode(text)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	ids = ids[:min(len(ids), e.man.MaxTokens-2)]
	out := make([]int64, 0, len(ids)+2)
	out = append(out, e.man.CLSID)
	out = append(out, ids...)
	return append(out, e.man.SEPID), nil
}

func (e *Encoder) embed(ctx context.Context, texts []string) ([][]float32, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	toks := make([][]int64, len(texts))
	for i, t := range texts {
		ids, err := e.Tokens(t)
		if err != nil {
			return nil, fmt.Errorf("text %d: %w", i, err)
		}
		toks[i] = ids
	}
	out := make([][]float32, len(texts))
	bs := batches(toks, e.opts.BatchSize, e.opts.MaxBatchTokens)
	if len(bs) == 1 { // a query: no goroutine
		if err := e.run(ctx, toks, bs[0], out); err != nil {
			return nil, err
		}
		return out, nil
	}
	// PassageRuns batches at once (one: in turn), each writing only its own rows of out; the first error
	// stops the rest.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(e.opts.PassageRuns)
	for _, b := range bs {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			return e.run(gctx, toks, b, out)
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// batches groups the indices of toks by length (longest first, so padding stays small) into batches of
// at most size inputs and maxTokens padded tokens.
func batches(toks [][]int64, size, maxTokens int) [][]int {
	order := make([]int, len(toks))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(len(toks[b]), len(toks[a])) })
	var out [][]int
	for start := 0; start < len(order); {
		longest := len(toks[order[start]])
		n := max(1, min(size, maxTokens/max(longest, 1), len(order)-start))
		out = append(out, order[start:start+n])
		start += n
	}
	return out
}

// run embeds the inputs idx of toks in one Run and writes their vectors into out.
func (e *Encoder) run(ctx context.Context, toks [][]int64, idx []int, out [][]float32) error {
	seqLen := 0
	for _, i := range idx {
		seqLen = max(seqLen, len(toks[i]))
	}
	n := len(idx)
	ids, mask := make([]int64, n*seqLen), make([]int64, n*seqLen)
	for r, i := range idx {
		row := ids[r*seqLen : (r+1)*seqLen]
		copy(row, toks[i])
		for j := len(toks[i]); j < seqLen; j++ {
			row[j] = e.man.PadID
		}
		for j := range len(toks[i]) {
			mask[r*seqLen+j] = 1
		}
	}
	select {
	case e.runs <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for the encoder: %w", ctx.Err())
	}
	hidden, err := func() ([]float32, error) {
		defer func() { <-e.runs }()
		return e.sess.Run(ctx, ids, mask, n, seqLen)
	}()
	if err != nil {
		return fmt.Errorf("run encoder on %d x %d tokens: %w", n, seqLen, err)
	}
	d := e.man.Dims
	if len(hidden) != n*seqLen*d {
		return fmt.Errorf("run encoder on %d x %d tokens: %d floats back, want %d (dims %d)", n, seqLen, len(hidden), n*seqLen*d, d)
	}
	for r, i := range idx {
		v := make([]float32, d)
		row := hidden[r*seqLen*d : (r+1)*seqLen*d]
		switch e.man.Pooling {
		case PoolCLS:
			copy(v, row[:d])
		case PoolMean:
			count := len(toks[i])
			for j := range count {
				for k := range d {
					v[k] += row[j*d+k]
				}
			}
			for k := range v {
				v[k] /= float32(count)
			}
		}
		if e.man.Normalize {
			normalize(v)
		}
		out[i] = v
	}
	return nil
}

// normalize scales v to unit length (a zero vector stays zero).
func normalize(v []float32) {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	if s == 0 {
		return
	}
	inv := float32(1 / math.Sqrt(s))
	for i := range v {
		v[i] *= inv
	}
}

// Normalized returns a copy of v scaled to unit length (a zero vector stays zero), as the encoder's own
// vectors are when its manifest says normalize.
func Normalized(v []float32) []float32 {
	out := slices.Clone(v)
	normalize(out)
	return out
}

// Dot returns the dot product of a and b (the cosine for normalised vectors); 0 when their lengths differ.
func Dot(a, b []float32) float64 {
	if len(a) != len(b) {
		return 0
	}
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

// Close closes the session and the tokenizer. It is idempotent.
func (e *Encoder) Close() error {
	if !e.closed.CompareAndSwap(false, true) {
		return nil
	}
	return errors.Join(e.sess.Close(), e.tok.Close())
}
