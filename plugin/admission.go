package plugin

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/icicle-search/sidecar/inference"
)

// Fallback reasons: the response is answered from BM25 and says why.
const (
	// ReasonOverloaded: no model session came free within concurrency.queue_timeout (or the queue was
	// full). Load, not a model failure: the breaker does not count it.
	ReasonOverloaded = "overloaded"
	// ReasonBreakerOpen: the breaker is open (or half-open with its trial requests taken).
	ReasonBreakerOpen = "breaker_open"
	// ReasonModelTimeout: a run that had started exceeded the model's share of the request budget.
	ReasonModelTimeout = "model_timeout"
	// ReasonModelError: the model returned an error.
	ReasonModelError = "model_error"
	// ReasonContextFull: the prompt does not fit the model's context (the request's size, not a failure).
	ReasonContextFull = "context_full"
	// ReasonLowConfidence: the model answered below policy.min_copy_prob or policy.min_top_score (rank).
	ReasonLowConfidence = "low_confidence"
	// ReasonContextUnavailable: the new-document search (the model's context) failed while the baseline
	// answered (searchModel).
	ReasonContextUnavailable = "context_unavailable"
)

// fallbackReasons lists every reason a response may fall back to BM25 with, so /metrics shows each
// icicle_fallbacks_total series at zero from the start.
var fallbackReasons = []string{ReasonOverloaded, ReasonBreakerOpen, ReasonModelTimeout, ReasonModelError,
	ReasonContextFull, ReasonLowConfidence, ReasonContextUnavailable}

// admission is the bounded FIFO queue in front of the model sessions. run holds one token per request
// running the model (capacity Options.MaxInflight, the engine's session count); tickets holds one per
// request running or waiting (capacity MaxInflight + QueueSize), so at most QueueSize wait. Waiters are
// served in arrival order: Go queues the goroutines blocked on a channel send first in, first out.
type admission struct {
	run     chan struct{}
	tickets chan struct{}
	timeout time.Duration
}

func newAdmission(inflight, queue int, timeout time.Duration) *admission {
	return &admission{run: make(chan struct{}, inflight), tickets: make(chan struct{}, inflight+queue), timeout: timeout}
}

// acquire waits for a model session until the queue timeout or until deadline (the end of the model's
// share of the budget), whichever is first. ok is false when none came free in time or the queue was
// full; err is set only when ctx ended first (the client went away).
func (a *admission) acquire(ctx context.Context, deadline time.Time) (release func(), ok bool, err error) {
	select {
	case a.tickets <- struct{}{}:
	default:
		return nil, false, nil // the queue is full
	}
	release = func() { <-a.run; <-a.tickets }
	select {
	case a.run <- struct{}{}: // a session is free now
		return release, true, nil
	default:
	}
	wait := min(a.timeout, time.Until(deadline))
	if wait <= 0 {
		<-a.tickets
		return nil, false, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case a.run <- struct{}{}:
		return release, true, nil
	case <-t.C:
		<-a.tickets
		return nil, false, nil
	case <-ctx.Done():
		<-a.tickets
		return nil, false, ctx.Err()
	}
}

// runTimes keeps the durations of the last model runs that succeeded, for their median: what a run
// takes on this machine at its current load.
type runTimes struct {
	mu   sync.Mutex
	ring [64]time.Duration
	n    int // runs recorded, at most len(ring)
	next int
}

// minRunSamples is how many runs median needs before it answers.
const minRunSamples = 8

func (r *runTimes) add(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ring[r.next] = d
	r.next = (r.next + 1) % len(r.ring)
	r.n = min(r.n+1, len(r.ring))
}

// median is the median of the recorded runs; ok is false with fewer than minRunSamples.
func (r *runTimes) median() (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n < minRunSamples {
		return 0, false
	}
	d := slices.Clone(r.ring[:r.n])
	slices.Sort(d)
	return d[len(d)/2], true
}

// modelDeadline is when the model must have answered: the request's deadline less Elasticsearch's
// share of the budget (RequestTimeout x ESBudgetFraction), held back so that a fallback can still ask
// Elasticsearch for the BM25 answer in time.
func (s *Server) modelDeadline(ctx context.Context) time.Time {
	end, ok := ctx.Deadline()
	if !ok {
		end = time.Now().Add(s.opts.RequestTimeout)
	}
	return end.Add(-time.Duration(float64(s.opts.RequestTimeout) * s.opts.ESBudgetFraction))
}

