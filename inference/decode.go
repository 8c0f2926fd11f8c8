package inference

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Route says where a ranked docid came from.
type Route string

const (
	// RouteCopy marks a docid copied from the in-context candidates after the [COPY] router token.
	RouteCopy Route = "copy"
	// RouteParametric marks a docid of the seen corpus generated from the model's memory.
	RouteParametric Route = "parametric"
)

// ErrEmptyAllowedSet means no token was allowed at a decoding step (no candidates and no seen
// corpus); decoding never falls through to unconstrained generation.
var ErrEmptyAllowedSet = errors.New("no allowed tokens: empty context and empty seen corpus")

// ErrClosed means the engine was closed.
var ErrClosed = errors.New("engine closed")

// Beam is one ranked docid.
type Beam struct {
	// DocID is the title generated.
	DocID string
	// Route is RouteCopy or RouteParametric.
	Route Route
	// Score is the docid's log-probability, renormalised over the allowed tokens at every step
	// (MODEL_FORMAT.md, "Scores").
	Score float64
	// Candidate is the index of the candidate copied (RouteCopy), -1 for RouteParametric.
	Candidate int
}

// Stats counts the work one Rank did.
type Stats struct {
	// ForwardRuns is the number of Model.Forward calls (prefill chunks included).
	ForwardRuns int
	// TokensFed is the number of tokens fed to the model, prompt included.
	TokensFed int
	// KVBytesMoved is the KV-cache bytes the model returned and the engine appended.
	KVBytesMoved int64
	// CopyRuns is the number of Runs of the copy route (more than 1 when its mask was chunked).
	CopyRuns int
	// CopyMaskBytes is the largest attention mask of one copy-route Run, in bytes (bounded by
	// EngineOptions.CopyMaskBytes unless a single subtree of the context trie is larger).
	CopyMaskBytes int64
	// Prefill and Decode split the time spent in the model.
	Prefill, Decode time.Duration
	// BlockHits and BlockMisses count the prompt's blocks (header included) found in and added to the
	// block store (block reading only).
	BlockHits, BlockMisses int
}

// Result is the outcome of Rank.
type Result struct {
	// Beams is the ranking, best first, at most Options.BeamWidth long.
	Beams []Beam
	// PCopy is the router probability p([COPY]) at step 0, renormalised over the step-0 allowed set.
	PCopy float64
	// InContext is the number of candidates, from the first, that were in the prompt.
	InContext int
	// PromptTokens is the prompt length in tokens.
	PromptTokens int
	// SummaryTokens[i] is the number of summary tokens of candidate i that were kept.
	SummaryTokens []int
	Stats         Stats
}

// Options control one Rank call.
type Options struct {
	// BeamWidth is the number of docids returned and the parametric beam width (default 10).
	BeamWidth int
	// MaxPromptTokens bounds the prompt (0, or more than the manifest allows: the manifest's max_prompt_tokens,
	// else its max_context_tokens).
	MaxPromptTokens int
	// MaxSummaryTokens caps each summary (default 256).
	MaxSummaryTokens int
	// TitleOnly puts candidates in by title alone.
	TitleOnly bool
	// SummaryCandidates, when positive, gives only the first SummaryCandidates candidates their summaries;
	// the rest go in by title alone (PromptOptions.SummaryCandidates).
	SummaryCandidates int
	// Scoring is how a title's tokens are scored after step 0: ScoringTrie (the default) renormalises each
	// step over the trie's children there and takes a forced token (a node with one child) at no cost;
	// ScoringVocab normalises each step over the whole vocabulary, as the model's own distribution, so every
	// token of a title is paid for, forced or not (a path the model was not heading down then costs what the
	// model says it does).
	Scoring string
	// CopyLogPrior is added to log p([COPY]) where the copy route's titles are scored against the memory
	// route's (the router's calibration: negative leans to memory, positive to copying). It moves every copied
	// title's score alike; Result.PCopy stays the model's. Default 0.
	CopyLogPrior float64
	// CopyShift, when set, is added to each copied title's score: CopyShift(k), k its candidate's place in the
	// list (1 for the first). It is the caller's transform of a reading (rank.RankPrior: the first stage's
	// order as a prior over the copy route's pick), applied here, before the routes' answers are merged and
	// cut to BeamWidth and before the copied scores bound the memory route, so that both stay exact after it.
	// Nil (default): the model's scores alone.
	CopyShift func(place int) float64
	// MemoryScope, when not nil, is what the memory route may recall this call: the docids of the seen corpus
	// among these (others are ignored; none leaves the route out). A reranker's first stage has already found
	// the seen documents worth considering (every right answer of the memory routed by the first stage was in
	// its list: docs/research/2026-11-readers.md, "Routing by the first stage"); recalling among them instead of the whole
	// seen corpus spares the memory the titles the first stage ruled out. Nil: the whole seen corpus.
	MemoryScope []string
	// MemoryShift, when set with a MemoryScope, is added to each remembered title's score: MemoryShift(k), k
	// its docid's place in MemoryScope (1 for the first); the caller's transform, as CopyShift is over the copy
	// route. The route then follows every title of the scope (a beam as wide as the scope's seen docids), so
	// that the answer is the exact best after the shift. Nil (default): the model's scores alone.
	MemoryShift func(place int) float64
	// EachRoute keeps each route's best docid in the answer even when it scores below the top BeamWidth (it is
	// then added after them, so the answer may hold a docid or two more), and the memory route is then not
	// cut at the BeamWidth-th copied score. With a hundred candidates the copy route alone fills the top
	// BeamWidth, so without it the memory's best answer is often missing, and a rule that weighs the two routes'
	// answers against each other (the server's experimental.route_by_first_stage) cannot see it. Default false.
	EachRoute bool
	// Admit, if set, is called once the prompt is built and a session is free, before the first forward
	// pass, with the prompt's length in tokens; an error ends the call without running the model (returned
	// wrapped). The server's admission control uses it to refuse a run its cost model says cannot end
	// within the time left.
	Admit func(promptTokens int) error
}

