package inference

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
