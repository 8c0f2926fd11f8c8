package plugin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
)

// fakeBlockingModel is a fake model whose runs wait until released, so a test can hold every session.
type fakeBlockingModel struct {
	started chan struct{}
	release chan struct{}
}

func newFakeBlockingModel() *fakeBlockingModel {
	return &fakeBlockingModel{started: make(chan struct{}, 16), release: make(chan struct{})}
}

func (f *fakeBlockingModel) rank(ctx context.Context, q string, c []inference.Candidate) (inference.Result, error) {
	f.started <- struct{}{}
	select {
	case <-f.release:
		return copyBeta(ctx, q, c)
	case <-ctx.Done():
		return inference.Result{}, ctx.Err()
	}
}

// rerankReason posts a rerank and returns its mode and fallback_reason.
func rerankReason(t *testing.T, s *Server) (mode, reason string) {
	t.Helper()
	code, body, _ := do(t, s, "POST", "/v1/rerank", rerankBody(threeHits(), "q"))
	require.Equal(t, http.StatusOK, code, body)
	reason, _ = body["fallback_reason"].(string)
	return body["mode"].(string), reason
}

// TestAdmissionQueueTimeoutIsNotABreakerFailure: with the one session busy, requests that wait past
// queue_timeout, or find the queue full, are answered from BM25 as "overloaded", and however many there
// are, the breaker stays closed (it would open after one failure here).
func TestAdmissionQueueTimeoutIsNotABreakerFailure(t *testing.T) {
	es := &fakeSearcher{}
	fm := newFakeBlockingModel()
	s := newTestServer(t, es, &fakeReranker{rank: fm.rank}, func(o *testOptions) {
		o.MaxInflight, o.QueueSize, o.QueueTimeout = 1, 1, 200*time.Millisecond
		o.ConsecutiveFailures = 1
		o.RequestTimeout = 5 * time.Second
	})
	held := make(chan string, 1)
	go func() {
		_, reason := rerankReason(t, s)
		held <- reason
	}()
	<-fm.started // the only session is taken

	for i := range 3 {
		mode, reason := rerankReason(t, s)
		require.Equal(t, "first_stage_fallback", mode, "request %d", i)
		require.Equal(t, ReasonOverloaded, reason, "request %d", i)
		require.Equal(t, "closed", breakerState(s), "a wait for a session is not a model failure")
	}

	// A second waiter while one waits finds the queue (size 1) full and is shed at once.
	waiting := make(chan string, 1)
	go func() {
		_, reason := rerankReason(t, s)
		waiting <- reason
	}()
	require.Eventually(t, func() bool { return gaugeValue(t, s, "icicle_model_queued") == 1 }, 5*time.Second, time.Millisecond)
	_, reason := rerankReason(t, s)
	require.Equal(t, ReasonOverloaded, reason, "a full queue sheds")
	require.Equal(t, ReasonOverloaded, <-waiting)

	close(fm.release)
	require.Empty(t, <-held, "the request holding the session was answered by the model")
	mode, reason := rerankReason(t, s)
	require.Equal(t, "reranked", mode, reason)
	require.Equal(t, "closed", breakerState(s))
	m := scrapeAt(t, s, "/metrics")
	require.Contains(t, m, `icicle_fallbacks_total{reason="overloaded"} 5`)
	require.Contains(t, m, `icicle_breaker_transitions_total{to="open"} 0`)
}

// TestAdmissionWaiterGetsFreedSession: a request queued behind a busy session runs the model as soon as
// the session comes free within queue_timeout.
func TestAdmissionWaiterGetsFreedSession(t *testing.T) {
	fm := newFakeBlockingModel()
	s := newTestServer(t, &fakeSearcher{}, &fakeReranker{rank: fm.rank}, func(o *testOptions) {
		o.MaxInflight, o.QueueSize, o.QueueTimeout = 1, 1, 5*time.Second
		o.RequestTimeout = 20 * time.Second
	})
	var wg sync.WaitGroup
	modes := make(chan string, 2)
	for range 2 {
		wg.Go(func() {
			mode, _ := rerankReason(t, s)
			modes <- mode
		})
	}
	<-fm.started
	require.Eventually(t, func() bool { return gaugeValue(t, s, "icicle_model_queued") == 1 }, 5*time.Second, time.Millisecond)
	close(fm.release)
	wg.Wait()
	close(modes)
	for mode := range modes {
		require.Equal(t, "reranked", mode)
	}
}