// The values of Options.Scoring.
const (
	ScoringTrie  = "trie"
	ScoringVocab = "vocab"
)

// DefaultCopyMaskBytes is the default EngineOptions.CopyMaskBytes.
const DefaultCopyMaskBytes = 64 << 20

// EngineOptions configure NewEngine.
type EngineOptions struct {
	// PrefillChunk is the number of prompt tokens per prefill Run (default 512). Smaller chunks bound the
	// attention-mask buffer (chunk x prompt floats) and activation memory.
	PrefillChunk int
	// EncodeCacheEntries bounds the LRU of encoded prompt segments (summaries, titles, block pieces) that
	// repeat across requests for the same stored documents (default 16384; negative disables).
	EncodeCacheEntries int
	// CopyMaskBytes bounds the attention mask of one copy-route Run, tokens x (prompt+tokens) float32
	// (default 64 MiB; negative: no bound, the whole token tree in one Run). A larger tree is fed in
	// several Runs over the same prompt cache, with identical scores (decoding.copyRoute).
	CopyMaskBytes int64
	// Blocks, if set, turns block reading on (blocks.go): each candidate block is read on its own, kept in
	// this store and reused. It needs a manifest with rope_theta and a model trained for it to read as well
	// as it does causally. Nil reads every prompt causally.
	Blocks *BlockStore
	// BlockLayout is BlockContiguous (the default) or BlockShared.
	BlockLayout string
	// BlockModel, if set, computes the blocks (the header's and the candidates') instead of the request's
	// session: the fp32 graph when the sessions are int8 (loader.Options.Quantized). Dynamic int8 quantises a
	// Run's activations with one scale, so a block it computed would depend on the blocks computed beside it;
	// the fp32 graph's block is the same in any group, and the store holds what a float32 reader expects. It
	// is shared by the workers (Model.Forward serialises its Runs; a block Run's logits are never read), must
	// have the sessions' Spec, and the engine closes it.
	BlockModel Model
	// Logger receives debug lines; nil discards.
	Logger *slog.Logger
}

// Engine ranks candidates with a model. It is safe for concurrent use: each call borrows one of the
// models given to NewEngine (one per concurrent request) and waits for one when all are busy.
type Engine struct {
	man     *Manifest
	tok     Tokenizer
	prompts *PromptBuilder
	global  *Trie
	seen    []string
	// seenSeqs[i] is seen[i]'s trie sequence (empty without the parametric route); seenAt indexes seen.
	seenSeqs [][]int64
	seenAt   map[string]int
	workers  chan *worker
	chunk    int
	// copyMaskBytes is EngineOptions.CopyMaskBytes with its default.
	copyMaskBytes int64
	// blocks and freqs serve block reading (EngineOptions.Blocks); blocks is nil without it.
	blocks *BlockStore
	layout string
	freqs  []float64
	// placeWorkers is how many goroutines place a request's stored blocks: the cores per session.
	placeWorkers int
	// blockModel computes blocks (EngineOptions.BlockModel); nil: each worker's own model.
	blockModel Model
	log        *slog.Logger
}

type worker struct {
	model Model
	cache *KVCache
	mask  []float32
	ids   []int64
	pos   []int64
	out   []int64
}

// NewEngine builds the global trie from the seen corpus and prepares one worker per model. The engine
// owns the models and closes them in Close; it does not own tok, which it wraps in an encode cache.
func NewEngine(man *Manifest, tok Tokenizer, models []Model, seen []string, opts EngineOptions) (*Engine, error) {
	if len(models) == 0 {
		return nil, errors.New("new engine: no models")
	}
	// The seen corpus is encoded once, directly; the cache serves the per-request segments. A model without
	// the parametric route gets an empty global trie: step 0 offers [COPY] alone.
	var recall []string
	if man.HasRoute(RouteParametric) {
		recall = seen
	}
	seqs, err := docidSeqs(tok, recall, man.EndTokenID)
	if err != nil {
		return nil, fmt.Errorf("new engine: seen corpus: %w", err)
	}
	global, err := BuildTrie(seqs, man.EndTokenID)
	if err != nil {
		return nil, fmt.Errorf("new engine: seen corpus: %w", err)
	}
	if n := cmp.Or(opts.EncodeCacheEntries, 16384); n > 0 {
		tok = newEncodeCache(tok, n)
	}
	prompts, err := NewPromptBuilder(tok, man.Template)
	if err != nil {
		return nil, fmt.Errorf("new engine: %w", err)
	}
	seenAt := make(map[string]int, len(recall))
	for i, d := range recall {
		seenAt[d] = i
	}
	e := &Engine{man: man, tok: tok, prompts: prompts, global: global, seen: seen, seenSeqs: seqs, seenAt: seenAt,
		workers: make(chan *worker, len(models)), chunk: cmp.Or(opts.PrefillChunk, 512),
		copyMaskBytes: cmp.Or(opts.CopyMaskBytes, DefaultCopyMaskBytes), log: opts.Logger}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if opts.Blocks != nil {
		if man.RopeTheta <= 0 {
			return nil, fmt.Errorf("new engine: block reading needs the manifest's rope_theta (model %s has none)", man.Name)
		}
		e.layout = cmp.Or(opts.BlockLayout, BlockContiguous)
		if e.layout != BlockContiguous && e.layout != BlockShared {
			return nil, fmt.Errorf("new engine: block layout %q: want %q or %q", e.layout, BlockContiguous, BlockShared)
		}
		e.blocks, e.freqs = opts.Blocks, ropeFreqs(man.RopeTheta, man.HeadDim)
		e.placeWorkers = max(1, runtime.GOMAXPROCS(0)/len(models))
		if opts.BlockModel != nil {
			if opts.BlockModel.Spec() != models[0].Spec() {
				return nil, fmt.Errorf("new engine: the block model's spec %+v is not the sessions' %+v", opts.BlockModel.Spec(), models[0].Spec())
			}
			e.blockModel = opts.BlockModel
		}
	} else if opts.BlockModel != nil {
		return nil, errors.New("new engine: a block model without block reading (EngineOptions.Blocks)")
	}
	for _, m := range models {
		e.workers <- &worker{model: m, cache: NewKVCache(m.Spec(), 0)}
	}
	return e, nil
}

