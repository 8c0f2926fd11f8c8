package plugin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// testWriteToken is the write token of newTestServer's servers.
const testWriteToken = "test-write-token-0123456789"

// TestCallerAuthPutsTheCallersHeaderInTheContext: with passthrough (the default), what the Searcher sees
// in its context is the caller's Authorization, or an empty one; with service there is none (the adapter
// then uses its configured credentials); a header of another scheme is refused with Elasticsearch's 401.
func TestCallerAuthPutsTheCallersHeaderInTheContext(t *testing.T) {
	tests := []struct {
		name       string
		mode       string
		header     string
		wantStatus int
		want       string
		wantSet    bool
	}{
		{"basic", "", "Basic dXNlcjpwdw==", 200, "Basic dXNlcjpwdw==", true},
		{"api key", CallerPassthrough, "ApiKey Y2FsbGVy", 200, "ApiKey Y2FsbGVy", true},
		{"bearer", CallerPassthrough, "Bearer abc", 200, "Bearer abc", true},
		{"none: forwarded without credentials", CallerPassthrough, "", 200, "", true},
		{"service: the sidecar's credentials", CallerService, "Basic dXNlcjpwdw==", 200, "", false},
		{"unknown scheme", CallerPassthrough, "Digest username=x", 401, "", false},
		{"scheme without credentials", CallerPassthrough, "Basic", 401, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Both searches of /v1/search (the baseline and the model's context, run concurrently) must carry
			// the same credentials.
			var mu sync.Mutex
			var got string
			var set, called bool
			record := func(ctx context.Context) {
				mu.Lock()
				defer mu.Unlock()
				g, ok := adapter.CallerAuth(ctx)
				if called && (g != got || ok != set) {
					t.Errorf("the two searches carried different credentials: %q/%v and %q/%v", got, set, g, ok)
				}
				got, set, called = g, ok, true
			}
			es := &fakeSearcher{
				searchNew: func(ctx context.Context, _ string, _ int) ([]adapter.Hit, error) {
					record(ctx)
					return threeHits(), nil
				},
				searchAll: func(ctx context.Context, _ string, _ int) ([]adapter.Hit, error) {
					record(ctx)
					return threeHits(), nil
				},
			}
			s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.CallerCredentials = tt.mode })
			req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/search", strings.NewReader(`{"query":"q"}`))
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			require.Equal(t, tt.wantStatus, rec.Code, rec.Body.String())
			if tt.wantStatus == http.StatusUnauthorized {
				require.False(t, called, "a refused caller reaches no search")
				require.Contains(t, rec.Header().Values("WWW-Authenticate"), "ApiKey")
				require.Contains(t, rec.Body.String(), `"security_exception"`)
				return
			}
			require.Equal(t, tt.wantSet, set)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestSearchPassesOnElasticsearch401: a 401 of the cluster to the caller's credentials is the caller's
// answer with the cluster's WWW-Authenticate, not a BM25 fallback or a 5xx, and carries no results. The
// same error for the sidecar's own credentials (service mode) is the sidecar's dependency failing, as
// before: 503.
func TestSearchPassesOnElasticsearch401(t *testing.T) {
	denied := &adapter.ResponseError{Status: 401, Type: "security_exception", Reason: "missing authentication credentials",
		Authenticate: []string{`Basic realm="security", charset="UTF-8"`}}
	for _, tt := range []struct {
		mode string
		want int
	}{{CallerPassthrough, 401}, {CallerService, 503}} {
		t.Run(tt.mode, func(t *testing.T) {
			es := &fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) {
				return nil, denied
			}, searchAll: func(context.Context, string, int) ([]adapter.Hit, error) { return threeHits(), nil }}
			s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.CallerCredentials = tt.mode })
			code, body, hdr := do(t, s, http.MethodPost, "/v1/search", `{"query":"q"}`)
			require.Equal(t, tt.want, code, body)
			require.NotContains(t, body, "results")
			if tt.want == 401 {
				require.Equal(t, []string{`Basic realm="security", charset="UTF-8"`}, hdr.Values("WWW-Authenticate"))
			}
		})
	}
}

// TestWriteAuth: /v1/ingest needs the write token as a bearer token; without a token configured the
// endpoint is off; the admin token does not open it.
func TestWriteAuth(t *testing.T) {
	tests := []struct {
		name   string
		token  string // the server's WriteToken
		header string
		want   int
	}{
		{"right token", testWriteToken, "Bearer " + testWriteToken, 200},
		{"no header", testWriteToken, "", 401},
		{"wrong token", testWriteToken, "Bearer " + testWriteToken + "x", 401},
		{"prefix of the token", testWriteToken, "Bearer " + testWriteToken[:10], 401},
		{"not bearer", testWriteToken, "Basic " + testWriteToken, 401},
		{"the admin token", testWriteToken, "Bearer admin-token-0123456789", 401},
		{"off", "", "Bearer " + testWriteToken, 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ing := &fakeIngester{}
			s := newTestServer(t, &fakeSearcher{}, &fakeReranker{}, func(o *testOptions) {
				o.Ingester, o.WriteToken, o.AdminToken = ing, tt.token, "admin-token-0123456789"
			})
			req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/ingest", strings.NewReader(lineAlpha))
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			require.Equal(t, tt.want, rec.Code, rec.Body.String())
			if tt.want == 401 {
				require.Equal(t, `Bearer realm="icicle-write"`, rec.Header().Get("WWW-Authenticate"))
			}
			require.Equal(t, tt.want == 200, len(ing.got) > 0, "only an authorised request writes")
		})
	}
}

// TestSeparateAdmin: with SeparateAdmin the write endpoint is served by AdminHandler only.
func TestSeparateAdmin(t *testing.T) {
	s := newTestServer(t, &fakeSearcher{}, &fakeReranker{}, func(o *testOptions) { o.Ingester, o.SeparateAdmin = &fakeIngester{}, true })
	post := func(h http.Handler) int {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/ingest", strings.NewReader(lineAlpha))
		req.Header.Set("Authorization", "Bearer "+testWriteToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	require.Equal(t, http.StatusOK, post(s.AdminHandler()))
	require.Equal(t, http.StatusNotFound, post(s.Handler()), "the public handler does not serve writes")
}

func TestBearerIs(t *testing.T) {
	for _, tt := range []struct {
		header, want string
		ok           bool
	}{
		{"Bearer abc", "abc", true},
		{"Bearer abc", "abd", false},
		{"Bearer ", "", false},
		{"bearer abc", "abc", false},
		{"abc", "abc", false},
	} {
		require.Equal(t, tt.ok, bearerIs(tt.header, tt.want), "%q vs %q", tt.header, tt.want)
	}
}
