package adapter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/elastic/elastic-transport-go/v8/elastictransport"
	"github.com/elastic/go-elasticsearch/v8/esapi"
)

// retrier is the esapi.Transport every request of the adapter goes through. Each attempt goes through the
// client, whose own retries are off, so its connection pool still picks the node and sets aside one that
// failed; the retries are here because only here is the request's context at hand. go-elasticsearch's
// retry loop knows neither the deadline nor what failed: its backoff sleeps until the context ends and then
// reports the context's error instead of the connection failure, and it also sleeps after the last
// attempt. So a cluster that refuses connections looked, under a request budget shorter than the backoffs,
// like a slow one (504 instead of 503).
//
// Connection failures (an error of the round trip itself: refused, reset, closed without an answer) and
// 429, 502, 503 and 504 answers are retried up to retries times with backoff. A backoff that would end
// after the context's deadline is not slept: the last failure is the result at once, an answer as it came
// (callers decode Elasticsearch's error or pass it on), a connection failure as an outage (below). When the
// context's deadline ends an attempt or a backoff after at least one such failure, or leaves no time for the
// next attempt, the error wraps ErrUnavailable and that failure, not context.DeadlineExceeded: the cluster is
// down or shedding load, which is not a slow answer. A canceled context is returned as it is.
type retrier struct {
	es      esapi.Transport // the client: one attempt per Perform
	retries int
	backoff func(attempt int) time.Duration
	log     *slog.Logger
}

// Perform sends req, retrying as the type's comment says.
func (r *retrier) Perform(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if r.retries > 0 && req.GetBody == nil && req.Body != nil && req.Body != http.NoBody {
		// Every attempt sends the whole body. esapi bodies are mostly bytes readers, for which
		// http.NewRequest sets GetBody; anything else is read once here.
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("read request body: %w", err)
		}
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		req.Body, _ = req.GetBody()
	}
	var failure error // the last connection failure or retryable answer; nil while there was none
	for attempt := 1; ; attempt++ {
		areq, err := attemptRequest(req, attempt)
		if err != nil {
			return nil, err
		}
		res, err := r.es.Perform(areq)
		var rt *roundTripError
		switch {
		case err == nil && !retryable(res.StatusCode):
			return res, nil
		case err != nil && !errors.As(err, &rt):
			// Not a failed round trip: the client is closed, or refused an answer (not Elasticsearch).
			return nil, err
		case err != nil && ctx.Err() != nil && !errors.Is(rt.err, context.Canceled) && !errors.Is(rt.err, context.DeadlineExceeded):
			// The attempt failed on its own (refused, reset) as the context ended: news about the cluster all
			// the same, an outage (a loaded machine can take a whole short deadline to be refused).
			return nil, outage(ctx, rt.err, attempt, rt.err)
		case err != nil && ctx.Err() != nil:
			// The attempt ended with the context: no news about the cluster.
			return nil, outage(ctx, failure, attempt-1, rt.err)
		case err != nil:
			failure = rt.err
		default:
			failure = &ResponseError{Status: res.StatusCode}
		}
		var wait time.Duration
		if attempt <= r.retries {
			wait = r.backoff(attempt)
		}
		if attempt > r.retries || !fitsBefore(ctx, wait) {
			// No retry left, or none that could start before the deadline: the last failure is the result.
			if err != nil && (ctx.Err() != nil || attempt <= r.retries) {
				// The deadline passed while this attempt failed, or leaves no time for the next: an outage, as
				// after a backoff cut short. (Returned bare, a failure the deadline cut short would be classified
				// by when the caller looked: a deadline passing a moment later made it the caller's deadline.)
				return nil, outage(ctx, rt.err, attempt, rt.err)
			}
			if err != nil {
				return nil, rt.err
			}
			return res, nil
		}
		if res != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
			_ = res.Body.Close()
		}
		r.log.Debug("elasticsearch retry", "attempt", attempt, "backoff_ms", wait.Milliseconds(), "err", failure)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, outage(ctx, failure, attempt, ctx.Err())
		case <-t.C:
		}
	}
}

// attemptRequest is the request of one attempt: a clone, because the client writes the node's address,
// authentication and client headers into what it sends, with the body rewound after the first.
func attemptRequest(req *http.Request, attempt int) (*http.Request, error) {
	areq := req.Clone(req.Context())
	if attempt > 1 && req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("rewind request body: %w", err)
		}
		areq.Body = body
	}
	return areq, nil
}

// fitsBefore reports whether a wait of d ends before ctx's deadline (always, without one).
func fitsBefore(ctx context.Context, d time.Duration) bool {
	deadline, ok := ctx.Deadline()
	return !ok || time.Now().Add(d).Before(deadline)
}

// outage is the error of a request whose context ended its attempts with err: after failed attempts
// (failures > 0, the last one failure) and by its deadline, an ErrUnavailable that does not match
// context.DeadlineExceeded; otherwise err itself.
func outage(ctx context.Context, failure error, failures int, err error) error {
	if failure == nil || errors.Is(ctx.Err(), context.Canceled) {
		return err
	}
	return fmt.Errorf("%w: %d attempts failed before the deadline, the last: %w", ErrUnavailable, failures, failure)
}

// roundTripError marks an error of the HTTP round trip itself, as opposed to one the client raises without
// sending (closed) or after an answer (the product check), which retrying cannot cure.
type roundTripError struct{ err error }

func (e *roundTripError) Error() string { return e.err.Error() }
func (e *roundTripError) Unwrap() error { return e.err }

// markRoundTrip is the client's interceptor around its HTTP transport: it marks round-trip errors.
func markRoundTrip(next elastictransport.RoundTripFunc) elastictransport.RoundTripFunc {
	return func(req *http.Request) (*http.Response, error) {
		res, err := next(req)
		if err != nil {
			return nil, &roundTripError{err: err}
		}
		return res, nil
	}
}