// docidSeqs tokenises docids into trie sequences (ids + end).
func docidSeqs(tok Tokenizer, docids []string, end int64) ([][]int64, error) {
	seqs := make([][]int64, len(docids))
	for i, d := range docids {
		ids, err := tok.Encode(d)
		if err != nil {
			return nil, fmt.Errorf("encode docid %q: %w", d, err)
		}
		if len(ids) == 0 {
			return nil, fmt.Errorf("docid %d %q encodes to no tokens", i, d)
		}
		seqs[i] = append(ids, end)
	}
	return seqs, nil
}

// Manifest returns the loaded model's manifest.
func (e *Engine) Manifest() *Manifest { return e.man }

// SeenCorpus returns the docids the model was trained on (the global trie's docids).
func (e *Engine) SeenCorpus() []string { return e.seen }

// GlobalTrie returns the trie over the seen corpus.
func (e *Engine) GlobalTrie() *Trie { return e.global }

// Close closes every model once all in-flight calls have returned them. It is idempotent.
func (e *Engine) Close() error {
	var errs []error
	for range cap(e.workers) {
		w, ok := <-e.workers
		if !ok {
			return nil
		}
		errs = append(errs, w.model.Close())
	}
	close(e.workers)
	if e.blockModel != nil {
		errs = append(errs, e.blockModel.Close())
	}
	return errors.Join(errs...)
}

// Rank runs the routed, trie-constrained search for query over cands (in BM25 order).
func (e *Engine) Rank(ctx context.Context, query string, cands []Candidate, opts Options) (Result, error) {
	opts, prompt, err := e.prompt(query, cands, opts)
	if err != nil {
		return Result{}, fmt.Errorf("rank: %w", err)
	}
	var w *worker
	select {
	case w = <-e.workers:
		if w == nil {
			return Result{}, fmt.Errorf("rank: %w", ErrClosed)
		}
	case <-ctx.Done():
		return Result{}, fmt.Errorf("rank: wait for a model: %w", ctx.Err())
	}
	defer func() { e.workers <- w }()
	d := decoding{e: e, w: w, opts: opts, prompt: prompt, cands: cands}
	// The tokens this request computes: the whole prompt, or by block reading the query and the blocks not
	// yet stored.
	compute := len(prompt.IDs)
	if e.blocks != nil {
		pl := d.planBlocks()
		d.plan = &pl
		compute = pl.missing + len(prompt.IDs) - prompt.Segments[len(prompt.Segments)-1]
	}
	if opts.Admit != nil {
		if err := opts.Admit(compute); err != nil {
			return Result{}, fmt.Errorf("rank: admit a prompt of %d tokens (%d to compute): %w", len(prompt.IDs), compute, err)
		}
	}
	res, err := d.run(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("rank: %w", err)
	}
	return res, nil
}

// prompt fills opts' defaults and bounds (the manifest's summary and prompt caps) and builds the prompt
// (every summary cut to the same cap when the engine reads by blocks).
func (e *Engine) prompt(query string, cands []Candidate, opts Options) (Options, Prompt, error) {
	opts.BeamWidth = cmp.Or(opts.BeamWidth, 10)
	opts.MaxSummaryTokens = cmp.Or(opts.MaxSummaryTokens, 256)
	if e.man.MaxSummaryTokens > 0 {
		opts.MaxSummaryTokens = min(opts.MaxSummaryTokens, e.man.MaxSummaryTokens)
	}
	limit := cmp.Or(e.man.MaxPromptTokens, e.man.MaxContextTokens)
	if opts.MaxPromptTokens <= 0 || opts.MaxPromptTokens > limit {
		opts.MaxPromptTokens = limit
	}
	p, err := e.prompts.Build(query, cands, PromptOptions{MaxTokens: opts.MaxPromptTokens, MaxSummaryTokens: opts.MaxSummaryTokens,
		TitleOnly: opts.TitleOnly, SummaryCandidates: opts.SummaryCandidates, FixedSummaryCap: e.blocks != nil})
	return opts, p, err
}

// ByTitle reports whether candidate c, the i-th (from 0), goes into the prompt by title alone
// (PromptOptions.ByTitle).
func (o Options) ByTitle(i int, c Candidate) bool {
	return PromptOptions{TitleOnly: o.TitleOnly, SummaryCandidates: o.SummaryCandidates}.ByTitle(i, c)
}

// decoding is the state of one Rank call.
type decoding struct {
	e      *Engine
	w      *worker
	opts   Options
	prompt Prompt
	cands  []Candidate
	stats  Stats
	p      int        // prompt length
	plan   *blockPlan // block reading's lookups; nil reads the prompt causally
	// shift is the position of the query's and the answer's tokens minus their index in the cache: 0 but
	// for shared block reading, where every block sits at the same positions.
	shift int
	// blockRun is set while blocks are computed (storeBlocks): forward runs the engine's block model.
	blockRun bool
	// memory is the trie the memory route recalls from and memDocs its docids: the engine's global trie and
	// seen corpus, or Options.MemoryScope's part of them.
	memory  *Trie
	memDocs []string
	// memRank[i] is memDocs[i]'s place in Options.MemoryScope, from 1 (nil without a scope).
	memRank []int
}

// memoryWidth is the memory route's beam width, and whether Options.MemoryShift applies: then every title
// of the scope is followed (the shift reorders them after the search), else Options.BeamWidth.
func (d *decoding) memoryWidth() (int, bool) {
	if d.opts.MemoryShift != nil && d.memRank != nil {
		return max(d.opts.BeamWidth, len(d.memDocs)), true
	}
	return d.opts.BeamWidth, false
}

