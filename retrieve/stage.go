package retrieve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/icicle-search/sidecar/adapter"
)

// Searcher is what the first stage needs of Elasticsearch (adapter.Adapter).
type Searcher interface {
	// SearchAll and SearchNew return BM25's top k over all documents and over new ones, with their
	// titles and summaries (the first stage without an encoder).
	SearchAll(ctx context.Context, query string, k int) ([]adapter.Hit, error)
	SearchNew(ctx context.Context, query string, k int) ([]adapter.Hit, error)
	// SearchLean is BM25's top k without the stored documents (ID, DocID, Seen, score).
	SearchLean(ctx context.Context, query string, k int, onlyNew bool) ([]adapter.Hit, error)
	// Dense runs kNN searches and exact-cosine lookups with one query vector (adapter.Adapter.Dense).
	Dense(ctx context.Context, vec []float32, qs []adapter.DenseQuery) ([][]adapter.Hit, error)
	// Sources fills in the titles and summaries of hits by _id.
	Sources(ctx context.Context, hits []adapter.Hit) error
}

// Embedder embeds queries (dense.Encoder).
type Embedder interface {
	Query(ctx context.Context, query string) ([]float32, error)
	Name() string
}

// Baselines (Info.Baseline): which ranking answered.
const (
	// BaselineHybrid is BM25 and the dense encoder fused.
	BaselineHybrid = "hybrid"
	// BaselineBM25 is BM25 alone: no encoder is configured, Params.Method is bm25, or the dense half
	// failed (Info.Reason says which).
	BaselineBM25 = "bm25"
)

// Reasons the first stage answered BM25 alone although an encoder is configured (Info.Reason).
const (
	// ReasonEncoderError: embedding the query failed (or took the whole budget).
	ReasonEncoderError = "encoder_error"
	// ReasonDenseUnavailable: the dense searches failed (Elasticsearch refused them, or the index has no
	// vectors field).
	ReasonDenseUnavailable = "dense_unavailable"
)

// Info says how a first-stage answer was made.
type Info struct {
	// Baseline is BaselineHybrid or BaselineBM25.
	Baseline string
	// Reason is set when Baseline is BaselineBM25 although an encoder is configured.
	Reason string
	// Encoder names the encoder that embedded the query ("" without one).
	Encoder string
	// Embed is the time spent embedding the query (0 without an encoder).
	Embed time.Duration
}

// Stage is the first stage. It is safe for concurrent use; SetParams swaps the fusion settings for the
// requests that start afterwards.
type Stage struct {
	es     Searcher
	enc    Embedder // nil: BM25 only
	params atomic.Pointer[Params]
	log    *slog.Logger
}

// New builds a Stage over es. enc may be nil (BM25 only). A nil logger discards.
func New(es Searcher, enc Embedder, p Params, log *slog.Logger) (*Stage, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("first stage: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Stage{es: es, enc: enc, log: log}
	s.params.Store(&p)
	return s, nil
}

// Params returns the fusion settings in use.
func (s *Stage) Params() Params { return *s.params.Load() }

// SetParams replaces the fusion settings (after validating them).
func (s *Stage) SetParams(p Params) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("first stage: %w", err)
	}
	s.params.Store(&p)
	return nil
}

// Hybrid reports whether the stage has an encoder and fuses (Params.Method not bm25).
func (s *Stage) Hybrid() bool { return s.enc != nil && s.Params().Method != MethodBM25 }

// Encoder names the stage's encoder, "" without one.
func (s *Stage) Encoder() string {
	if s.enc == nil {
		return ""
	}
	return s.enc.Name()
}

// Lists are the first stage's answers for one query.
type Lists struct {
	// All is the ranking over every document (the baseline), at most Depth+KNN hits; the first Request.Size
	// have their titles and summaries.
	All []adapter.Hit
	// New is the ranking over new documents (the model's context), at most Request.NewK hits, each with
	// its title and summary.
	New []adapter.Hit
	Info
}

