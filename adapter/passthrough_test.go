package adapter_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

func TestRawSearch(t *testing.T) {
	const body = `{"query":{"match":{"text":"closest star system"}},"ext":{"other":{}}}`
	tests := []struct {
		name       string
		index      string
		query      url.Values
		body       string
		routes     map[string][]reply
		wantStatus int
		wantFile   string // testdata file the body must equal
		wantCalls  int
		wantErr    error
	}{
		{
			name:  "forwards query string and body unchanged",
			index: "icicle-docs", query: url.Values{"filter_path": {"took,hits"}, "typed_keys": {"true"}}, body: body,
			routes:     map[string][]reply{routeSearch: {{status: 200, file: "passthrough_search.json"}}},
			wantStatus: 200, wantFile: "passthrough_search.json", wantCalls: 1,
		},
		{
			name:       "any index expression, empty body",
			index:      "logs-*,icicle-docs",
			routes:     map[string][]reply{"POST /logs-*,icicle-docs/_search": {{status: 200, file: "passthrough_search.json"}}},
			wantStatus: 200, wantFile: "passthrough_search.json", wantCalls: 1,
		},
		{
			name:  "an Elasticsearch error status is an answer, not an error",
			index: "icicle-docs", body: `{"query":{"matc":{"text":"x"}}}`,
			routes:     map[string][]reply{routeSearch: {{status: 400, file: "passthrough_bad_query.json"}}},
			wantStatus: 400, wantFile: "passthrough_bad_query.json", wantCalls: 1,
		},
		{
			name:  "index not found passes through",
			index: "icicle-docs", body: body,
			routes:     map[string][]reply{routeSearch: {{status: 404, file: "index_not_found.json"}}},
			wantStatus: 404, wantFile: "index_not_found.json", wantCalls: 1,
		},
		{
			name:  "503 is retried with the same body",
			index: "icicle-docs", body: body,
			routes:     map[string][]reply{routeSearch: {{status: 503, file: "unavailable.json"}, {status: 200, file: "passthrough_search.json"}}},
			wantStatus: 200, wantFile: "passthrough_search.json", wantCalls: 2,
		},
		{
			name:  "503 after the retries is returned as it is",
			index: "icicle-docs", body: body,
			routes:     map[string][]reply{routeSearch: unavailable},
			wantStatus: 503, wantFile: "unavailable.json", wantCalls: 4,
		},
		{
			name:  "connection refused is unavailable",
			index: "icicle-docs", body: body,
			routes:  map[string][]reply{routeSearch: {{err: syscall.ECONNREFUSED}}},
			wantErr: adapter.ErrUnavailable, wantCalls: 4,
		},
		{name: "index with a slash", index: "a/_doc", wantErr: adapter.ErrInvalidArgument},
		{name: "dot-dot index", index: "..", wantErr: adapter.ErrInvalidArgument},
		{name: "empty index", index: "", wantErr: adapter.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, f := newFakeAdapter(t, tt.routes)
			status, hdr, got, err := a.RawSearch(t.Context(), tt.index, tt.query, []byte(tt.body))
			calls := f.requests("POST", "/"+tt.index+"/_search")
			require.Len(t, calls, tt.wantCalls)
			for _, c := range calls {
				require.Equal(t, tt.body, string(c.Body), "the body goes out byte for byte, retries included")
				require.Equal(t, tt.query.Encode(), c.Query)
			}
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantStatus, status)
			require.Equal(t, "Elasticsearch", hdr.Get("X-Elastic-Product"))
			want, err := os.ReadFile(filepath.Join("testdata", tt.wantFile))
			require.NoError(t, err)
			require.Equal(t, string(want), string(got))
		})
	}
}

// blockingTransport never answers: each request waits for its context.
type blockingTransport struct{}

func (blockingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	<-req.Context().Done()
	return nil, req.Context().Err()
}

func TestRawSearchDeadlinesAndClose(t *testing.T) {
	t.Run("the adapter's timeout is an outage", func(t *testing.T) {
		a, err := adapter.New(adapter.Options{Transport: blockingTransport{}, RequestTimeout: 20 * time.Millisecond, MaxRetries: -1}, nil)
		require.NoError(t, err)
		defer a.Close()
		_, _, _, err = a.RawSearch(t.Context(), "icicle-docs", nil, []byte(`{}`))
		require.ErrorIs(t, err, adapter.ErrUnavailable)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
	t.Run("the caller's cancellation is returned as it is", func(t *testing.T) {
		a, err := adapter.New(adapter.Options{Transport: blockingTransport{}, MaxRetries: -1}, nil)
		require.NoError(t, err)
		defer a.Close()
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(10*time.Millisecond, cancel)
		_, _, _, err = a.RawSearch(ctx, "icicle-docs", nil, []byte(`{}`))
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, adapter.ErrUnavailable)
	})
	t.Run("closed", func(t *testing.T) {
		a, err := adapter.New(adapter.Options{Transport: newFakeES(t, nil)}, nil)
		require.NoError(t, err)
		require.NoError(t, a.Close())
		_, _, _, err = a.RawSearch(t.Context(), "icicle-docs", nil, nil)
		require.ErrorIs(t, err, adapter.ErrClosed)
	})
}