// memoryScope returns the trie over the seen docids among scope (each once, in scope's order), those docids
// and their places in scope (from 1); a nil scope: the global trie and the whole seen corpus (no places).
func (e *Engine) memoryScope(scope []string) (*Trie, []string, []int, error) {
	if scope == nil {
		return e.global, e.seen, nil, nil
	}
	var docs []string
	var seqs [][]int64
	var rank []int
	took := make(map[int]bool, len(scope))
	for k, d := range scope {
		if i, ok := e.seenAt[d]; ok && !took[i] {
			took[i] = true
			docs, seqs, rank = append(docs, d), append(seqs, e.seenSeqs[i]), append(rank, k+1)
		}
	}
	t, err := BuildTrie(seqs, e.man.EndTokenID)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("memory scope: %w", err)
	}
	return t, docs, rank, nil
}

func (d *decoding) run(ctx context.Context) (Result, error) {
	e := d.e
	d.p = len(d.prompt.IDs)
	var err error
	if d.memory, d.memDocs, d.memRank, err = e.memoryScope(d.opts.MemoryScope); err != nil {
		return Result{}, err
	}
	// Context trie over the in-context titles; a title repeated among the hits is one docid, credited
	// to its first (best BM25) candidate.
	var ctxDocs []string
	var ctxCand []int
	seenTitle := make(map[string]bool)
	copyable := d.cands[:d.prompt.InContext]
	if !e.man.HasRoute(RouteCopy) {
		copyable = nil // read in the prompt, never copied
	}
	for i, c := range copyable {
		if !seenTitle[c.Title] {
			seenTitle[c.Title] = true
			ctxDocs = append(ctxDocs, c.Title)
			ctxCand = append(ctxCand, i)
		}
	}
	seqs, err := docidSeqs(e.tok, ctxDocs, e.man.EndTokenID)
	if err != nil {
		return Result{}, fmt.Errorf("context titles: %w", err)
	}
	ctxTrie, err := BuildTrie(seqs, e.man.EndTokenID)
	if err != nil {
		return Result{}, fmt.Errorf("context titles: %w", err)
	}
	// The cache must hold the prompt plus the larger of the copy tree and the parametric beams (which never
	// feed more tokens than their trie has nodes: a wide scope's beam is bounded by its titles).
	memW, _ := d.memoryWidth()
	need := d.p + max(ctxTrie.Len()+1, min(memW*d.memory.Depth(), d.memory.Len())+1)
	if d.w.cache.Cap() < need {
		d.w.cache = NewKVCache(d.w.model.Spec(), need)
	}
	d.w.cache.Reset()
	// The copy route's token tree does not depend on the prompt's logits: planned now, its first chunk is fed
	// in the prompt's last Run (one Run fewer a request).
	var tree *copyTree
	if len(ctxDocs) > 0 {
		tree = d.planCopy(ctxTrie, len(ctxDocs))
	}

	start := time.Now()
	logits, err := d.prefill(ctx, tree)
	if err != nil {
		return Result{}, err
	}
	// The model owns its logits buffer and overwrites it on the next Run; step 0's row outlives that.
	z0 := slices.Clone(logits[:e.man.VocabSize])
	d.stats.Prefill = time.Since(start)
	start = time.Now()

	// Step 0: [COPY] or a first token of the memory's trie.
	rootToks, _ := d.memory.Children(0)
	allowed := make([]int32, 0, len(rootToks)+1)
	allowed = append(allowed, rootToks...)
	copyID := int32(e.man.CopyTokenID)
	if len(ctxDocs) > 0 {
		allowed = append(allowed, copyID)
	}
	if len(allowed) == 0 {
		return Result{}, ErrEmptyAllowedSet
	}
	lse0 := logSumExp(z0, allowed)
	res := Result{InContext: d.prompt.InContext, PromptTokens: d.p, SummaryTokens: d.prompt.SummaryTokens}
	var beams []Beam
	if tree != nil {
		lpCopy := float64(z0[copyID]) - lse0
		res.PCopy = math.Exp(lpCopy)
		copied, err := d.copyRoute(ctx, tree, lpCopy+d.opts.CopyLogPrior, logits)
		if err != nil {
			return Result{}, err
		}
		for i, s := range copied {
			if d.opts.CopyShift != nil {
				s += d.opts.CopyShift(ctxCand[i] + 1)
			}
			beams = append(beams, Beam{DocID: ctxDocs[i], Route: RouteCopy, Score: s, Candidate: ctxCand[i]})
		}
		d.w.cache.Truncate(d.p)
	}
	if len(rootToks) > 0 {
		// A parametric beam scoring below the W-th copied docid cannot enter the answer's top W (scores only
		// fall as tokens are added): the route stops following it. Exact, and it spares the route's Runs
		// when the model copies (reader135's [COPY] probability is near 1).
		floor := math.Inf(-1)
		if len(beams) >= d.opts.BeamWidth && !d.opts.EachRoute {
			floor = kthScore(beams, func(b Beam) float64 { return b.Score }, d.opts.BeamWidth)
		}
		param, err := d.parametricRoute(ctx, z0, lse0, floor)
		if err != nil {
			return Result{}, err
		}
		beams = append(beams, param...)
	}
	d.stats.Decode = time.Since(start)
	res.Beams = mergeBeams(beams, d.opts.BeamWidth)
	if d.opts.EachRoute {
		res.Beams = withEachRoute(res.Beams, beams)
	}
	res.Stats = d.stats
	return res, nil
}

// prefill fills the cache with the prompt and returns the logits after its last token (row 0), followed by the
// rows of tree's first chunk when tree has one (fed in the prompt's last Run: copyTree). It reads by blocks
// when the engine has a block store (blocks.go), else causally in chunks.
func (d *decoding) prefill(ctx context.Context, tree *copyTree) ([]float32, error) {
	if d.plan != nil {
		return d.prefillBlocks(ctx, *d.plan, tree)
	}
	return d.prefillCausal(ctx, 0, d.p, 0, tree)
}