// fakeFlakyModel is a fake model that fails while failing is set, and answers otherwise.
type fakeFlakyModel struct {
	failing atomic.Bool
	calls   atomic.Int32
}

func (f *fakeFlakyModel) rank(ctx context.Context, q string, c []inference.Candidate) (inference.Result, error) {
	f.calls.Add(1)
	if f.failing.Load() {
		return inference.Result{}, errors.New("fake model: onnx run failed")
	}
	return copyBeta(ctx, q, c)
}

// TestBreakerOpensOnModelErrorsAndHeals: failures of the model itself open the breaker; after
// open_timeout one trial request (half-open) that succeeds closes it again.
func TestBreakerOpensOnModelErrorsAndHeals(t *testing.T) {
	fm := &fakeFlakyModel{}
	fm.failing.Store(true)
	s := newTestServer(t, &fakeSearcher{}, &fakeReranker{rank: fm.rank}, func(o *testOptions) {
		o.ConsecutiveFailures, o.OpenTimeout, o.HalfOpenMaxRequests = 3, 50*time.Millisecond, 1
	})
	for i, want := range []string{ReasonModelError, ReasonModelError, ReasonModelError, ReasonBreakerOpen, ReasonBreakerOpen} {
		_, reason := rerankReason(t, s)
		require.Equal(t, want, reason, "request %d", i)
	}
	require.EqualValues(t, 3, fm.calls.Load(), "an open breaker does not call the model")
	require.Equal(t, "open", breakerState(s))

	fm.failing.Store(false) // the model recovers
	require.Eventually(t, func() bool { return breakerState(s) == "half-open" }, 5*time.Second, 5*time.Millisecond)
	mode, reason := rerankReason(t, s)
	require.Equal(t, "reranked", mode, reason)
	require.Equal(t, "closed", breakerState(s), "one good trial closes it")
	m := scrapeAt(t, s, "/metrics")
	for _, line := range []string{`icicle_breaker_transitions_total{to="open"} 1`, `icicle_breaker_transitions_total{to="half-open"} 1`,
		`icicle_breaker_transitions_total{to="closed"} 1`, `icicle_breaker_state 0`} {
		require.Contains(t, m, line)
	}
}

// TestModelOverrunIsABreakerFailure: a run that exceeds the model's share of the budget once started is
// the model's failure ("model_timeout", counted), and its deadline leaves Elasticsearch's share free.
func TestModelOverrunIsABreakerFailure(t *testing.T) {
	var budget, deadline atomic.Int64
	m := &fakeReranker{rank: func(ctx context.Context, _ string, _ []inference.Candidate) (inference.Result, error) {
		dl, ok := ctx.Deadline()
		require.True(t, ok, "the model runs under a deadline")
		budget.Store(int64(time.Until(dl)))
		deadline.Store(dl.UnixNano())
		<-ctx.Done()
		return inference.Result{}, ctx.Err()
	}}
	s := newTestServer(t, &fakeSearcher{}, m, func(o *testOptions) {
		o.RequestTimeout, o.ESBudgetFraction, o.ConsecutiveFailures = 100*time.Millisecond, 0.4, 2
	})
	var sent time.Time
	for i, want := range []string{ReasonModelTimeout, ReasonModelTimeout, ReasonBreakerOpen} {
		if i < 2 {
			sent = time.Now() // the last request the model ran for
		}
		_, reason := rerankReason(t, s)
		require.Equal(t, want, reason, "request %d", i)
	}
	// Both bounds hold however late the scheduler runs the model: its deadline is the request's start plus
	// 60ms, the request starts after it was sent, and the model starts after the request.
	require.LessOrEqual(t, time.Duration(budget.Load()), 60*time.Millisecond, "100ms less the 40%% held for Elasticsearch")
	require.GreaterOrEqual(t, time.Unix(0, deadline.Load()).Sub(sent), 60*time.Millisecond, "the model's deadline is 60ms after the request began")
}

