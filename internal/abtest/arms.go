package abtest

import (
	"context"
	"fmt"
	"time"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/rank"
	"github.com/icicle-search/sidecar/retrieve"
)

// Searcher is what arm A needs from Elasticsearch (*adapter.Adapter satisfies it).
type Searcher interface {
	// SearchAll returns the BM25 top k over all documents.
	SearchAll(ctx context.Context, query string, k int) ([]adapter.Hit, error)
}

// Ranker is arm B, the sidecar's ranking (*rank.Pipeline satisfies it).
type Ranker interface {
	// Run ranks one request over the whole index.
	Run(ctx context.Context, req rank.Request) (rank.Response, error)
	// WorkDeadline is when Elasticsearch (and the reader) must be done: arm A's search keeps to it too.
	WorkDeadline(ctx context.Context) time.Time
	// Metrics receives arm A's time in Elasticsearch (stage "es").
	Metrics() *rank.Metrics
	// Size is how many results a request asking for size gets.
	Size(size int) int
	// Policy is the configured policy: the interleaved answer's arm B runs under it.
	Policy() string
}

// Arms answer a /v1/search request from its arm: arm A is BM25 over all documents as Elasticsearch ranks
// them (what a team runs today), arm B the sidecar's ranking, interleaved both. Safe for concurrent use.
type Arms struct {
	es   Searcher
	pipe Ranker
}

// NewArms returns the arms over es (arm A) and pipe (arm B).
func NewArms(es Searcher, pipe Ranker) *Arms { return &Arms{es: es, pipe: pipe} }

// Answer ranks query for a's arm: arm A without the reader; arm B (and the zero Assignment: the
// experiment off) under policy; interleaved, both at once under the configured policy. The error is an
// Elasticsearch failure (rank.ErrUpstream) or the client's cancellation.
func (x *Arms) Answer(ctx context.Context, a Assignment, query string, size int, policy string) (rank.Response, error) {
	switch a.Arm {
	case ArmA:
		return x.searchAll(ctx, query, size)
	case ArmInterleaved:
		return x.interleaved(ctx, query, size, a.Seed)
	default:
		return x.pipe.Run(ctx, rank.Request{Query: query, Size: size, Policy: policy})
	}
}

// searchAll is arm A: the BM25 top size over all documents, as Elasticsearch ranks them.
func (x *Arms) searchAll(ctx context.Context, query string, size int) (rank.Response, error) {
	size = x.pipe.Size(size)
	hits, esDur, err := x.bm25All(ctx, query, size)
	if err != nil {
		return rank.Response{}, err
	}
	return rank.Response{Mode: rank.ModeBM25, HitsReceived: len(hits), Results: rank.BaselineResults(hits, size, retrieve.BaselineBM25),
		Timings: rank.Timings{ES: ms(esDur)}}, nil
}

// bm25All asks Elasticsearch for the BM25 top k over all documents within its share of the budget.
func (x *Arms) bm25All(ctx context.Context, query string, k int) ([]adapter.Hit, time.Duration, error) {
	esCtx, cancel := context.WithDeadline(ctx, x.pipe.WorkDeadline(ctx))
	defer cancel()
	start := time.Now()
	hits, err := x.es.SearchAll(esCtx, query, k)
	d := time.Since(start)
	x.pipe.Metrics().ObserveStage("es", d.Seconds())
	if err != nil {
		return nil, d, rank.UpstreamError(ctx, "search all documents", err)
	}
	return hits, d, nil
}

// interleaved runs both arms at once (arm A's Elasticsearch call beside arm B's whole path) and answers
// with their team-draft interleaving (Interleave), each result saying its team. Mode, fallback reason,
// router probability and model stay arm B's; scores and bm25_rank are each result's own arm's.
func (x *Arms) interleaved(ctx context.Context, query string, size int, seed [2]uint64) (rank.Response, error) {
	size = x.pipe.Size(size)
	type answer struct {
		hits []adapter.Hit
		dur  time.Duration
		err  error
	}
	ach := make(chan answer, 1)
	go func() {
		var a answer
		defer func() {
			if r := recover(); r != nil {
				a.err = fmt.Errorf("search all documents: panic: %v", r)
			}
			ach <- a
		}()
		a.hits, a.dur, a.err = x.bm25All(ctx, query, size)
	}()
	resp, errB := x.pipe.Run(ctx, rank.Request{Query: query, Size: size, Policy: x.pipe.Policy()})
	armA := <-ach
	switch {
	case errB != nil:
		return rank.Response{}, errB
	case armA.err != nil:
		return rank.Response{}, armA.err
	}
	resp.Results = Interleave(rank.BaselineResults(armA.hits, size, retrieve.BaselineBM25), resp.Results, size, seed)
	resp.Timings.ES = max(resp.Timings.ES, ms(armA.dur))
	return resp, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
