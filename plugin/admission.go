package plugin

import (
	"context"
	"errors"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/icicle-search/sidecar/inference"
)

// Fallback reasons runModel returns: the response is answered from BM25 and says why.
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
)

// fallbackReasons lists every reason a response may fall back to BM25 with, so /metrics shows each
// icicle_fallbacks_total series at zero from the start. low_confidence is rank()'s own.
var fallbackReasons = []string{ReasonOverloaded, ReasonBreakerOpen, ReasonModelTimeout, ReasonModelError,
	ReasonContextFull, "low_confidence"}

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

// runModel admits the request to the model and runs it: the single admission point of rank(). It
// returns the model's result, or a fallback reason ("" when the model answered): the caller then
// answers from BM25 with that reason. err is only the client's cancellation (context.Canceled).
//
// Order: an open breaker sheds at once; then the request waits in the bounded FIFO queue for a session
// at most concurrency.queue_timeout and never past the model's deadline (modelDeadline); not getting
// one is "overloaded" and is NOT reported to the breaker, because a busy model is not a failing one.
// Only the run itself goes through the breaker, with the rest of the model's share of the budget: an
// error, or a run that exceeds that budget once started, counts as a failure; a cancellation or a
// prompt too long for the context does not (Server.New's IsSuccessful).
func (s *Server) runModel(ctx context.Context, query string, in []inference.Candidate) (inference.Result, string, error) {
	if s.breaker.State() == gobreaker.StateOpen {
		return inference.Result{}, ReasonBreakerOpen, nil
	}
	deadline := s.modelDeadline(ctx)
	waitStart := time.Now()
	s.metrics.queued.Inc()
	release, ok, err := s.admit.acquire(ctx, deadline)
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
	res, err := s.breaker.Execute(func() (inference.Result, error) { return s.model.Rank(mctx, query, in, s.opts.Decode) })
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
