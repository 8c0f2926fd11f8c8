package main

import (
	"log/slog"
	"time"

	"github.com/icicle-search/sidecar/config"
	"github.com/icicle-search/sidecar/rank"
)

// newPipeline wires the ranking from cfg: the first stage, the reader (source; nil: none) under a guard sized
// by the concurrency and breaker sections, and the policy. m receives its metrics.
func newPipeline(cfg config.Config, first rank.FirstStage, es rank.Searcher, source rank.Source, m *rank.Metrics,
	log *slog.Logger) (*rank.Pipeline, error) {
	s, q, b, x := cfg.Server, cfg.Concurrency, cfg.Breaker, cfg.Experimental
	guard := rank.NewGuard(rank.GuardOptions{
		MaxInflight: q.MaxInflight, QueueSize: q.QueueSize, QueueTimeout: q.QueueTimeout,
		ConsecutiveFailures: b.ConsecutiveFailures, OpenTimeout: b.OpenTimeout, HalfOpenMaxRequests: b.HalfOpenMaxRequests,
		Interval: b.Interval, RunBudget: runBudget(s.RequestTimeout, s.ESBudgetFraction, q.QueueTimeout), Logger: log,
	}, m)
	return rank.New(first, es, source, guard, m, rank.Options{
		Policy: cfg.Policy.Mode, FusionK: x.FusionK, RunModelWhenGateNever: x.RunModelWhenGateNever,
		MaxCandidates: cfg.Decode.MaxCandidates, BeamWidth: cfg.Decode.BeamWidth,
		RouteByFirstStage: x.RouteByFirstStage, MemoryFromFirstStage: x.MemoryScope == config.MemoryFirstStage,
		MinCopyProb: x.MinCopyProb, MinTopScore: x.MinTopScore, SnippetChars: x.SnippetChars,
		RequestTimeout: s.RequestTimeout, ReserveFraction: s.ESBudgetFraction, Logger: log,
	})
}

// runBudget is the time a read is promised before the guard's cost model knows what reads take: the
// request's budget less the answer's reserve, a typical first stage (a tenth of the budget) and the longest
// queue wait.
func runBudget(request time.Duration, reserve float64, queue time.Duration) time.Duration {
	return time.Duration(float64(request)*(0.9-reserve)) - queue
}
