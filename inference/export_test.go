package inference

import (
	"context"
	"slices"
)

// NewFakeEngine returns an engine over the scripted fake model and byte-level fake tokenizer
// (fake_test.go) with a prompt budget of maxContext tokens, for benchmarks in package inference_test.
func NewFakeEngine(seen []string, maxContext int, opts EngineOptions) (*Engine, error) {
	man := fakeManifest()
	man.MaxContextTokens = maxContext
	return NewEngine(man, fakeTokenizer{}, []Model{&fakeModel{logitsFn: hashLogits}}, seen, opts)
}

// OneRunCopyMaskBytes is the attention mask the copy route built before it fed only the tokens up to
// the last branching node and chunked its tree: [COPY] and every non-end token of the context trie over
// cands' in-context titles in one Run, after the prompt. It is the "before" figure of the benchmarks.
func (e *Engine) OneRunCopyMaskBytes(query string, cands []Candidate, opts Options) (int64, error) {
	if opts.MaxPromptTokens <= 0 || opts.MaxPromptTokens > e.man.MaxContextTokens {
		opts.MaxPromptTokens = e.man.MaxContextTokens
	}
	p, err := e.prompts.Build(query, cands, PromptOptions{MaxTokens: opts.MaxPromptTokens,
		MaxSummaryTokens: max(opts.MaxSummaryTokens, 256), TitleOnly: opts.TitleOnly})
	if err != nil {
		return 0, err
	}
	var titles []string
	dup := map[string]bool{}
	for _, c := range cands[:p.InContext] {
		if !dup[c.Title] {
			dup[c.Title] = true
			titles = append(titles, c.Title)
		}
	}
	seqs, err := docidSeqs(e.tok, titles, e.man.EndTokenID)
	if err != nil {
		return 0, err
	}
	t, err := BuildTrie(seqs, e.man.EndTokenID)
	if err != nil {
		return 0, err
	}
	n := int64(t.Len() - len(titles)) // [COPY] for the root, every inner node; not the end leaves
	return n * (int64(len(p.IDs)) + n) * 4, nil
}

// PrefillLogits builds the prompt of query and cands as Rank does and returns a copy of the logits after its
// last token: read by the engine's prefill (block reading when the engine has a store), and, as the reference
// for block reading, by one Run of the whole prompt under the engine's layout as a mask and positions (a
// candidate block over itself, shared: and the header; the query over everything), nothing stored or rotated.
func (e *Engine) PrefillLogits(ctx context.Context, query string, cands []Candidate, opts Options) (got, ref []float32, err error) {
	_, p, err := e.prompt(query, cands, opts)
	if err != nil {
		return nil, nil, err
	}
	w := <-e.workers
	defer func() { e.workers <- w }()
	n := len(p.IDs)
	if w.cache.Cap() < n {
		w.cache = NewKVCache(w.model.Spec(), n)
	}
	w.cache.Reset()
	d := decoding{e: e, w: w, prompt: p, p: n}
	if e.blocks != nil {
		pl := d.planBlocks()
		d.plan = &pl
	}
	z, err := d.prefill(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	got = slices.Clone(z)
	w.cache.Reset()
	ids, pos := slices.Clone(p.IDs), make([]int64, n)
	mask := make([]float32, n*n)
	h, q := p.Segments[0], p.Segments[len(p.Segments)-1]
	seg := 0
	for t := range n {
		pos[t] = int64(t)
		if t >= q {
			pos[t] += int64(d.shift)
		}
		for seg < len(p.Segments) && t >= p.Segments[seg] {
			seg++
		}
		row := maskRow(mask, t, n, t+1)
		if e.blocks != nil && t >= h && t < q { // a candidate block: itself (shared: and the header) only
			from := 0
			if e.layout == BlockShared {
				from, pos[t] = h, int64(h+t-p.Segments[seg-1])
			}
			for j := from; j < p.Segments[seg-1]; j++ {
				row[j] = MaskedValue
			}
		}
	}
	z, err = w.model.Forward(ctx, Step{IDs: ids, Positions: pos, Mask: mask, LogitsIndex: []int64{int64(n - 1)}}, w.cache)
	if err != nil {
		return nil, nil, err
	}
	return got, slices.Clone(z), nil
}

// HoldSessions takes every session of the engine, as requests in flight would, until release is called.
func (e *Engine) HoldSessions() (release func()) {
	held := make([]*worker, 0, cap(e.workers))
	for range cap(e.workers) {
		held = append(held, <-e.workers)
	}
	return func() {
		for _, w := range held {
			e.workers <- w
		}
	}
}

// PromptIDs returns the ids and segment ends of the prompt Rank builds for query and cands.
func (e *Engine) PromptIDs(query string, cands []Candidate, opts Options) (ids []int64, segments []int, err error) {
	_, p, err := e.prompt(query, cands, opts)
	if err != nil {
		return nil, nil, err
	}
	return p.IDs, p.Segments, nil
}