// runBudget is the time a run is promised when the request's other stages stayed within their
// shares: the budget less Elasticsearch's share twice (the search, and the reserve for a fallback)
// and the longest queue wait.
func (s *Server) runBudget() time.Duration {
	return time.Duration(float64(s.opts.RequestTimeout)*(1-2*s.opts.ESBudgetFraction)) - s.opts.QueueTimeout
}

// failedTimeout is the least time a run must have started with for its timeout to be the model's
// failure: runBudget, and once minRunSamples runs have succeeded, at least twice their median. A run
// that had twice what runs take at the current load and still did not finish is stuck or broken; one
// that ran out of a budget squeezed by load (slow Elasticsearch, a long wait, cores shared with the
// other session) is not, and is answered model_timeout without counting towards the breaker.
func (s *Server) failedTimeout() time.Duration {
	if med, ok := s.runs.median(); ok {
		return max(s.runBudget(), 2*med)
	}
	return s.runBudget()
}

// shortBudgetError is a model timeout of a run that started with less than runBudget.
type shortBudgetError struct {
	budget time.Duration
	err    error
}

func (e *shortBudgetError) Error() string {
	return "model run started with " + e.budget.String() + " left: " + e.err.Error()
}

func (e *shortBudgetError) Unwrap() error { return e.err }

// runModel admits the request to the model and runs it: the single admission point of rank(). It
// returns the model's result, or a fallback reason ("" when the model answered): the caller then
// answers from BM25 with that reason. err is only the client's cancellation (context.Canceled).
//
// Order: an open breaker sheds at once; then the request waits in the bounded FIFO queue for a session
// at most concurrency.queue_timeout and never so long that the median run (runTimes) could not finish
// before the model's deadline (modelDeadline); not getting one is "overloaded" and is NOT reported to
// the breaker, because a busy model is not a failing one. Only the run itself goes through the
// breaker, with the rest of the model's share of the budget: an error, or a timeout of a run that
// started with at least failedTimeout, counts as a failure; a cancellation, a prompt too long for the
// context, or a timeout of a run that started with less does not (Server.New's IsSuccessful).
func (s *Server) runModel(ctx context.Context, query string, in []inference.Candidate) (inference.Result, string, error) {
	if s.breaker.State() == gobreaker.StateOpen {
		return inference.Result{}, ReasonBreakerOpen, nil
	}
	deadline := s.modelDeadline(ctx)
	// Wait only while a run could still finish: a session given to a run that cannot make its deadline
	// is taken from one that could.
	waitUntil := deadline
	if med, ok := s.runs.median(); ok {
		waitUntil = deadline.Add(-med)
	}
	waitStart := time.Now()
	s.metrics.queued.Inc()
	release, ok, err := s.admit.acquire(ctx, waitUntil)
	s.metrics.queued.Dec()
	s.metrics.queueWait.Observe(time.Since(waitStart).Seconds())
	switch {
	case err != nil && errors.Is(err, context.Canceled):
		return inference.Result{}, "", err
	case err != nil || !ok:
		return inference.Result{}, ReasonOverloaded, nil
	}
	defer release()
	s.metrics.running.Inc()
	defer s.metrics.running.Dec()

	mctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	modelStart := time.Now()
	budget := deadline.Sub(modelStart)
	res, err := s.breaker.Execute(func() (inference.Result, error) {
		res, err := s.model.Rank(mctx, query, in, s.opts.Decode)
		switch {
		case err == nil:
			s.runs.add(time.Since(modelStart))
		case errors.Is(err, context.DeadlineExceeded) && budget < s.failedTimeout():
			// Started with less than a run needs at the current load: running out of it is not the
			// model's failure.
			err = &shortBudgetError{budget: budget, err: err}
		}
		return res, err
	})
	s.metrics.stage.WithLabelValues("model").Observe(time.Since(modelStart).Seconds())
	switch {
	case err == nil:
		return res, "", nil
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return inference.Result{}, "", err
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
		return inference.Result{}, ReasonBreakerOpen, nil
	case errors.Is(err, inference.ErrContextFull):
		return inference.Result{}, ReasonContextFull, nil
	case errors.Is(err, context.DeadlineExceeded):
		s.log.Warn("model timed out", "budget_ms", deadline.Sub(modelStart).Milliseconds(), "err", err)
		return inference.Result{}, ReasonModelTimeout, nil
	default:
		s.log.Error("model failed", "err", err)
		return inference.Result{}, ReasonModelError, nil
	}
}