// prefillCausal feeds prompt tokens [from, to) in chunks, each attending to the cache (which holds from
// positions) and causally to itself, at their index plus shift, and returns the logits after the last. When
// tree has chunks, its first is fed in the last chunk's Run after the prompt's tokens (to must then be the
// prompt's end), and its branching nodes' logits rows follow the prompt's.
func (d *decoding) prefillCausal(ctx context.Context, from, to, shift int, tree *copyTree) ([]float32, error) {
	// The last chunk's mask, at most chunk x prompt, is the largest: size the buffer for it once rather
	// than growing it chunk by chunk (a cold worker would allocate the sum of all chunks' masks).
	d.w.maskBuf(min(d.e.chunk, to-from), to-min(d.e.chunk, to-from))
	var logits []float32
	for s := from; s < to; s += d.e.chunk {
		end := min(s+d.e.chunk, to)
		n := end - s
		var tail []fedNode
		if end == to && tree != nil && len(tree.chunks) > 0 {
			tail = tree.chunks[0]
		}
		past := d.w.cache.Len()
		width := past + n + len(tail)
		ids, pos := d.w.buffers(n + len(tail))
		copy(ids, d.prompt.IDs[s:end])
		for i := range n {
			pos[i] = int64(s + i + shift)
		}
		mask := d.w.maskBuf(n+len(tail), past)
		for i := range n {
			maskRow(mask, i, width, past+i+1) // causal: the past and the chunk up to itself
		}
		want := d.w.index(n - 1)
		if tail != nil {
			tree.rows0, want = d.treeRows(tree.t, tail, ids, pos, mask, n, width, past+n, want)
			d.w.out = want
		}
		var err error
		logits, err = d.forward(ctx, Step{IDs: ids, Positions: pos, Mask: mask, LogitsIndex: want})
		if err != nil {
			return nil, fmt.Errorf("prefill tokens %d-%d: %w", s, end, err)
		}
		if tail != nil {
			d.countCopyRun(mask)
		}
	}
	return logits, nil
}

// copyTree is the copy route's token tree over the context trie t: [COPY] and the trie tokens on the way to a
// branching node, fed as a token tree (each token attends to the prompt, its ancestors and itself, at position
// prompt+depth) with logits read at every branching node; tokens below the last branching node of a path are
// forced, cost 0 and are not fed (jump-forward). It is planned before the prefill, since it does not depend on
// the prompt's logits, and fed in chunks (copyChunks); the first chunk rides in the prompt's last Run.
type copyTree struct {
	t        *Trie
	docs     int
	branches []bool      // branches[n]: n's subtree holds a branching node, so n is fed
	chunks   [][]fedNode // nil when every docid is forced after [COPY] (one docid)
	rows0    []int       // the first chunk's logits rows in the prompt's last Run (treeRows)
}

// planCopy plans the copy route over t's docs docids.
func (d *decoding) planCopy(t *Trie, docs int) *copyTree {
	// Children have larger ids than their parents (the trie is numbered breadth first), so one backward pass
	// settles branches.
	ct := &copyTree{t: t, docs: docs, branches: make([]bool, t.Len())}
	for n := t.Len() - 1; n >= 0; n-- {
		toks, kids := t.Children(NodeID(n))
		ct.branches[n] = len(toks) > d.forcedChildren()
		for _, k := range kids {
			ct.branches[n] = ct.branches[n] || ct.branches[k]
		}
	}
	if ct.branches[0] {
		ct.chunks = d.copyChunks(t, ct.branches, d.lastChunk())
	}
	return ct
}

// lastChunk is the number of prompt tokens fed in the prompt's last Run: the last prefill chunk of the prompt,
// or by block reading of the query.
func (d *decoding) lastChunk() int {
	from := 0
	if d.plan != nil {
		from = d.prompt.Segments[len(d.prompt.Segments)-1]
	}
	return (d.p-from-1)%d.e.chunk + 1
}

// copyRoute scores every context docid exactly from the planned tree. The chunk fed with the prompt
// (prefill's logits, rows tree.rows0) is scored first; each further chunk goes in a Run of its own, each a
// sub-forest of whole subtrees of the context trie's root (copyChunks). The cache is cut back to
// prompt+[COPY] after each Run, so every Run attends to the same prompt KV (never a copy of it) and every token
// still sees exactly the prompt, [COPY] and its ancestors: the scores are those of one Run. It returns the
// score of each of the trie's docids.
func (d *decoding) copyRoute(ctx context.Context, tree *copyTree, lpCopy float64, prefill []float32) ([]float64, error) {
	if tree.chunks == nil {
		// Every docid is forced after [COPY]: one docid, score lpCopy, no Run needed (jump-forward).
		return []float64{lpCopy}, nil
	}
	acc := make([]float64, tree.t.Len()) // score of the path to each fed node
	acc[0] = lpCopy
	scores := make([]float64, tree.docs)
	for i, c := range tree.chunks {
		if i == 0 {
			d.scoreChunk(tree, c, tree.rows0, prefill, acc, scores)
		} else if err := d.copyChunk(ctx, tree, c, acc, scores); err != nil {
			return nil, fmt.Errorf("copy route: %w", err)
		}
		d.w.cache.Truncate(d.p + 1) // keep the prompt and [COPY] for the next chunk
	}
	return scores, nil
}

// fedNode is one token of a copy-route chunk: tok, leading to trie node node.
type fedNode struct {
	node   NodeID
	tok    int64
	parent int // index in the chunk of the parent's token; -1 for [COPY] and for later chunks' subtree roots
	depth  int // [COPY] is 0
}

