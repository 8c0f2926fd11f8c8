package rank

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/internal/gate"
	"github.com/icicle-search/sidecar/retrieve"
)

// FirstStage is the ranking every answer starts from (*retrieve.Stage): BM25 fused with a dense encoder, or
// BM25 alone. Its order is what policy first_stage, a gate that keeps and every fallback answer, and the order
// of the reader's candidates.
type FirstStage interface {
	// Search ranks a query over all documents and over new ones (the reader's candidates, the top req.NewK).
	// A *retrieve.NewSearchError comes with All set: the candidates are missing.
	Search(ctx context.Context, req retrieve.Request) (retrieve.Lists, error)
	// Rescore re-ranks the caller's hits by the first stage's fusion.
	Rescore(ctx context.Context, query string, hits []adapter.Hit) ([]adapter.Hit, retrieve.Info, error)
	// Params are the fusion settings in use.
	Params() retrieve.Params
	// Encoder names the dense encoder, "" without one.
	Encoder() string
}

// Searcher is what the pipeline reads from Elasticsearch besides the first stage (*adapter.Adapter).
type Searcher interface {
	// Resolve finds the documents of docids in one request; missing ones are absent.
	Resolve(ctx context.Context, docids []string) (map[string]adapter.Hit, error)
	// Snippets replaces each hit's Summary by the passage of its body that best matches the query, about chars
	// characters.
	Snippets(ctx context.Context, query string, hits []adapter.Hit, chars int) error
}

// Seeded is implemented by a Source that knows what a run of its reader cost alone when it was loaded (its
// warm-up): the guard's cost model starts from it.
type Seeded interface {
	Seed() Seed
}

// ErrUpstream marks an Elasticsearch failure that left nothing to answer with (the first stage's search).
var ErrUpstream = errors.New("elasticsearch unavailable")

// UpstreamError wraps an Elasticsearch failure as ErrUpstream; when the client went away it wraps
// context.Canceled instead of the failure, so that the answer is the client's, not an outage.
func UpstreamError(ctx context.Context, what string, err error) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		err = ctx.Err()
	}
	return fmt.Errorf("%s: %w: %w", what, ErrUpstream, err)
}

// Options configure a Pipeline; cmd/icicle fills them from config.
type Options struct {
	// Policy is the policy of a request that names none (policy.mode; default "model").
	Policy string
	// FusionK is FusionPolicy's k (default 60); RunModelWhenGateNever runs the reader under a gate that never
	// promotes (experimental.run_model_when_gate_never).
	FusionK               int
	RunModelWhenGateNever bool
	// MaxCandidates is how many of the first stage's top documents the reader reads (default 100); BeamWidth
	// the size of an answer that asks for none (default 10).
	MaxCandidates, BeamWidth int
	// RouteByFirstStage applies RouteByFirstStage to every reading; MemoryFromFirstStage gives the reader the
	// first stage's list as what it may name beyond its candidates (Query.Scope).
	RouteByFirstStage, MemoryFromFirstStage bool
	// MinCopyProb and MinTopScore are the confidence floors (Doubted).
	MinCopyProb, MinTopScore float64
	// SnippetChars, when positive, gives the reader each candidate's passage best matching the query instead
	// of its stored summary (Searcher.Snippets).
	SnippetChars int
	// RequestTimeout is the budget of a request without a deadline, and ReserveFraction the share of it held
	// back at the end for the answer (server.es_budget_fraction): the first stage and the reader work until
	// WorkDeadline.
	RequestTimeout  time.Duration
	ReserveFraction float64
	Logger          *slog.Logger
}

// Pipeline ranks requests: the first stage, the reader under the guard, the policy. Safe for concurrent use.
type Pipeline struct {
	first   FirstStage
	es      Searcher
	source  Source // nil: no reader
	guard   *Guard
	metrics *Metrics
	opts    Options
	log     *slog.Logger
}