// Request says what one Search must return.
type Request struct {
	// Query is the query text.
	Query string
	// NewK is how many new documents the model's context takes; 0 asks for no new-document ranking.
	NewK int
	// Size is how many of All's first hits need their titles and summaries (the results shown); the rest
	// serve ranks, scores and the gate. 0 is all of them.
	Size int
}

// Search ranks the query over all documents and over new ones. BM25 over all documents failing is an
// error (the caller has nothing to answer with); the new-document search failing returns All with a
// *NewSearchError; the dense half failing leaves BM25's order with Info saying why.
//
// With an encoder, the new-document ranking is the fused ranking over all documents, new ones kept: the
// union of BM25's top Depth and the kNN's top KNN almost always holds NewK new documents, and one ranking
// costs half of two. When it holds fewer (a corpus mostly seen), new documents are ranked on their own.
// A request for more than half of Depth new documents (the design's 100 candidates over a depth of 100)
// rarely finds them among all: its BM25 search over all documents then goes twice as deep, and the first
// Depth new documents in it are BM25's top Depth over new ones (a filter does not change BM25's scores), their
// cosines and kNN in the same multi-search as the first list's, so that the new list costs no search of its
// own; only when the deeper search holds fewer than Depth new documents (a corpus mostly seen) does a
// new-document search follow.
func (s *Stage) Search(ctx context.Context, req Request) (Lists, error) {
	p := s.Params()
	if s.enc == nil || p.Method == MethodBM25 {
		return s.searchBM25(ctx, req, p)
	}
	var (
		out      Lists
		vec      []float32
		embedErr error
		newLean  []adapter.Hit
		newErr   error
		panicked any // re-raised on the caller's goroutine, for the recoverer
		wg       sync.WaitGroup
	)
	out.Encoder = s.enc.Name()
	wg.Go(func() {
		defer func() { panicked = recover() }()
		start := time.Now()
		vec, embedErr = s.enc.Query(ctx, req.Query)
		out.Embed = time.Since(start)
	})
	deep := req.NewK > p.Depth/2 // the new list comes from BM25 over all, twice as deep
	depth := p.Depth
	if deep {
		depth = min(2*p.Depth, adapter.MaxK)
	}
	deepAll, err := s.es.SearchLean(ctx, req.Query, depth, false)
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
	if err != nil {
		return Lists{}, err
	}
	all := deepAll[:min(len(deepAll), p.Depth)]
	out.All, out.Baseline = all, BaselineBM25
	if embedErr != nil {
		if ctx.Err() != nil {
			return Lists{}, ctx.Err()
		}
		s.log.Warn("first stage: embed query; answering BM25 alone", "err", embedErr)
		out.Reason = ReasonEncoderError
		return s.finishBM25(ctx, req, out)
	}
	lists := []leanList{{hits: all}}
	if deep {
		newLean = newOnlyBM25(deepAll, p.Depth)
		if len(newLean) < p.Depth && len(deepAll) == depth {
			// A corpus mostly seen: the deeper search holds too few; BM25 over new documents.
			newLean, newErr = s.es.SearchLean(ctx, req.Query, p.Depth, true)
		}
		if newErr == nil {
			lists = append(lists, leanList{hits: newLean, onlyNew: true})
		}
	}
	fused, err := s.fuse(ctx, vec, p, lists...)
	if err != nil {
		if ctx.Err() != nil {
			return Lists{}, ctx.Err()
		}
		s.log.Warn("first stage: dense search; answering BM25 alone", "err", err)
		out.Reason = ReasonDenseUnavailable
		return s.finishBM25(ctx, req, out)
	}
	out.All, out.Baseline = fused[0], BaselineHybrid
	if req.NewK > 0 {
		out.New = newOnly(out.All, req.NewK)
		if len(out.New) < req.NewK {
			// Too few new documents among the top of all: rank the new ones on their own.
			switch {
			case len(fused) > 1:
				out.New = fused[1]
			case deep: // newErr: the new-document search after the deep one failed
			default:
				var lean []adapter.Hit
				if lean, newErr = s.es.SearchLean(ctx, req.Query, p.Depth, true); newErr == nil {
					if fused, newErr = s.fuse(ctx, vec, p, leanList{hits: lean, onlyNew: true}); newErr == nil {
						out.New = fused[0]
					}
				}
			}
			if newErr != nil {
				if ctx.Err() != nil {
					return Lists{}, ctx.Err()
				}
				out.New = nil
			}
			out.New = out.New[:min(len(out.New), req.NewK)]
		} else {
			newErr = nil // the new-document search was not needed
		}
	}
	if err := s.sources(ctx, req, &out); err != nil {
		return Lists{}, err
	}
	if newErr != nil {
		return out, &NewSearchError{Err: newErr}
	}
	return out, nil
}

