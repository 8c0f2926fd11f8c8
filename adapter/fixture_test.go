package adapter_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

var update = flag.Bool("update", false, "rewrite the golden request bodies in testdata/")

// reply is one canned answer: an HTTP status with a body from testdata/, or a transport error.
type reply struct {
	status    int
	file      string // testdata/<file>; empty means no body
	err       error  // returned by RoundTrip instead of a response
	noProduct bool   // leave out X-Elastic-Product, as a proxy or another product would
}

// call is one request the fake saw.
type call struct {
	Method, Path, Query string
	Body                []byte
}

// fakeES is an http.RoundTripper that answers from fixtures captured from real Elasticsearch nodes (8.14.3;
// the files named _9x, and dense_hits.json and field_mapping_*.json, from 9.5.3).
// Routes are "METHOD /path"; each route's replies are used in order and the last one repeats.
type fakeES struct {
	t      *testing.T
	mu     sync.Mutex
	routes map[string][]reply
	calls  []call
}

func newFakeES(t *testing.T, routes map[string][]reply) *fakeES {
	t.Helper()
	return &fakeES{t: t, routes: routes}
}

func (f *fakeES) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body.Close()
	}
	key := req.Method + " " + req.URL.Path
	f.mu.Lock()
	f.calls = append(f.calls, call{Method: req.Method, Path: req.URL.Path, Query: req.URL.RawQuery, Body: body})
	rs, ok := f.routes[key]
	var r reply
	if ok {
		r = rs[0]
		if len(rs) > 1 {
			f.routes[key] = rs[1:]
		}
	}
	f.mu.Unlock()
	if !ok {
		f.t.Errorf("fakeES: unexpected request %s", key)
		return nil, fmt.Errorf("fakeES: no route for %s", key)
	}
	if err := req.Context().Err(); err != nil {
		return nil, err // as net/http does for a request whose context is done
	}
	if r.err != nil {
		return nil, r.err
	}
	var b []byte
	if r.file != "" {
		var err error
		b, err = os.ReadFile(filepath.Join("testdata", r.file))
		require.NoError(f.t, err)
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if !r.noProduct {
		h.Set("X-Elastic-Product", "Elasticsearch")
	}
	return &http.Response{
		StatusCode:    r.status,
		Status:        fmt.Sprintf("%d %s", r.status, http.StatusText(r.status)),
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(b)),
		ContentLength: int64(len(b)),
		Request:       req,
	}, nil
}

// requests returns the calls made to one route.
func (f *fakeES) requests(method, path string) []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []call
	for _, c := range f.calls {
		if c.Method == method && c.Path == path {
			out = append(out, c)
		}
	}
	return out
}

// newFakeAdapter returns an adapter on the default index whose requests go to a fakeES with these routes.
func newFakeAdapter(t *testing.T, routes map[string][]reply) (*adapter.Adapter, *fakeES) {
	t.Helper()
	f := newFakeES(t, routes)
	a, err := adapter.New(adapter.Options{Addresses: []string{"http://es.test:9200"}, Transport: f}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	return a, f
}

// Routes shared by many tests, on the default index.
const (
	routeInfo    = "GET /"
	routeMapping = "GET /icicle-docs/_mapping"
	routeCreate  = "PUT /icicle-docs"
	routeSearch  = "POST /icicle-docs/_search"
	routeMget    = "POST /icicle-docs/_mget"
	routeCount   = "POST /icicle-docs/_count"
	routeBulk    = "POST /icicle-docs/_bulk"
)

var (
	okInfo         = []reply{{status: 200, file: "info.json"}}
	okMapping      = []reply{{status: 200, file: "mapping.json"}}
	missingMapping = []reply{{status: 404, file: "index_not_found.json"}}
	unavailable    = []reply{{status: 503, file: "unavailable.json"}}
)

// golden compares a JSON request body with testdata/<name>, ignoring formatting; -update rewrites the file.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(got, &v), "request body is not JSON: %s", got)
	pretty, err := json.MarshalIndent(v, "", "  ")
	require.NoError(t, err)
	pretty = append(pretty, '\n')
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, pretty, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./adapter -update to create it")
	require.JSONEq(t, string(want), string(pretty))
}

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

func docIDs(hits []adapter.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.DocID
	}
	return out
}