// New builds a pipeline. source is the reader (nil: none; every request then answers the first stage's
// order, saying so); guard runs it (nil: a default guard); m receives the metrics (nil: private ones, or the
// guard's).
func New(first FirstStage, es Searcher, source Source, guard *Guard, m *Metrics, opts Options) (*Pipeline, error) {
	opts.Policy = CanonicalPolicy(cmp.Or(opts.Policy, PolicyModel))
	if _, err := NewPolicy(opts.Policy, opts.FusionK, false); err != nil {
		return nil, err
	}
	opts.FusionK = cmp.Or(opts.FusionK, 60)
	opts.MaxCandidates = cmp.Or(opts.MaxCandidates, 100)
	opts.BeamWidth = cmp.Or(opts.BeamWidth, 10)
	opts.RequestTimeout = cmp.Or(opts.RequestTimeout, 2*time.Second)
	if m == nil && guard != nil {
		m = guard.metrics
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	if guard == nil {
		guard = NewGuard(GuardOptions{Logger: opts.Logger}, m)
	}
	p := &Pipeline{first: first, es: es, source: source, guard: guard, metrics: m, opts: opts, log: opts.Logger}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	return p, nil
}

// Policy is the configured policy's name.
func (p *Pipeline) Policy() string { return p.opts.Policy }

// Guard is the guard the reader runs under.
func (p *Pipeline) Guard() *Guard { return p.guard }

// Metrics are the pipeline's metrics.
func (p *Pipeline) Metrics() *Metrics { return p.metrics }

// FirstStage is the pipeline's first stage.
func (p *Pipeline) FirstStage() FirstStage { return p.first }

// HasReader reports whether a reader is configured.
func (p *Pipeline) HasReader() bool { return p.source != nil }

// Size is the number of results a request asking for size gets: size, else the beam width, at most 100.
func (p *Pipeline) Size(size int) int { return min(cmp.Or(size, p.opts.BeamWidth), 100) }

// WorkDeadline is when the first stage and the reader must be done: the request's deadline less the reserve
// held back for the answer (RequestTimeout x ReserveFraction). The first stage takes what it needs (a
// saturated machine slows Elasticsearch too), and the reader runs only when its predicted run fits what the
// first stage left.
func (p *Pipeline) WorkDeadline(ctx context.Context) time.Time {
	end, ok := ctx.Deadline()
	if !ok {
		end = time.Now().Add(p.opts.RequestTimeout)
	}
	return end.Add(-time.Duration(float64(p.opts.RequestTimeout) * p.opts.ReserveFraction))
}

// Costs is what a run of the serving reader costs now, by concurrency (nil without a reader).
func (p *Pipeline) Costs() []CostLevel {
	if p.source == nil {
		return nil
	}
	return p.guard.Costs(p.source.Name(), p.seed())
}

func (p *Pipeline) seed() Seed {
	if s, ok := p.source.(Seeded); ok {
		return s.Seed()
	}
	return Seed{}
}

// Run ranks one request. The error is the first stage's failure (wrapping ErrUpstream; an Elasticsearch
// refusal of the caller's credentials is in it as an *adapter.ResponseError) or the client's cancellation;
// a reader's failure is never an error: the first stage's order answers with the reason.
func (p *Pipeline) Run(ctx context.Context, req Request) (Response, error) {
	policy := p.opts.Policy
	if req.Policy != "" {
		policy = CanonicalPolicy(req.Policy)
	}
	pol, err := NewPolicy(policy, p.opts.FusionK, p.opts.RunModelWhenGateNever)
	if err != nil {
		return Response{}, err
	}
	var g *gate.Gate
	reads := false
	if p.source != nil {
		g = p.source.Gate()
		reads = pol.Reads(g)
	}
	if req.Hits != nil {
		return p.rerank(ctx, req, pol, g, reads)
	}
	return p.search(ctx, req, pol, g, reads)
}

// search is Run over the whole index: the first stage's ranking over all documents (the order every
// fallback answers) and, when the reader reads, over new documents (its candidates).
func (p *Pipeline) search(ctx context.Context, req Request, pol Policy, g *gate.Gate, reads bool) (Response, error) {
	esCtx, esCancel := context.WithDeadline(ctx, p.WorkDeadline(ctx))
	defer esCancel()
	start := time.Now()
	sr := retrieve.Request{Query: req.Query, NewK: p.opts.MaxCandidates, Size: p.Size(req.Size) + 1}
	if !reads {
		sr.NewK = 0 // the reader is not run: no candidates
	} else if pol.Name() == PolicyFusion {
		sr.Size = 0 // any hit of the first stage's may reach the fused top
	}
	lists, err := p.first.Search(esCtx, sr)
	esDur := time.Since(start) + req.Searched
	p.metrics.stage.WithLabelValues("es").Observe(esDur.Seconds())
	var newErr *retrieve.NewSearchError
	if err != nil && !errors.As(err, &newErr) {
		return Response{}, UpstreamError(ctx, "search all documents", err)
	}
	p.metrics.baselines.WithLabelValues(lists.Baseline, lists.Reason).Inc()
	if newErr != nil {
		// A refusal (401/403) is about the credentials, not the index: the caller's answer, never a fallback.
		var refused *adapter.ResponseError
		if ctx.Err() != nil || errors.As(newErr, &refused) && (refused.Status == http.StatusUnauthorized || refused.Status == http.StatusForbidden) {
			return Response{}, UpstreamError(ctx, "search new documents", newErr.Err)
		}
		p.log.Warn("search new documents (the reader's candidates)", "err", newErr.Err)
		resp := Response{HitsReceived: len(lists.All), Model: p.modelName(), Timings: Timings{ES: ms(esDur), Embed: ms(lists.Embed)},
			Baseline: p.baseline(lists.Info)}
		return p.fallback(resp, lists.All, p.Size(req.Size), ReasonContextUnavailable), nil
	}
	resp, err := p.answer(ctx, req, pol, g, reads, lists.All, lists.New, esDur, lists.Info)
	resp.Timings.Embed = ms(lists.Embed)
	return resp, err
}

// rerank is Run over the caller's hits: the first stage re-scores them, and its order is both the order
// every fallback answers and the reader's candidates.
func (p *Pipeline) rerank(ctx context.Context, req Request, pol Policy, g *gate.Gate, reads bool) (Response, error) {
	start := time.Now()
	rescored, info, err := p.first.Rescore(ctx, req.Query, req.Hits)
	if err != nil {
		return Response{}, err
	}
	p.metrics.baselines.WithLabelValues(info.Baseline, info.Reason).Inc()
	resp, err := p.answer(ctx, req, pol, g, reads, rescored, rescored, req.Searched+time.Since(start)-info.Embed, info)
	resp.Timings.Embed = ms(info.Embed)
	return resp, err
}

// answer runs the reader over the candidates hits (when the policy reads) and builds the response against
// base, the first stage's order. Only a client cancellation is an error.
func (p *Pipeline) answer(ctx context.Context, req Request, pol Policy, g *gate.Gate, reads bool, base, hits []adapter.Hit,
	esDur time.Duration, info retrieve.Info) (Response, error) {
	size := p.Size(req.Size)
	resp := Response{HitsReceived: len(hits), Model: p.modelName(), Baseline: p.baseline(info)}
	resp.Timings.ES = ms(esDur)
	in := Input{Base: base, BaseKind: info.Baseline, Size: size, Gate: g}
	if p.source == nil {
		resp.HitsReceived = len(base)
		resp.Mode, resp.Results, resp.ModelSkipped = ModeFirstStage, BaselineResults(base, size, info.Baseline), SkipNoModel
		return resp, nil
	}
	if !reads {
		a := pol.Skipped(in)
		resp.HitsReceived = len(base)
		resp.Mode, resp.Results, resp.Gate, resp.ModelSkipped = a.Mode, a.Results, a.Gate, a.Skipped
		if a.Gate != nil {
			p.metrics.gate.WithLabelValues(a.Gate.Decision).Inc()
		}
		return resp, nil
	}
	cands := hits[:min(len(hits), p.opts.MaxCandidates)]
	resp.CandidatesTruncated = len(hits) > len(cands)
	read := cands // what the reader reads of them; the results show cands
	if p.opts.SnippetChars > 0 {
		read = p.snippets(ctx, req.Query, cands, &resp)
	}
	q := Query{Text: req.Query, Candidates: make([]Candidate, len(read))}
	for i, h := range read {
		q.Candidates[i] = CandidateOf(h)
	}
	if p.opts.MemoryFromFirstStage {
		q.Scope = make([]string, len(base))
		for i, h := range base {
			q.Scope[i] = h.DocID
		}
	}
	modelStart := time.Now()
	r, reason, err := p.guard.Run(ctx, p.source.Name(), p.seed(), p.WorkDeadline(ctx),
		func(ctx context.Context, admit func(int) error) (Reading, error) {
			q.Admit = admit
			return p.source.Read(ctx, q)
		})
	resp.Timings.Model = ms(time.Since(modelStart))
	if err != nil {
		return Response{}, err
	}
	if reason != "" {
		return p.fallback(resp, base, size, reason), nil
	}
	resp.TitleOnlyCandidates = r.TitleOnly
	resp.Timings.Prefill, resp.Timings.Decode = ptr(ms(r.Prefill)), ptr(ms(r.Decode))
	resp.CandidatesInContext = r.InContext
	resp.Context = make([]string, min(r.InContext, len(cands)))
	for i := range resp.Context {
		resp.Context[i] = cands[i].DocID
	}
	p.metrics.inContext.Observe(float64(r.InContext))
	if pc, ok := r.Confidence[ConfidenceCopy]; ok {
		resp.RouterProb = &pc
	}
	if p.opts.RouteByFirstStage {
		r, resp.Rerouted = RouteByFirstStage(r, base)
	}
	if Doubted(r, p.opts.MinCopyProb, p.opts.MinTopScore) {
		return p.fallback(resp, base, size, ReasonLowConfidence), nil
	}
	p.metrics.routes.WithLabelValues(string(r.Scored[0].Route)).Inc()
	if g == nil {
		g = gate.Default()
	}
	in.Candidates, in.Reading, in.Gate = cands, r, g
	in.Results = func(s []Scored) []Result { return rebase(p.readerResults(ctx, s, cands), base) }
	a := pol.Answer(in)
	resp.Mode, resp.Results, resp.Gate = a.Mode, a.Results, a.Gate
	if a.Gate != nil {
		p.metrics.gate.WithLabelValues(a.Gate.Decision).Inc()
	}
	return resp, nil
}

// modelName is the serving reader's name, "" without one.
func (p *Pipeline) modelName() string {
	if p.source == nil {
		return ""
	}
	return p.source.Name()
}

// baseline is the response's account of the first stage.
func (p *Pipeline) baseline(info retrieve.Info) *Baseline {
	b := &Baseline{Kind: info.Baseline, Reason: info.Reason, Encoder: info.Encoder}
	if info.Baseline == retrieve.BaselineHybrid {
		b.Method = p.first.Params().Method
	}
	return b
}

// fallback answers base's order (the first stage's), saying why.
func (p *Pipeline) fallback(resp Response, base []adapter.Hit, size int, reason string) Response {
	p.metrics.fallbacks.WithLabelValues(reason).Inc()
	resp.Mode, resp.FallbackReason = ModeFirstStageFallback, reason
	kind := retrieve.BaselineBM25
	if resp.Baseline != nil {
		kind = resp.Baseline.Kind
	}
	resp.Results = BaselineResults(base, size, kind)
	return resp
}

// readerResults turns scored documents into results: candidates are their hits; documents named beyond them
// are resolved to their stored documents in one Elasticsearch request (unresolved ones stay docids).
func (p *Pipeline) readerResults(ctx context.Context, scored []Scored, cands []adapter.Hit) []Result {
	byDocID := make(map[string]int, len(cands))
	for i, h := range cands {
		if _, ok := byDocID[h.DocID]; !ok {
			byDocID[h.DocID] = i
		}
	}
	var missing []string
	for _, s := range scored {
		if _, ok := byDocID[s.DocID]; !ok && s.Route == RouteParametric {
			missing = append(missing, s.DocID)
		}
	}
	var resolved map[string]adapter.Hit
	if len(missing) > 0 && p.es != nil {
		var err error
		if resolved, err = p.es.Resolve(ctx, missing); err != nil {
			p.log.Warn("resolve parametric docids", "docids", len(missing), "err", err)
		}
	}
	out := make([]Result, 0, len(scored))
	for i, s := range scored {
		r := Result{Rank: i + 1, DocID: s.DocID, Title: s.DocID, Score: s.Score, Provenance: FromParametric}
		if s.Route == RouteCopy {
			r.Provenance = FromCopy
		}
		if j, ok := byDocID[s.DocID]; ok {
			h := cands[j]
			r.ID, r.Title, r.Summary, r.Resolved = h.ID, h.Title, h.Summary, true
			r.FirstStageRank = ptr(j + 1)
			setHitScores(&r, h)
		} else if h, ok := resolved[s.DocID]; ok {
			r.ID, r.Title, r.Summary, r.Resolved = h.ID, h.Title, h.Summary, true
		}
		out = append(out, r)
	}
	return out
}

// rebase sets each result's FirstStageRank to its rank in base and its BM25 rank and scores to base's
// (absent when base does not hold it).
func rebase(rs []Result, base []adapter.Hit) []Result {
	at := make(map[string]int, len(base))
	for i, h := range base {
		if _, ok := at[h.DocID]; !ok {
			at[h.DocID] = i
		}
	}
	for i := range rs {
		rs[i].FirstStageRank, rs[i].BM25Rank, rs[i].BM25Score, rs[i].DenseScore = nil, nil, nil, nil
		if j, ok := at[rs[i].DocID]; ok {
			rs[i].FirstStageRank = ptr(j + 1)
			setHitScores(&rs[i], base[j])
		}
	}
	return rs
}

// setHitScores copies a first-stage hit's BM25 rank and score and its cosine into r.
func setHitScores(r *Result, h adapter.Hit) {
	if h.BM25Rank > 0 {
		r.BM25Rank, r.BM25Score = ptr(h.BM25Rank), ptr(h.BM25)
	}
	if h.HasDense {
		r.DenseScore = ptr(h.Dense)
	}
}

// BaselineResults is the top size of a first-stage ranking as results: provenance first_stage for a hybrid
// ranking, bm25 for BM25 alone (kind is retrieve.BaselineHybrid or BaselineBM25). A docid that appears more
// than once (a caller's hits may repeat one) is ranked once, at its first occurrence, as the reader ranks it;
// the ranks stated are its positions in hits.
func BaselineResults(hits []adapter.Hit, size int, kind string) []Result {
	prov := FromBM25
	if kind == retrieve.BaselineHybrid {
		prov = FromFirstStage
	}
	out := make([]Result, 0, min(size, len(hits)))
	seen := make(map[string]bool, min(size, len(hits)))
	for i, h := range hits {
		if len(out) == size {
			break
		}
		if seen[h.DocID] {
			continue
		}
		seen[h.DocID] = true
		r := Result{Rank: len(out) + 1, ID: h.ID, DocID: h.DocID, Title: h.Title, Summary: h.Summary,
			Score: h.Score, Provenance: prov, FirstStageRank: ptr(i + 1), Resolved: true}
		setHitScores(&r, h)
		if kind != retrieve.BaselineHybrid && r.BM25Rank == nil {
			r.BM25Rank = ptr(i + 1) // BM25 alone: the list's own order is BM25's
		}
		out = append(out, r)
	}
	return out
}

// snippets gives the reader its candidates' passages that best match the query (experimental.snippet_chars)
// instead of their stored summaries, on copies: the results keep the stored summaries. Elasticsearch failing,
// or not answering by the working deadline, leaves the stored summaries, said in the log; the time counts as
// Elasticsearch's.
func (p *Pipeline) snippets(ctx context.Context, query string, cands []adapter.Hit, resp *Response) []adapter.Hit {
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, p.WorkDeadline(ctx))
	defer cancel()
	out := append([]adapter.Hit(nil), cands...)
	if err := p.es.Snippets(ctx, query, out, p.opts.SnippetChars); err != nil {
		p.log.Warn("query snippets: the reader reads the stored summaries", "err", err)
		out = cands
	}
	for i := range out {
		if out[i].Summary != cands[i].Summary {
			resp.Snippets++
		}
	}
	resp.Timings.ES += ms(time.Since(start))
	return out
}

// CandidateOf is a hit as a reader reads it: its docid (the title the ICICLE reader copies), title and
// summary. The block store's fill (cmd/icicle) builds its blocks from it, so that they are the blocks requests
// read.
func CandidateOf(h adapter.Hit) Candidate {
	return Candidate{DocID: h.DocID, Title: h.Title, Summary: h.Summary}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func ptr[T any](v T) *T { return &v }
