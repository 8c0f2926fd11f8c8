package adapter

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// closingTransport (a fake for the retrier's pure logic) fails every round trip with err.
type closingTransport struct {
	err   error
	calls int
}

func (f *closingTransport) Perform(*http.Request) (*http.Response, error) {
	f.calls++
	return nil, &roundTripError{err: f.err}
}

// A connection failure whose retry cannot start before the deadline is an outage when the retrier returns
// it, not only if the deadline is still ahead when the caller looks: a deadline passing between the two made
// it the caller's own deadline (a 504 instead of a 503 with Retry-After) on a loaded machine.
func TestRetrierClassifiesADeadlineCutShort(t *testing.T) {
	f := &closingTransport{err: io.EOF}
	r := &retrier{es: f, retries: 3, backoff: func(int) time.Duration { return time.Hour }, log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://es.invalid/", nil)
	require.NoError(t, err)
	_, err = r.Perform(req)
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, io.EOF)
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, 1, f.calls, "a backoff past the deadline is not waited")

	t.Run("retries exhausted without a deadline: the failure as it came", func(t *testing.T) {
		f := &closingTransport{err: io.EOF}
		r := &retrier{es: f, retries: 2, backoff: func(int) time.Duration { return time.Millisecond }, log: slog.New(slog.DiscardHandler)}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://es.invalid/", nil)
		require.NoError(t, err)
		_, err = r.Perform(req)
		require.ErrorIs(t, err, io.EOF)
		require.NotErrorIs(t, err, ErrUnavailable, "classified by the caller (transportError), as before")
		require.Equal(t, 3, f.calls)
	})
}