// copyChunks splits the fed token tree (nodes with branches set) into the chunks copyRoute feeds, each
// in parent-before-child order. The first starts with [COPY] (node 0) and shares its Run with the prompt's
// last lead tokens (counted in its mask); a subtree is never split.
func (d *decoding) copyChunks(t *Trie, branches []bool, lead int) [][]fedNode {
	budget := d.e.copyMaskBytes
	fits := func(n, past int) bool { return budget < 0 || int64(n)*int64(past+n)*4 <= budget }
	chunks := [][]fedNode{{{node: 0, tok: d.e.man.CopyTokenID, parent: -1}}}
	past := d.p // the first chunk's past: the prompt
	rootToks, rootKids := t.Children(0)
	var sub []fedNode
	for j, tok := range rootToks {
		if !branches[rootKids[j]] {
			continue
		}
		// The fed part of the subtree under this child of the root, breadth first, parents indexed in sub.
		sub = append(sub[:0], fedNode{node: rootKids[j], tok: int64(tok), parent: -1, depth: 1})
		for i := 0; i < len(sub); i++ {
			toks, kids := t.Children(sub[i].node)
			for k, tk := range toks {
				if branches[kids[k]] {
					sub = append(sub, fedNode{node: kids[k], tok: int64(tk), parent: i, depth: sub[i].depth + 1})
				}
			}
		}
		cur := chunks[len(chunks)-1]
		first := len(chunks) == 1
		rows := len(cur) + len(sub)
		if first {
			rows += lead
		}
		if (!first || len(cur) > 1) && !fits(rows, past) {
			chunks = append(chunks, nil)
			cur, past, first = nil, d.p+1, false // later chunks find [COPY] in the cache
		}
		off := len(cur)
		for _, f := range sub {
			switch {
			case f.parent >= 0:
				f.parent += off
			case first:
				f.parent = 0 // [COPY], fed in this chunk
			}
			cur = append(cur, f)
		}
		chunks[len(chunks)-1] = cur
	}
	return chunks
}

// copyChunk feeds one chunk after the first in one Run (the prompt and [COPY] in the cache) and scores it.
func (d *decoding) copyChunk(ctx context.Context, tree *copyTree, chunk []fedNode, acc, scores []float64) error {
	n := len(chunk)
	past := d.w.cache.Len()
	ids, pos := d.w.buffers(n)
	mask := d.w.maskBuf(n, past)
	rows, want := d.treeRows(tree.t, chunk, ids, pos, mask, 0, past+n, past, nil)
	logits, err := d.forward(ctx, Step{IDs: ids, Positions: pos, Mask: mask, LogitsIndex: want})
	if err != nil {
		return err
	}
	d.countCopyRun(mask)
	d.scoreChunk(tree, chunk, rows, logits, acc, scores)
	return nil
}

// countCopyRun counts a Run that fed copy-route tokens, with its mask.
func (d *decoding) countCopyRun(mask []float32) {
	d.stats.CopyRuns++
	d.stats.CopyMaskBytes = max(d.stats.CopyMaskBytes, int64(len(mask))*4)
}

// treeRows writes chunk's tokens into a Step from index at: ids, positions (the prompt's end plus depth) and
// mask rows of the given width, in which each token sees the first visible columns (the prompt, and [COPY]
// once it is in the cache) and its ancestors in the chunk (the chunk's first token is at column visible). It
// appends the step index of each branching node to want and returns each token's logits row (-1 for a node
// that does not branch) and want.
func (d *decoding) treeRows(t *Trie, chunk []fedNode, ids, pos []int64, mask []float32, at, width, visible int, want []int64) ([]int, []int64) {
	rows := make([]int, len(chunk))
	for i, f := range chunk {
		ids[at+i] = f.tok
		pos[at+i] = int64(d.p + d.shift + f.depth)
		row := maskRow(mask, at+i, width, visible)
		for a := i; a >= 0; a = chunk[a].parent {
			row[visible+a] = 0
		}
		rows[i] = -1
		if toks, _ := t.Children(f.node); len(toks) > d.forcedChildren() {
			rows[i] = len(want)
			want = append(want, int64(at+i))
		}
	}
	return rows, want
}

// scoreChunk carries the path scores down a fed chunk from its logits (row rows[i] for token i): acc for fed
// nodes, scores for docids. Parents come before children, and acc of a later chunk's subtree root was set by
// [COPY]'s row in the first chunk.
func (d *decoding) scoreChunk(tree *copyTree, chunk []fedNode, rows []int, logits []float32, acc, scores []float64) {
	t, v := tree.t, d.e.man.VocabSize
	for i, f := range chunk {
		toks, kids := t.Children(f.node)
		var z []float32
		var lse float64
		if rows[i] >= 0 {
			z = logits[rows[i]*v : (rows[i]+1)*v]
			lse = d.normaliser(z, toks)
		}
		for j, tok := range toks {
			s := acc[f.node]
			if z != nil {
				s += float64(z[tok]) - lse
			}
			k := kids[j]
			if tree.branches[k] {
				acc[k] = s // fed, in this chunk or a later one
				continue
			}
			for t.Doc(k) < 0 { // a forced chain down to its docid's leaf
				_, next := t.Children(k)
				k = next[0]
			}
			scores[t.Doc(k)] = s
		}
	}
}

// beam is a live or finished hypothesis of the parametric route.
type beam struct {
	node    NodeID
	score   float64
	toks    []int32 // every token since the route began, end included once finished
	fed     []int32 // cache positions of the tokens already fed, in order
	pending int     // how many trailing toks are not fed yet (an owed end token aside)
	owed    int     // vocab scoring: how many trailing toks (a forced chain) are not charged yet
	ended   bool    // the last of toks is the end token, reached on a forced chain (never fed)
}

