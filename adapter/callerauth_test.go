package adapter_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// TestCallerAuthReplacesConfiguredCredentials: every kind of request the adapter sends (a typed search,
// the multi-get of Resolve, RawSearch) carries the caller's Authorization when the context has one, no
// Authorization at all for a caller who sent none, and the configured API key only for the sidecar's own
// work (a context without WithCallerAuth). The server is a real HTTP server recording the headers.
func TestCallerAuthReplacesConfiguredCredentials(t *testing.T) {
	var mu sync.Mutex
	var got []string // Authorization of each request; "<none>" when absent
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if v, ok := r.Header["Authorization"]; ok {
			got = append(got, v[0])
		} else {
			got = append(got, "<none>")
		}
		mu.Unlock()
		w.Header().Set("X-Elastic-Product", "Elasticsearch")
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/icicle-docs/_mget":
			_, _ = w.Write([]byte(`{"docs":[]}`))
		default:
			_, _ = w.Write([]byte(`{"took":1,"hits":{"hits":[]}}`))
		}
	}))
	t.Cleanup(srv.Close)
	a, err := adapter.New(adapter.Options{Addresses: []string{srv.URL}, APIKey: "c2VydmljZTprZXk=", MaxRetries: -1}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })

	calls := map[string]func(ctx context.Context) error{
		"search": func(ctx context.Context) error { _, err := a.SearchNew(ctx, "q", 10); return err },
		"resolve": func(ctx context.Context) error {
			_, err := a.Resolve(ctx, []string{"Some Title"})
			return err
		},
		"raw search": func(ctx context.Context) error {
			_, _, _, err := a.RawSearch(ctx, "icicle-docs", nil, []byte(`{}`))
			return err
		},
	}
	tests := []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"the sidecar's own work: configured credentials", t.Context(), "APIKey c2VydmljZTprZXk="},
		{"caller with Basic", adapter.WithCallerAuth(t.Context(), "Basic dXNlcjpwdw=="), "Basic dXNlcjpwdw=="},
		{"caller with ApiKey", adapter.WithCallerAuth(t.Context(), "ApiKey Y2FsbGVy"), "ApiKey Y2FsbGVy"},
		{"caller with Bearer", adapter.WithCallerAuth(t.Context(), "Bearer tok"), "Bearer tok"},
		{"caller without credentials: none, never the sidecar's", adapter.WithCallerAuth(t.Context(), ""), "<none>"},
	}
	for _, tt := range tests {
		for name, call := range calls {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				mu.Lock()
				got = nil
				mu.Unlock()
				require.NoError(t, call(tt.ctx))
				mu.Lock()
				defer mu.Unlock()
				require.NotEmpty(t, got)
				for _, h := range got {
					require.Equal(t, tt.want, h)
				}
			})
		}
	}
}

// TestResponseErrorCarriesWWWAuthenticate: a 401 keeps the cluster's WWW-Authenticate values, so the
// handlers can pass them on to the caller.
func TestResponseErrorCarriesWWWAuthenticate(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Elastic-Product", "Elasticsearch")
		w.Header().Add("WWW-Authenticate", `Basic realm="security", charset="UTF-8"`)
		w.Header().Add("WWW-Authenticate", "ApiKey")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"type":"security_exception","reason":"missing authentication credentials"},"status":401}`))
	}))
	t.Cleanup(srv.Close)
	a, err := adapter.New(adapter.Options{Addresses: []string{srv.URL}}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	_, err = a.SearchNew(adapter.WithCallerAuth(t.Context(), ""), "q", 10)
	var re *adapter.ResponseError
	require.ErrorAs(t, err, &re)
	require.Equal(t, http.StatusUnauthorized, re.Status)
	require.Equal(t, "security_exception", re.Type)
	require.Equal(t, []string{`Basic realm="security", charset="UTF-8"`, "ApiKey"}, re.Authenticate)
}