// leanList is one BM25 ranking to fuse: over all documents, or over new ones (onlyNew), whose kNN half is
// then over new documents too.
type leanList struct {
	hits    []adapter.Hit
	onlyNew bool
}

// fuse re-scores each list's BM25 hits by their cosines and fuses them with the kNN's top p.KNN, in one
// multi-search: one exact-cosine lookup of the union of the lists' hits (the lists over all and over new
// documents share most of theirs: about 110 ids at 100 candidates, not 200), then each list's kNN. The
// cosines are the documents', whichever list asked, so the lists share one map. It returns the fused
// rankings in the lists' order.
func (s *Stage) fuse(ctx context.Context, vec []float32, p Params, lists ...leanList) ([][]adapter.Hit, error) {
	var (
		qs    []adapter.DenseQuery
		ids   []string
		known = map[string]bool{}
	)
	for _, l := range lists {
		for _, h := range l.hits {
			if !known[h.ID] {
				known[h.ID] = true
				ids = append(ids, h.ID)
			}
		}
	}
	if len(ids) > 0 {
		qs = append(qs, adapter.DenseQuery{IDs: ids})
	}
	if p.KNN > 0 {
		for _, l := range lists {
			qs = append(qs, adapter.DenseQuery{K: p.KNN, OnlyNew: l.onlyNew})
		}
	}
	out := make([][]adapter.Hit, len(lists))
	if len(qs) == 0 {
		return out, nil
	}
	res, err := s.es.Dense(ctx, vec, qs)
	if err != nil {
		return nil, err
	}
	exact := map[string]float64{}
	if len(ids) > 0 {
		for _, h := range res[0] {
			exact[h.ID] = h.Dense
		}
		res = res[1:]
	}
	for i, l := range lists {
		var knn []adapter.Hit
		if p.KNN > 0 {
			knn = res[i]
			for _, h := range knn { // a kNN hit's cosine is as exact as the lookup's
				if _, ok := exact[h.ID]; !ok {
					exact[h.ID] = h.Dense
				}
			}
		}
		out[i] = Fuse(l.hits, knn, exact, p)
	}
	return out, nil
}

// sources reads the titles and summaries of what the answer shows: All's first req.Size and New.
func (s *Stage) sources(ctx context.Context, req Request, out *Lists) error {
	n := len(out.All)
	if req.Size > 0 {
		n = min(n, req.Size)
	}
	need := append(append([]adapter.Hit(nil), out.All[:n]...), out.New...)
	if err := s.es.Sources(ctx, need); err != nil {
		return err
	}
	for i := range n {
		out.All[i] = need[i]
	}
	copy(out.New, need[n:])
	return nil
}

// finishBM25 answers BM25's lean hits over all documents alone (the dense half failed): the new list is
// BM25's new documents among them, or BM25 over new documents when they are too few.
func (s *Stage) finishBM25(ctx context.Context, req Request, out Lists) (Lists, error) {
	var newErr error
	if req.NewK > 0 {
		out.New = newOnly(out.All, req.NewK)
		if len(out.New) < req.NewK {
			if out.New, newErr = s.es.SearchNew(ctx, req.Query, req.NewK); newErr != nil {
				if ctx.Err() != nil {
					return Lists{}, ctx.Err()
				}
				out.New = nil
			}
		}
	}
	if err := s.sources(ctx, req, &out); err != nil {
		return Lists{}, err
	}
	if newErr != nil {
		return out, &NewSearchError{Err: newErr}
	}
	return out, nil
}

