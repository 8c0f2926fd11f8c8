package adapter_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
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

func TestRaw(t *testing.T) {
	const vendor = "application/vnd.elasticsearch+json; compatible-with=8"
	a, f := newFakeAdapter(t, map[string][]reply{
		"HEAD /":                     {{status: 200}},
		"POST /icicle-docs/_count":   {{status: 200, file: "count.json"}},
		"GET /icicle-docs/_doc/a/b":  {{status: 404}},
		"DELETE /_search/scroll":     {{status: 200}},
		"POST /icicle-docs/_msearch": {{status: 503, file: "unavailable.json"}, {status: 200, file: "count.json"}},
	})
	for _, tt := range []struct {
		name      string
		req       adapter.RawRequest
		route     string
		status    int
		wantCalls int
		wantErr   error
	}{
		{name: "ping", req: adapter.RawRequest{Method: "HEAD"}, route: "HEAD /", status: 200, wantCalls: 1},
		{name: "count with the caller's media type", req: adapter.RawRequest{Method: "POST", Path: []string{"icicle-docs", "_count"},
			Query: url.Values{"q": {"title:x"}}, Header: http.Header{"Content-Type": {vendor}, "Accept": {vendor}, "Authorization": {"Basic eDp5"}, "Cookie": {"c"}},
			Body: []byte(`{"query":{"match_all":{}}}`)}, route: "POST /icicle-docs/_count", status: 200, wantCalls: 1},
		{name: "a segment is escaped, never a path", req: adapter.RawRequest{Path: []string{"icicle-docs", "_doc", "a/b"}},
			route: "GET /icicle-docs/_doc/a/b", status: 404, wantCalls: 1},
		{name: "retried with the same body", req: adapter.RawRequest{Method: "POST", Path: []string{"icicle-docs", "_msearch"}, Body: []byte("{}\n{}\n")},
			route: "POST /icicle-docs/_msearch", status: 200, wantCalls: 2},
		{name: "dot-dot", req: adapter.RawRequest{Path: []string{".."}}, wantErr: adapter.ErrInvalidArgument},
		{name: "empty segment", req: adapter.RawRequest{Path: []string{"icicle-docs", ""}}, wantErr: adapter.ErrInvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := a.Raw(t.Context(), tt.req)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.status, res.Status)
			require.Equal(t, "Elasticsearch", res.Header.Get("X-Elastic-Product"))
			method, path, _ := strings.Cut(tt.route, " ")
			calls := f.requests(method, path)
			require.Len(t, calls, tt.wantCalls)
			for _, c := range calls {
				require.Equal(t, string(tt.req.Body), string(c.Body))
				require.Equal(t, tt.req.Query.Encode(), c.Query)
			}
		})
	}
	t.Run("only the media types and trace headers are forwarded", func(t *testing.T) {
		var got http.Header
		a, err := adapter.New(adapter.Options{Addresses: []string{"http://es.test:9200"}, Username: "sidecar", Password: "pw",
			Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				got = r.Header.Clone()
				return &http.Response{StatusCode: 200, Header: http.Header{"X-Elastic-Product": {"Elasticsearch"}}, Body: http.NoBody, Request: r}, nil
			})}, nil)
		require.NoError(t, err)
		defer a.Close()
		_, err = a.Raw(t.Context(), adapter.RawRequest{Method: "POST", Path: []string{"icicle-docs", "_count"}, Body: []byte(`{}`),
			Header: http.Header{"Content-Type": {vendor}, "Accept": {vendor}, "X-Opaque-Id": {"op"}, "Authorization": {"Basic eDp5"}, "Cookie": {"c"}}})
		require.NoError(t, err)
		require.Equal(t, vendor, got.Get("Content-Type"))
		require.Equal(t, vendor, got.Get("Accept"))
		require.Equal(t, "op", got.Get("X-Opaque-Id"))
		require.Empty(t, got.Get("Cookie"))
		require.Equal(t, "Basic c2lkZWNhcjpwdw==", got.Get("Authorization"), "the transport's credentials, not a header copied from the caller")
	})
	t.Run("a segment is escaped on the wire", func(t *testing.T) {
		var path string
		a, err := adapter.New(adapter.Options{Addresses: []string{"http://es.test:9200"},
			Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				path = r.URL.EscapedPath()
				return &http.Response{StatusCode: 200, Header: http.Header{"X-Elastic-Product": {"Elasticsearch"}}, Body: http.NoBody, Request: r}, nil
			})}, nil)
		require.NoError(t, err)
		defer a.Close()
		_, err = a.Raw(t.Context(), adapter.RawRequest{Path: []string{"icicle-docs", "_doc", "a/b?c#d"}})
		require.NoError(t, err)
		require.Equal(t, "/icicle-docs/_doc/a%2Fb%3Fc%23d", path)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestIndexNames(t *testing.T) {
	// Captured from Elasticsearch 8.14.3: icicle-docs is an alias of icicle-docs-v1, which also has the
	// aliases docs-read (only it) and everything (it and logs-1).
	a, _ := newFakeAdapter(t, map[string][]reply{
		"GET /icicle-docs/_alias":          {{status: 200, file: "alias_of_index.json"}},
		"GET /_alias/docs-read,everything": {{status: 200, file: "alias_holders.json"}},
	})
	names, err := a.IndexNames(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{"docs-read", "icicle-docs", "icicle-docs-v1"}, names, "everything also covers logs-1: left out")

	a, _ = newFakeAdapter(t, map[string][]reply{"GET /icicle-docs/_alias": {{status: 404, file: "index_not_found.json"}}})
	_, err = a.IndexNames(t.Context())
	require.ErrorIs(t, err, adapter.ErrIndexMissing)
}