// parametricRoute runs width-W beam search over the memory's trie (d.memory), with forced single-child chains
// fed together with the next branching token (jump-forward). Scored by the trie, a chain costs nothing;
// scored by the vocabulary, its tokens are owed until that Run, which reads a logits row per fed token and
// charges each of the chain's tokens from its predecessor's row (a chain ending at a title's end is fed for
// that alone). Beams scoring below floor are dropped (the caller's bound on what can still enter the answer);
// an owed chain only lowers a score, so the bounds taken before it is charged stay bounds.
func (d *decoding) parametricRoute(ctx context.Context, z0 []float32, lse0, floor float64) ([]Beam, error) {
	W, prior := d.memoryWidth()
	g := d.memory
	vocab := d.opts.Scoring == ScoringVocab
	toks, kids := g.Children(0)
	live := make([]*beam, 0, len(toks))
	for j, tok := range toks {
		if sc := float64(z0[tok]) - lse0; sc >= floor {
			live = append(live, &beam{node: kids[j], score: sc, toks: []int32{tok}, pending: 1})
		}
	}
	live = topBeams(live, W)
	var finished []*beam
	for len(live) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("parametric route: %w", err)
		}
		// Follow forced chains.
		next := live[:0]
		for _, b := range live {
			for {
				ct, ck := g.Children(b.node)
				if len(ct) != 1 {
					break
				}
				b.toks = append(b.toks, ct[0])
				b.node = ck[0]
				if vocab {
					b.owed++
				}
				if int64(ct[0]) == d.e.man.EndTokenID {
					b.ended = true
					break
				}
				b.pending++
			}
			if g.Doc(b.node) >= 0 && b.owed == 0 {
				finished = append(finished, b)
			} else {
				next = append(next, b)
			}
		}
		live = next
		if len(live) == 0 || (len(finished) >= W && live[0].score <= kthScore(finished, func(b *beam) float64 { return b.score }, W)) {
			break
		}
		logits, last, err := d.feedBeams(ctx, live, vocab)
		if err != nil {
			return nil, fmt.Errorf("parametric route: %w", err)
		}
		v := d.e.man.VocabSize
		row := func(r int) []float32 { return logits[r*v : (r+1)*v] }
		var pool []*beam
		for i, b := range live {
			if b.owed > 0 {
				// The chain is the last owed of toks; each of its tokens is scored from its predecessor's row.
				// The predecessors were fed in this Run, the last fed token (before an end token, which is
				// never fed) at row last[i] and each earlier one a row before.
				n, lastFed := len(b.toks), len(b.toks)-1
				if b.ended {
					lastFed--
				}
				for j := n - b.owed; j < n; j++ {
					z := row(last[i] - (lastFed - (j - 1)))
					b.score += float64(z[b.toks[j]]) - d.normaliser(z, nil)
				}
				b.owed = 0
				if b.score < floor {
					continue
				}
				if g.Doc(b.node) >= 0 {
					finished = append(finished, b)
					continue
				}
			}
			z := row(last[i])
			ct, ck := g.Children(b.node)
			lse := d.normaliser(z, ct)
			for j, tok := range ct {
				nb := &beam{node: ck[j], score: b.score + float64(z[tok]) - lse,
					toks: append(slices.Clip(b.toks), tok), fed: b.fed, pending: 1}
				pool = append(pool, nb)
			}
		}
		live = live[:0]
		for _, b := range topBeams(pool, W) {
			if b.score < floor {
				break // sorted: the rest are lower
			}
			if g.Doc(b.node) >= 0 {
				b.pending = 0
				finished = append(finished, b)
			} else {
				live = append(live, b)
			}
		}
	}
	if prior {
		for _, b := range finished {
			b.score += d.opts.MemoryShift(d.memRank[g.Doc(b.node)])
		}
	}
	finished = topBeams(finished, d.opts.BeamWidth)
	out := make([]Beam, len(finished))
	for i, b := range finished {
		out[i] = Beam{DocID: d.memDocs[g.Doc(b.node)], Route: RouteParametric, Score: b.score, Candidate: -1}
	}
	return out, nil
}

// feedBeams feeds every live beam's pending tokens in one Run (each attends to the prompt, its fed
// ancestors and its own pending tokens) and returns the logits rows and, per beam, the row of its last fed
// token: one row per beam, or with every a row per fed token (a beam's rows then end at its last).
func (d *decoding) feedBeams(ctx context.Context, live []*beam, every bool) ([]float32, []int, error) {
	n := 0
	for _, b := range live {
		n += b.pending
	}
	past := d.w.cache.Len()
	ids, pos := d.w.buffers(n)
	mask := d.w.maskBuf(n, past)
	want := d.w.out[:0]
	last := make([]int, len(live))
	k := 0
	for i, b := range live {
		first := k
		depth0 := len(b.toks) - b.pending
		if b.ended {
			depth0--
		}
		for j := range b.pending {
			ids[k] = int64(b.toks[depth0+j])
			pos[k] = int64(d.p + d.shift + depth0 + j)
			row := maskRow(mask, k, past+n, d.p)
			for _, a := range b.fed {
				row[a] = 0
			}
			clear(row[past+first : past+k+1])
			if every {
				want = append(want, int64(k))
			}
			k++
		}
		fed := make([]int32, len(b.fed), len(b.fed)+b.pending)
		copy(fed, b.fed)
		for j := range b.pending {
			fed = append(fed, int32(past+first+j))
		}
		b.fed, b.pending = fed, 0
		if !every {
			want = append(want, int64(k-1))
		}
		last[i] = len(want) - 1
	}
	d.w.out = want
	logits, err := d.forward(ctx, Step{IDs: ids, Positions: pos, Mask: mask, LogitsIndex: want})
	return logits, last, err
}

// forward runs one model step and keeps the counters.
func (d *decoding) forward(ctx context.Context, s Step) ([]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m := d.w.model
	if d.blockRun && d.e.blockModel != nil {
		m = d.e.blockModel
	}
	logits, err := m.Forward(ctx, s, d.w.cache)
	if err != nil {
		return nil, err
	}
	if want := len(s.LogitsIndex) * d.e.man.VocabSize; len(logits) != want {
		return nil, fmt.Errorf("model returned %d logits, want %d", len(logits), want)
	}
	spec := m.Spec()
	d.stats.ForwardRuns++
	d.stats.TokensFed += len(s.IDs)
	d.stats.KVBytesMoved += int64(len(s.IDs) * 2 * spec.NumLayers * spec.NumKVHeads * spec.HeadDim * 4)
	return logits, nil
}

// buffers returns reusable ids and positions slices of length n.
func (w *worker) buffers(n int) (ids, pos []int64) {
	if cap(w.ids) < n {
		w.ids, w.pos = make([]int64, n), make([]int64, n)
	}
	return w.ids[:n], w.pos[:n]
}

// maskBuf returns a reusable n x (past+n) mask buffer; every row must be initialised with maskRow.
func (w *worker) maskBuf(n, past int) []float32 {
	size := n * (past + n)
	if cap(w.mask) < size {
		w.mask = make([]float32, size)
	}
	return w.mask[:size]
}