// searchBM25 is the first stage without an encoder: BM25 over all documents and, at the same time, over
// new ones.
func (s *Stage) searchBM25(ctx context.Context, req Request, p Params) (Lists, error) {
	out := Lists{Info: Info{Baseline: BaselineBM25, Encoder: s.Encoder()}}
	var (
		newErr   error
		panicked any
		done     = make(chan struct{})
	)
	if req.NewK > 0 {
		go func() {
			defer close(done)
			defer func() { panicked = recover() }()
			out.New, newErr = s.es.SearchNew(ctx, req.Query, req.NewK)
		}()
	} else {
		close(done)
	}
	all, err := s.es.SearchAll(ctx, req.Query, p.Depth)
	<-done
	if panicked != nil {
		panic(panicked)
	}
	if err != nil {
		return Lists{}, err
	}
	out.All = all
	if newErr != nil {
		out.New = nil
		return out, &NewSearchError{Err: newErr}
	}
	return out, nil
}

// newOnly returns the first k hits that are not seen, renumbered.
func newOnly(hits []adapter.Hit, k int) []adapter.Hit {
	out := make([]adapter.Hit, 0, k)
	for _, h := range hits {
		if len(out) == k {
			break
		}
		if !h.Seen {
			h.Rank = len(out) + 1
			out = append(out, h)
		}
	}
	return out
}

// newOnlyBM25 returns the first k hits of a BM25 ranking over all documents that are not seen, ranked
// among themselves: BM25's ranking over new documents.
func newOnlyBM25(hits []adapter.Hit, k int) []adapter.Hit {
	out := newOnly(hits, k)
	for i := range out {
		out[i].BM25Rank = out[i].Rank
	}
	return out
}

// Rescore fuses the caller's hits (in their own order, their Score Elasticsearch's) with the cosine of
// each to the query, for /v1/rerank and the drop-in: the first stage over a list someone else retrieved.
// Hits whose document has no vector in the index keep their place by the caller's score alone. The dense
// half failing leaves hits as they are, with Info saying why.
func (s *Stage) Rescore(ctx context.Context, query string, hits []adapter.Hit) ([]adapter.Hit, Info, error) {
	p := s.Params()
	info := Info{Baseline: BaselineBM25, Encoder: s.Encoder()}
	// The caller's order is the lexical side: its scores and ranks stand for BM25's.
	in := make([]adapter.Hit, len(hits))
	ids := make([]string, 0, len(hits))
	for i, h := range hits {
		in[i] = h
		in[i].Rank, in[i].BM25, in[i].BM25Rank = i+1, h.Score, i+1
		if h.ID != "" {
			ids = append(ids, h.ID)
		}
	}
	if s.enc == nil || p.Method == MethodBM25 || len(ids) == 0 {
		return in, info, nil
	}
	start := time.Now()
	vec, err := s.enc.Query(ctx, query)
	info.Embed = time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			return nil, info, ctx.Err()
		}
		s.log.Warn("first stage: embed query; keeping the hits' order", "err", err)
		info.Reason = ReasonEncoderError
		return in, info, nil
	}
	res, err := s.es.Dense(ctx, vec, []adapter.DenseQuery{{IDs: ids}})
	if err != nil {
		if ctx.Err() != nil {
			return nil, info, ctx.Err()
		}
		s.log.Warn("first stage: dense scores of the hits; keeping their order", "err", err)
		info.Reason = ReasonDenseUnavailable
		return in, info, nil
	}
	exact := make(map[string]float64, len(res[0]))
	for _, h := range res[0] {
		exact[h.ID] = h.Dense
	}
	info.Baseline = BaselineHybrid
	return Fuse(in, nil, exact, p), info, nil
}

// NewSearchError is the new-document search failing while the search over all documents answered: the
// caller can still answer the baseline (the model's context is what is missing).
type NewSearchError struct{ Err error }

func (e *NewSearchError) Error() string { return "search new documents: " + e.Err.Error() }
func (e *NewSearchError) Unwrap() error { return e.Err }

// IsNewSearch reports whether err is a NewSearchError.
func IsNewSearch(err error) bool {
	var ne *NewSearchError
	return errors.As(err, &ne)
}
