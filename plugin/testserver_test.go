package plugin

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/internal/gate"
	"github.com/icicle-search/sidecar/rank"
	"github.com/icicle-search/sidecar/retrieve"
)

// testOptions are a test server's settings in one struct: the HTTP layer's (Options, embedded) and the
// ranking's (rank.Options, rank.GuardOptions) flat, so that a test sets what it needs in one place. newServer wires them as
// cmd/icicle does.
type testOptions struct {
	Options // the HTTP layer's; Registry and Logger default as newServer says

	// The ranking's.
	ESBudgetFraction                        float64
	MaxCandidates                           int
	SnippetChars                            int
	Decode                                  inference.Options
	FirstStage                              rank.FirstStage
	MaxInflight, QueueSize                  int
	QueueTimeout                            time.Duration
	ConsecutiveFailures                     int
	OpenTimeout                             time.Duration
	HalfOpenMaxRequests                     int
	BreakerCountInterval                    time.Duration
	Policy                                  string
	FusionK                                 int
	Gate                                    *gate.Gate
	RunModelWhenGateNever                   bool
	RouteByFirstStage, MemoryFromFirstStage bool
	MinCopyProb, MinTopScore                float64
}

// newServer wires a test server as cmd/icicle wires the sidecar: the first stage (BM25 alone over es when the
// options name none), the reader (model: nil for none, a *fakeReranker read through rank.NewICICLE, or a
// *Swapper) under a guard, the pipeline, the HTTP layer, all on one metrics registry.
func newServer(es Searcher, model any, o testOptions) *Server {
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	first := o.FirstStage
	if first == nil {
		bm25 := retrieve.DefaultParams
		bm25.Method = retrieve.MethodBM25
		st, err := retrieve.New(bm25Only{es}, nil, bm25, log)
		if err != nil {
			panic(err) // static parameters
		}
		first = st
	}
	var (
		source rank.Source
		sw     *Swapper
	)
	switch m := model.(type) {
	case nil:
	case *fakeReranker:
		if m != nil {
			source = rank.Fixed{Reader: rank.NewICICLE(m, o.Decode, o.RouteByFirstStage), G: o.Gate, N: o.Model.Name}
		}
	case *Swapper:
		sw, source = m, m
	default:
		panic("newServer: model is nil, a *fakeReranker or a *Swapper")
	}
	metrics := rank.NewMetrics(reg)
	requestTimeout := o.RequestTimeout
	if requestTimeout == 0 {
		requestTimeout = 2 * time.Second
	}
	queueTimeout := o.QueueTimeout
	if queueTimeout == 0 {
		queueTimeout = 500 * time.Millisecond
	}
	guard := rank.NewGuard(rank.GuardOptions{MaxInflight: o.MaxInflight, QueueSize: o.QueueSize, QueueTimeout: o.QueueTimeout,
		ConsecutiveFailures: o.ConsecutiveFailures, OpenTimeout: o.OpenTimeout, HalfOpenMaxRequests: o.HalfOpenMaxRequests,
		Interval: o.BreakerCountInterval, Logger: log,
		RunBudget: time.Duration(float64(requestTimeout)*(0.9-o.ESBudgetFraction)) - queueTimeout}, metrics)
	pipe, err := rank.New(first, es, source, guard, metrics, rank.Options{Policy: o.Policy, FusionK: o.FusionK,
		RunModelWhenGateNever: o.RunModelWhenGateNever, MaxCandidates: o.MaxCandidates, BeamWidth: o.Decode.BeamWidth,
		RouteByFirstStage: o.RouteByFirstStage, MemoryFromFirstStage: o.MemoryFromFirstStage, MinCopyProb: o.MinCopyProb,
		MinTopScore: o.MinTopScore, SnippetChars: o.SnippetChars, RequestTimeout: requestTimeout,
		ReserveFraction: o.ESBudgetFraction, Logger: log})
	if err != nil {
		panic(err)
	}
	http := o.Options
	http.Registry, http.Logger = reg, log
	return New(es, pipe, sw, http)
}

// bm25Only lets a Searcher serve as the first stage's without dense searches (no encoder).
type bm25Only struct{ Searcher }

func (bm25Only) Dense(context.Context, []float32, []adapter.DenseQuery) ([][]adapter.Hit, error) {
	return nil, errors.New("dense search: no encoder configured")
}

func (b bm25Only) SearchLean(ctx context.Context, query string, k int, onlyNew bool) ([]adapter.Hit, error) {
	if onlyNew {
		return b.SearchNew(ctx, query, k)
	}
	return b.SearchAll(ctx, query, k)
}

func (bm25Only) Sources(context.Context, []adapter.Hit) error { return nil }

// icicle reads with a fake engine as the sidecar reads with the ICICLE engine (rank.NewICICLE), beam width 10.
func icicle(engine rank.Ranker) rank.Reader {
	return rank.NewICICLE(engine, inference.Options{BeamWidth: 10}, false)
}