// maskRow initialises row i of a mask with the given width: the first visible columns attend, the rest
// are masked (callers then open single columns such as tree ancestors). Each entry is written once.
func maskRow(mask []float32, i, width, visible int) []float32 {
	row := mask[i*width : (i+1)*width]
	clear(row[:visible])
	for j := visible; j < width; j++ {
		row[j] = MaskedValue
	}
	return row
}

// index returns a one-element logits index.
func (w *worker) index(i int) []int64 {
	w.out = append(w.out[:0], int64(i))
	return w.out
}

// forcedChildren is the most children a node may have and still be taken without its logits: 1 when the
// trie scores (a forced token costs nothing), 0 when the vocabulary does (every token is paid for).
func (d *decoding) forcedChildren() int {
	if d.opts.Scoring == ScoringVocab {
		return 0
	}
	return 1
}

// normaliser is the log-normaliser of one step's logits z whose allowed tokens are toks: over toks (trie
// scoring) or over the whole vocabulary (vocab scoring).
func (d *decoding) normaliser(z []float32, toks []int32) float64 {
	if d.opts.Scoring != ScoringVocab {
		return logSumExp(z, toks)
	}
	m := math.Inf(-1)
	for _, x := range z {
		m = max(m, float64(x))
	}
	s := 0.0
	for _, x := range z {
		s += expNonPositive(float64(x) - m)
	}
	return m + math.Log(s)
}

// expNonPositive is exp(y) for y <= 0 within a relative 1e-11 of math.Exp, in about half its time: vocab scoring
// sums a vocabulary's 49K terms a logits row, one row per title token (0.6 against 1.1 ms a row on a 2-core AVX2
// host). y = k ln2 + f with k an integer and |f| <= ln2/2; e^f by its Taylor series to degree 9 (remainder under
// 1e-11 there), times 2^k written into the exponent bits.
func expNonPositive(y float64) float64 {
	if y < -700 {
		return 0
	}
	// Adding 1.5 x 2^52 rounds to the nearest integer, which then sits in the low bits of the sum's mantissa.
	const round = 1.5 * (1 << 52)
	r := y*math.Log2E + round
	k := r - round
	f := y - k*math.Ln2
	p := 1 + f*(1+f*(1./2+f*(1./6+f*(1./24+f*(1./120+f*(1./720+f*(1./5040+f*(1./40320+f/362880))))))))
	return p * math.Float64frombits(uint64(int64(int32(math.Float64bits(r)))+1023)<<52)
}

// logSumExp returns log(sum(exp(z[t]))) over the tokens t, in float64.
func logSumExp(z []float32, toks []int32) float64 {
	m := math.Inf(-1)
	for _, t := range toks {
		m = max(m, float64(z[t]))
	}
	if math.IsInf(m, -1) {
		return m
	}
	s := 0.0
	for _, t := range toks {
		s += math.Exp(float64(z[t]) - m)
	}
	return m + math.Log(s)
}

// compareBeams orders by score descending, then token sequence ascending.
func compareBeams(a, b *beam) int {
	if c := cmp.Compare(b.score, a.score); c != 0 {
		return c
	}
	return slices.Compare(a.toks, b.toks)
}

// topBeams sorts bs best first and keeps at most k.
func topBeams(bs []*beam, k int) []*beam {
	slices.SortFunc(bs, compareBeams)
	return bs[:min(k, len(bs))]
}

// kthScore returns the k-th best score of bs (len(bs) >= k).
func kthScore[B any](bs []B, score func(B) float64, k int) float64 {
	s := make([]float64, len(bs))
	for i, b := range bs {
		s[i] = score(b)
	}
	slices.Sort(s)
	return s[len(s)-k]
}

// mergeBeams joins both routes: a docid in both keeps its better score and that route; the result is
// ordered by score descending, then docid, and cut to k.
func mergeBeams(bs []Beam, k int) []Beam {
	best := make(map[string]int, len(bs))
	var out []Beam
	for _, b := range bs {
		if i, ok := best[b.DocID]; ok {
			if b.Score > out[i].Score {
				out[i] = b
			}
			continue
		}
		best[b.DocID] = len(out)
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Beam) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return cmp.Compare(a.DocID, b.DocID)
	})
	return out[:min(k, len(out))]
}

// withEachRoute appends to top, for each route of all that top lacks, that route's best docid not in top.
func withEachRoute(top, all []Beam) []Beam {
	for _, r := range []Route{RouteCopy, RouteParametric} {
		if slices.ContainsFunc(top, func(b Beam) bool { return b.Route == r }) {
			continue
		}
		best := -1
		for i, b := range all {
			if b.Route == r && (best < 0 || b.Score > all[best].Score) &&
				!slices.ContainsFunc(top, func(t Beam) bool { return t.DocID == b.DocID }) {
				best = i
			}
		}
		if best >= 0 {
			top = append(top, all[best])
		}
	}
	return top
}

// Sessions returns how many model sessions the engine runs (requests decoded at once).
func (e *Engine) Sessions() int { return cap(e.workers) }

// WarmUp ranks a synthetic query over synthetic candidates that fill the prompt budget (a full-size run,
// as serving's ten candidates are), once to initialise the session and again to time it. It returns the
// timed run's prompt length and duration: what a run costs this model on this machine, alone. It takes
// one session; call it before serving.
func (e *Engine) WarmUp(ctx context.Context, opts Options) (tokens int, took time.Duration, err error) {
	words := strings.Repeat("the river flows past the old stone bridge near the market square ", 8)
	cands := make([]Candidate, 10)
	for i := range cands {
		cands[i] = Candidate{Title: fmt.Sprintf("Warm-up document %d", i+1), Summary: words}
	}
	for range 2 {
		start := time.Now()
		res, err := e.Rank(ctx, "where does the river pass the old bridge", cands, opts)
		if err != nil {
			return 0, 0, fmt.Errorf("warm up: %w", err)
		}
		tokens, took = res.PromptTokens, time.Since(start)
	}
	return tokens, took, nil
}