// TestMetricsExistFromStart: a fresh server's /metrics has every labelled counter a rate() alert reads,
// at zero, before any request.
func TestMetricsExistFromStart(t *testing.T) {
	s := newTestServer(t, &fakeSearcher{}, &fakeReranker{rank: copyBeta}, nil)
	m := scrapeAt(t, s, "/metrics")
	want := []string{
		`icicle_model_swaps_total{result="success"} 0`, `icicle_model_swaps_total{result="failure"} 0`,
		`icicle_ab_requests_total{arm="A"} 0`, `icicle_ab_requests_total{arm="B"} 0`, `icicle_ab_requests_total{arm="interleaved"} 0`,
		`icicle_ab_interleaved_results_total{team="A"} 0`, `icicle_ab_interleaved_results_total{team="B"} 0`,
		`icicle_routes_total{route="copy"} 0`, `icicle_routes_total{route="parametric"} 0`,
		`icicle_requests_total{endpoint="search",mode="reranked",status="200"} 0`,
		`icicle_requests_total{endpoint="rerank",mode="first_stage_fallback",status="200"} 0`,
		`icicle_breaker_state 0`, `icicle_model_queued 0`, `icicle_model_running 0`,
		`icicle_breaker_transitions_total{to="open"} 0`,
		`icicle_block_store_bytes 0`, `icicle_block_store_blocks 0`, `icicle_block_store_hits_total 0`,
		`icicle_block_store_misses_total 0`, `icicle_block_store_evicted_total 0`, `icicle_block_store_refused_total 0`,
	}
	for _, reason := range []string{"overloaded", "breaker_open", "model_timeout", "model_error", "context_full", "low_confidence"} {
		want = append(want, `icicle_fallbacks_total{reason="`+reason+`"} 0`)
	}
	for _, line := range want {
		require.Contains(t, m, line+"\n")
	}
}

// TestMetricsPath: metrics.path moves the endpoint, metrics.enabled false removes it.
func TestMetricsPath(t *testing.T) {
	tests := []struct {
		name      string
		mod       func(*testOptions)
		path      string
		wantCode  int
		otherPath string
	}{
		{"default", nil, "/metrics", 200, ""},
		{"moved", func(o *testOptions) { o.MetricsPath = "/internal/prom" }, "/internal/prom", 200, "/metrics"},
		{"off", func(o *testOptions) { o.MetricsOff = true }, "/metrics", 404, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, &fakeSearcher{}, &fakeReranker{rank: copyBeta}, tc.mod)
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), "GET", tc.path, nil))
			require.Equal(t, tc.wantCode, rec.Code)
			if tc.wantCode == 200 {
				require.Contains(t, rec.Body.String(), "icicle_fallbacks_total")
			}
			if tc.otherPath != "" {
				rec := httptest.NewRecorder()
				s.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), "GET", tc.otherPath, nil))
				require.Equal(t, 404, rec.Code, "the old path is gone")
			}
		})
	}
}

func scrapeAt(t *testing.T, s *Server, path string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), "GET", path, nil))
	require.Equal(t, 200, rec.Code)
	b, err := io.ReadAll(rec.Body)
	require.NoError(t, err)
	return string(b)
}

// gaugeValue reads an unlabelled gauge from /metrics (-1 when absent).
func gaugeValue(t *testing.T, s *Server, name string) float64 {
	t.Helper()
	for line := range strings.SplitSeq(scrapeAt(t, s, "/metrics"), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, line)
			return f
		}
	}
	return -1
}

// breakerState is the server's reader breaker state: "closed", "half-open" or "open".
func breakerState(s *Server) string { return s.pipe.Guard().BreakerState() }
