package adapter_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// step is what fakeFlaky does with one request: fail the round trip with err, hang until the request's
// context ends (a node that accepted the connection and does not answer), or answer status.
type step struct {
	err    error
	hang   bool
	status int
}

var (
	refused = step{err: syscall.ECONNREFUSED}
	reset   = step{err: syscall.ECONNRESET}
	closed  = step{err: io.EOF} // accepted, then closed without an answer
	hangs   = step{hang: true}
)

// fakeFlaky is an http.RoundTripper for a cluster in trouble: request n takes script[n], the last step
// repeating.
type fakeFlaky struct {
	mu     sync.Mutex
	script []step
	calls  int
}

func (f *fakeFlaky) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	f.mu.Lock()
	s := f.script[min(f.calls, len(f.script)-1)]
	f.calls++
	f.mu.Unlock()
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	switch {
	case s.err != nil:
		return nil, s.err
	case s.hang:
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	h := http.Header{"X-Elastic-Product": {"Elasticsearch"}, "Content-Type": {"application/json"}}
	return &http.Response{StatusCode: s.status, Header: h, Body: io.NopCloser(strings.NewReader(`{}`)), Request: req}, nil
}

func (f *fakeFlaky) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// TestRetryOutageVersusDeadline pins how a request that ends without an answer is classified: a cluster
// that refuses or drops connections (or sheds load) until the caller's deadline is unavailable (plugin: 503
// with Retry-After), however the deadline falls among the retries; one that accepted the connection and
// did not answer in time is the caller's deadline (504), or the adapter's RequestTimeout (ErrUnavailable
// with context.DeadlineExceeded). Backoffs are fixed so the cases do not depend on jitter.
func TestRetryOutageVersusDeadline(t *testing.T) {
	tests := []struct {
		name       string
		script     []step
		retries    int
		backoff    time.Duration
		deadline   time.Duration // the caller's; 0: none
		reqTimeout time.Duration // Options.RequestTimeout; 0: 10s
		want       []error
		wantNot    []error
		wantCalls  int // 0: not checked
	}{
		{
			name: "refused until the deadline: unavailable, never a deadline", script: []step{refused},
			retries: 100, backoff: 20 * time.Millisecond, deadline: 150 * time.Millisecond,
			want: []error{adapter.ErrUnavailable, syscall.ECONNREFUSED}, wantNot: []error{context.DeadlineExceeded},
		},
		{
			name: "closed without an answer until the deadline", script: []step{closed},
			retries: 100, backoff: 20 * time.Millisecond, deadline: 150 * time.Millisecond,
			want: []error{adapter.ErrUnavailable, io.EOF}, wantNot: []error{context.DeadlineExceeded},
		},
		{
			name: "reset, and the retry hangs until the deadline: still an outage", script: []step{reset, hangs},
			retries: 3, backoff: time.Millisecond, deadline: 100 * time.Millisecond,
			want: []error{adapter.ErrUnavailable, syscall.ECONNRESET}, wantNot: []error{context.DeadlineExceeded},
			wantCalls: 2,
		},
		{
			name: "a backoff longer than the budget left is not waited", script: []step{refused},
			retries: 3, backoff: time.Hour, deadline: 5 * time.Second,
			want: []error{adapter.ErrUnavailable, syscall.ECONNREFUSED}, wantNot: []error{context.DeadlineExceeded},
			wantCalls: 1,
		},
		{
			name: "503 answers until the deadline: the last answer", script: []step{{status: 503}},
			retries: 3, backoff: time.Hour, deadline: 5 * time.Second,
			want: []error{adapter.ErrUnavailable}, wantNot: []error{context.DeadlineExceeded}, wantCalls: 1,
		},
		{
			name: "accepted, no answer before the caller's deadline: a deadline", script: []step{hangs},
			retries: 3, backoff: time.Millisecond, deadline: 50 * time.Millisecond,
			want: []error{context.DeadlineExceeded}, wantNot: []error{adapter.ErrUnavailable}, wantCalls: 1,
		},
		{
			name: "accepted, no answer within RequestTimeout: unavailable and a deadline", script: []step{hangs},
			retries: 3, backoff: time.Millisecond, reqTimeout: 50 * time.Millisecond,
			want: []error{adapter.ErrUnavailable, context.DeadlineExceeded}, wantCalls: 1,
		},
		{
			name: "refused until RequestTimeout: unavailable, not a deadline", script: []step{refused},
			retries: 100, backoff: 20 * time.Millisecond, reqTimeout: 150 * time.Millisecond,
			want: []error{adapter.ErrUnavailable, syscall.ECONNREFUSED}, wantNot: []error{context.DeadlineExceeded},
		},
		{
			name: "retries exhausted without a deadline", script: []step{refused},
			retries: 2, backoff: time.Millisecond,
			want: []error{adapter.ErrUnavailable, syscall.ECONNREFUSED}, wantNot: []error{context.DeadlineExceeded},
			wantCalls: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeFlaky{script: tt.script}
			a, err := adapter.New(adapter.Options{Transport: f, MaxRetries: tt.retries, RequestTimeout: tt.reqTimeout}, nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Close() })
			a.SetBackoff(func(int) time.Duration { return tt.backoff })
			ctx := t.Context()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			_, err = a.Check(ctx)
			require.Error(t, err)
			for _, w := range tt.want {
				require.ErrorIs(t, err, w)
			}
			for _, w := range tt.wantNot {
				require.NotErrorIs(t, err, w)
			}
			if tt.wantCalls > 0 {
				require.Equal(t, tt.wantCalls, f.count())
			}
		})
	}
}

func TestRetryWaits(t *testing.T) {
	t.Run("no wait after the last attempt", func(t *testing.T) {
		f := &fakeFlaky{script: []step{refused}}
		a, err := adapter.New(adapter.Options{Transport: f, MaxRetries: 2}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Close() })
		var waits []int
		a.SetBackoff(func(attempt int) time.Duration { waits = append(waits, attempt); return time.Millisecond })
		_, err = a.Check(t.Context())
		require.ErrorIs(t, err, adapter.ErrUnavailable)
		require.Equal(t, 3, f.count())
		require.Equal(t, []int{1, 2}, waits, "one backoff before each retry, none after the last")
	})
	t.Run("recovers after connection failures, resending the body", func(t *testing.T) {
		f := &fakeFlaky{script: []step{refused, closed, {status: 200}}}
		a, err := adapter.New(adapter.Options{Transport: f}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Close() })
		a.SetBackoff(func(int) time.Duration { return time.Millisecond })
		status, _, body, err := a.RawSearch(t.Context(), "icicle-docs", nil, []byte(`{"query":{"match_all":{}}}`))
		require.NoError(t, err)
		require.Equal(t, 200, status)
		require.JSONEq(t, `{}`, string(body))
		require.Equal(t, 3, f.count())
	})
	t.Run("the caller's cancellation during the backoff is a cancellation", func(t *testing.T) {
		f := &fakeFlaky{script: []step{refused}}
		a, err := adapter.New(adapter.Options{Transport: f}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Close() })
		var first atomic.Bool
		ctx, cancel := context.WithCancel(t.Context())
		a.SetBackoff(func(int) time.Duration {
			if !first.Swap(true) {
				time.AfterFunc(10*time.Millisecond, cancel)
			}
			return time.Second // fits in the RequestTimeout: waited, and canceled
		})
		_, err = a.Check(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, adapter.ErrUnavailable)
		require.False(t, errors.Is(err, context.DeadlineExceeded))
	})
}
