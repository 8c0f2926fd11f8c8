package plugin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/dropin"
	"github.com/icicle-search/sidecar/inference"
)

// esSearchBody is Elasticsearch's answer with threeHits (Gamma has no summary), as the fake's RawSearch
// returns it by default.
const esSearchBody = `{"took":3,"timed_out":false,"_shards":{"total":1,"successful":1,"skipped":0,"failed":0},
"hits":{"total":{"value":3,"relation":"eq"},"max_score":3,"hits":[
{"_index":"icicle-docs","_id":"1","_score":3,"_source":{"docid":"Alpha","title":"Alpha","summary":"a"},"highlight":{"title":["<em>Alpha</em>"]}},
{"_index":"icicle-docs","_id":"2","_score":2,"_source":{"docid":"Beta","title":"Beta","summary":"b"}},
{"_index":"icicle-docs","_id":"3","_score":1,"_source":{"docid":"Gamma","title":"Gamma"}}]}}`

// esBadQuery is Elasticsearch 8.14's answer to an unknown query type.
const esBadQuery = `{"error":{"root_cause":[{"type":"parsing_exception","reason":"unknown query [matc] did you mean [match]?","line":1,"col":18}],"type":"parsing_exception","reason":"unknown query [matc] did you mean [match]?","line":1,"col":18},"status":400}`

// recordingES returns a fakeSearcher whose RawSearch records what it was sent and answers status, body.
func recordingES(status int, body string, got *[]string) *fakeSearcher {
	return &fakeSearcher{rawSearch: func(_ context.Context, index string, q url.Values, b []byte) (int, http.Header, []byte, error) {
		*got = append(*got, index, q.Encode(), string(b))
		return status, http.Header{"X-Elastic-Product": {"Elasticsearch"}, "Content-Type": {"application/json"}}, []byte(body), nil
	}}
}

// hitOrder lists "docid/provenance" of hits.hits ("docid/-" for a hit without _icicle).
func hitOrder(t *testing.T, body map[string]any) []string {
	t.Helper()
	var out []string
	for _, h := range body["hits"].(map[string]any)["hits"].([]any) {
		h := h.(map[string]any)
		prov := "-"
		if ic, ok := h["_icicle"].(map[string]any); ok {
			prov = ic["provenance"].(string)
		}
		out = append(out, fmt.Sprintf("%s/%s", h["_source"].(map[string]any)["docid"], prov))
	}
	return out
}

func TestDropinReranks(t *testing.T) {
	var sent []string
	es := recordingES(200, esSearchBody, &sent)
	s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, nil)
	body := `{"query":{"match":{"title":"who sang"}},"_source":["docid","title","summary"],"ext":{"icicle":{"query":"who sang it"}}}`
	code, out, hdr := do(t, s, "POST", "/my-alias/_search?typed_keys=true", body)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, []string{"my-alias", "typed_keys=true"}, sent[:2], "index and query string forwarded")
	require.JSONEq(t, `{"query":{"match":{"title":"who sang"}},"_source":["docid","title","summary"],"from":0,"size":10}`, sent[2],
		"ext.icicle stripped, the rank window asked for")
	require.Equal(t, "Elasticsearch", hdr.Get("X-Elastic-Product"), "Elasticsearch clients check it")

	require.GreaterOrEqual(t, out["took"], 3.0, "took is the sidecar's whole request, never less than Elasticsearch's")
	require.GreaterOrEqual(t, out["took"], math.Floor(out["icicle"].(map[string]any)["timings"].(map[string]any)["total_ms"].(float64)))
	require.Contains(t, out, "_shards")
	require.EqualValues(t, 3, out["hits"].(map[string]any)["total"].(map[string]any)["value"])
	// Beta copied, Seen Doc from memory (inserted), then Elasticsearch's order fills the page of 10, of which
	// Elasticsearch had only 3.
	require.Equal(t, []string{"Beta/copy", "Seen Doc/parametric", "Alpha/bm25", "Gamma/bm25"}, hitOrder(t, out))
	hits := out["hits"].(map[string]any)["hits"].([]any)
	beta, seen, alpha := hits[0].(map[string]any), hits[1].(map[string]any), hits[2].(map[string]any)
	require.Equal(t, "2", beta["_id"])
	require.EqualValues(t, 2, beta["_score"], "Elasticsearch's score is kept")
	require.EqualValues(t, 2, beta["_icicle"].(map[string]any)["bm25_rank"])
	require.InDelta(t, -0.1, beta["_icicle"].(map[string]any)["score"], 1e-9)
	require.Equal(t, "icicle-docs-v1", seen["_index"], "the recalled hit as Elasticsearch returned it")
	require.NotContains(t, seen["_source"], "text", "the recalled hit obeys the request's _source filter")
	require.Equal(t, "es-Seen Doc", seen["_id"])
	require.Nil(t, seen["_score"])
	require.Equal(t, "stored Seen Doc", seen["_source"].(map[string]any)["summary"])
	require.NotContains(t, seen["_icicle"], "bm25_rank")
	require.Contains(t, alpha, "highlight", "a hit keeps every field Elasticsearch gave it")

	ic := out["icicle"].(map[string]any)
	require.Equal(t, "reranked", ic["mode"])
	require.Equal(t, "ext.icicle.query", ic["query_from"])
	require.EqualValues(t, 3, ic["hits_received"])
	require.EqualValues(t, 3, ic["candidates_in_context"])
	require.InDelta(t, 0.9, ic["router_prob"], 1e-9)
	require.NotEmpty(t, ic["request_id"])
	require.Contains(t, ic["timings"], "es_ms")
}

// TestDropinSourceFilter: with a _source filter the model still ranks the window's full docid, title and
// summary (read by _mget), the hits keep the filter, and the recalled document obeys it too.
func TestDropinSourceFilter(t *testing.T) {
	const titleOnly = `{"took":3,"hits":{"total":{"value":3,"relation":"eq"},"max_score":3,"hits":[
{"_index":"icicle-docs","_id":"1","_score":3,"_source":{"title":"Alpha"}},
{"_index":"icicle-docs","_id":"2","_score":2,"_source":{"title":"Beta"}},
{"_index":"icicle-docs","_id":"3","_score":1,"_source":{"title":"Gamma"}}]}}`
	var cands []inference.Candidate
	var mget []string
	es := &fakeSearcher{
		rawSearch: func(context.Context, string, url.Values, []byte) (int, http.Header, []byte, error) {
			return 200, http.Header{"Content-Type": {"application/vnd.elasticsearch+json;compatible-with=8"}}, []byte(titleOnly), nil
		},
		raw: func(_ context.Context, req adapter.RawRequest) (adapter.RawResponse, error) {
			mget = append(mget, strings.Join(req.Path, "/"))
			return fakeRecall(req), nil
		},
	}
	model := &fakeReranker{rank: func(ctx context.Context, q string, c []inference.Candidate) (inference.Result, error) {
		cands = c
		return copyBeta(ctx, q, c)
	}}
	s := newTestServer(t, es, model, nil)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), "POST", "/icicle-docs/_search",
		strings.NewReader(`{"query":{"match":{"title":"q"}},"_source":["title"]}`)))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "application/vnd.elasticsearch+json;compatible-with=8", rec.Header().Get("Content-Type"), "Elasticsearch's media type")
	var out map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	require.Equal(t, []string{"_mget", "icicle-docs/_search"}, mget, "titles by _mget, then the recall")
	require.Equal(t, []inference.Candidate{{Title: "Alpha", Summary: "a"}, {Title: "Beta", Summary: "b"}, {Title: "Gamma"}}, cands,
		"the model reads the summaries the filter hid")
	for i, h := range out["hits"].(map[string]any)["hits"].([]any) {
		require.Equal(t, []any{"title"}, keys(h.(map[string]any)["_source"].(map[string]any)), "hit %d", i)
	}
	require.Equal(t, "Seen Doc", out["hits"].(map[string]any)["hits"].([]any)[1].(map[string]any)["_source"].(map[string]any)["title"])
}

func keys(m map[string]any) []any {
	out := make([]any, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestDropinModes(t *testing.T) {
	match := `{"query":{"match":{"title":"q"}}}`
	failing := &fakeReranker{rank: func(context.Context, string, []inference.Candidate) (inference.Result, error) {
		return inference.Result{}, errors.New("onnx exploded")
	}}
	tests := []struct {
		name, path, body string
		model            *fakeReranker
		opts             func(*testOptions)
		esBody           string
		mode, reason     string
		order            []string
	}{
		{name: "fused", body: match, model: &fakeReranker{rank: copyBeta}, opts: func(o *testOptions) { o.Policy = "fusion" },
			mode: "fused", order: []string{"Beta/copy", "Alpha/bm25", "Seen Doc/parametric", "Gamma/bm25"}},
		{name: "bm25 policy", body: match, model: failing, opts: func(o *testOptions) { o.Policy = "bm25" },
			mode: "first_stage", order: []string{"Alpha/bm25", "Beta/bm25", "Gamma/bm25"}},
		{name: "model error falls back", body: match, model: failing,
			mode: "first_stage_fallback", reason: "model_error", order: []string{"Alpha/bm25", "Beta/bm25", "Gamma/bm25"}},
		{name: "no query text", body: `{"query":{"match_all":{}}}`, model: failing,
			mode: "passthrough", reason: dropin.ReasonNoQueryText, order: []string{"Alpha/-", "Beta/-", "Gamma/-"}},
		{name: "GET without body", path: "/icicle-docs/_search?q=alpha", model: failing,
			mode: "passthrough", reason: dropin.ReasonNoQueryText, order: []string{"Alpha/-", "Beta/-", "Gamma/-"}},
		{name: "sorted", body: `{"query":{"match":{"title":"q"}},"sort":["title.keyword"]}`, model: failing,
			mode: "passthrough", reason: dropin.ReasonSorted, order: []string{"Alpha/-", "Beta/-", "Gamma/-"}},
		{name: "hits without title", body: match, model: failing,
			esBody: `{"took":1,"hits":{"hits":[{"_id":"1","_score":1,"_source":{"docid":"Alpha"}}]}}`,
			mode:   "passthrough", reason: dropin.ReasonHitsWithoutTitle},
		{name: "no hits object (filter_path)", body: match, model: failing, esBody: `{"took":1}`,
			mode: "passthrough", reason: dropin.ReasonHitsWithoutTitle},
		{name: "aggregations only", body: `{"size":0,"aggs":{"s":{"terms":{"field":"seen"}}}}`, model: failing,
			esBody: `{"took":1,"hits":{"total":{"value":3,"relation":"eq"},"max_score":null,"hits":[]},"aggregations":{"s":{"buckets":[]}}}`,
			mode:   "passthrough", reason: dropin.ReasonAggregationsOnly},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sent []string
			es := recordingES(200, cmp.Or(tt.esBody, esSearchBody), &sent)
			s := newTestServer(t, es, tt.model, tt.opts)
			method, path := "POST", cmp.Or(tt.path, "/icicle-docs/_search")
			if tt.body == "" {
				method = "GET"
			}
			code, out, _ := do(t, s, method, path, tt.body)
			require.Equal(t, http.StatusOK, code, out)
			if tt.mode == "passthrough" && tt.reason != dropin.ReasonHitsWithoutTitle {
				require.Equal(t, tt.body, sent[2], "forwarded unchanged")
			} else {
				require.JSONEq(t, `{"query":{"match":{"title":"q"}},"from":0,"size":10}`, sent[2], "the rank window asked for")
			}
			ic := out["icicle"].(map[string]any)
			require.Equal(t, tt.mode, ic["mode"])
			reason, _ := ic["reason"].(string)
			require.Equal(t, tt.reason, reason)
			if tt.order != nil {
				require.Equal(t, tt.order, hitOrder(t, out))
			}
			if tt.mode == "passthrough" {
				var want map[string]any
				require.NoError(t, json.Unmarshal([]byte(cmp.Or(tt.esBody, esSearchBody)), &want))
				delete(out, "icicle")
				if want["took"] != nil {
					require.GreaterOrEqual(t, out["took"], want["took"], "took is the sidecar's whole request")
					delete(out, "took")
					delete(want, "took")
				}
				require.Equal(t, want, out, "Elasticsearch's answer unchanged, but took")
			}
		})
	}
}

func TestDropinErrors(t *testing.T) {
	match := `{"query":{"match":{"title":"q"}}}`
	unreachable := func(err error) *fakeSearcher {
		return &fakeSearcher{rawSearch: func(context.Context, string, url.Values, []byte) (int, http.Header, []byte, error) {
			return 0, nil, nil, err
		}}
	}
	t.Run("Elasticsearch's error passes through", func(t *testing.T) {
		var sent []string
		s := newTestServer(t, recordingES(400, esBadQuery, &sent), &fakeReranker{rank: copyBeta}, nil)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), "POST", "/icicle-docs/_search", strings.NewReader(`{"query":{"matc":{}}}`)))
		require.Equal(t, 400, rec.Code)
		require.Equal(t, esBadQuery, rec.Body.String(), "byte for byte")
		require.Equal(t, "Elasticsearch", rec.Header().Get("X-Elastic-Product"))
	})
	for _, tt := range []struct {
		name       string
		es         *fakeSearcher
		path, body string
		code       int
		retryAfter bool
	}{
		{name: "unreachable", es: unreachable(fmt.Errorf("raw search: %w: connection refused", adapter.ErrUnavailable)), code: 503, retryAfter: true},
		{name: "timed out", es: unreachable(fmt.Errorf("raw search: %w: %w", adapter.ErrUnavailable, context.DeadlineExceeded)), code: 504},
		{name: "not an index", es: unreachable(fmt.Errorf("raw search: %w", adapter.ErrInvalidArgument)), path: "/../_search", code: 403},
		{name: "bad ext.icicle", es: unreachable(errors.New("not called")), body: `{"ext":{"icicle":{"query":1}}}`, code: 400},
		{name: "body too large", es: unreachable(errors.New("not called")), body: `{"query":{"match":{"title":"` + strings.Repeat("x", 2<<20) + `"}}}`, code: 413},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, tt.es, &fakeReranker{rank: copyBeta}, nil)
			code, out, hdr := do(t, s, "POST", cmp.Or(tt.path, "/icicle-docs/_search"), cmp.Or(tt.body, match))
			require.Equal(t, tt.code, code, out)
			require.NotEmpty(t, out["error"])
			require.Equal(t, tt.retryAfter, hdr.Get("Retry-After") != "")
			require.NotContains(t, out["error"], "connection refused")
		})
	}
}

func TestDropinRoutes(t *testing.T) {
	es := &fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return threeHits(), nil }}
	s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, nil)
	for _, tt := range []struct {
		method, path, body string
		code               int
		dropin             bool
	}{
		{"POST", "/v1/search", `{"query":"q"}`, 200, false},
		{"POST", "/v1/rerank", rerankBody(threeHits(), "q"), 200, false},
		{"GET", "/healthz", "", 200, false},
		{"GET", "/openapi.yaml", "", 200, false},
		{"GET", "/icicle-docs/_search", "", 200, true},
		{"POST", "/my-alias,icicle-docs/_search", "", 200, true},
		{"POST", "/logs-*,icicle-docs/_search", "", 403, false},
		{"POST", "/v1/_search", "", 403, false}, // an index named v1, as in Elasticsearch: not allowed
		{"GET", "/v1/rerank", "", 404, false},
		{"GET", "/v1/admin/model", "", 404, false},
		{"POST", "/_search", "", 200, true},
		{"POST", "/icicle-docs/_count", "", 200, false},
		{"GET", "/", "", 200, false},
		{"POST", "/icicle-docs/_doc/1/_search", "", 403, false},
		{"DELETE", "/icicle-docs/_search", "", 403, false},
		{"PUT", "/icicle-docs/_doc/1", `{"title":"x"}`, 403, false},
	} {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			code, out, _ := do(t, s, tt.method, tt.path, tt.body)
			require.Equal(t, tt.code, code)
			require.Equal(t, tt.dropin, out["icicle"] != nil)
			if code == http.StatusForbidden && strings.Contains(tt.path, "logs-") {
				// The refusal names what was asked, never what the sidecar serves.
				reason := out["error"].(map[string]any)["reason"].(string)
				require.Contains(t, reason, "logs-*")
				require.NotContains(t, reason, "icicle-docs")
				require.NotContains(t, reason, "my-alias")
			}
		})
	}
}

// FuzzDropinBody feeds arbitrary search bodies to the drop-in (Elasticsearch answering esSearchBody): it
// answers 200, the sidecar's 400 for a malformed ext.icicle or its 403 for a script, never panics or 5xx.
func FuzzDropinBody(f *testing.F) {
	f.Add(`{"query":{"match":{"title":"q"}}}`)
	f.Add(`{"query":{"bool":{"must":[{"multi_match":{"query":"q"}}],"filter":{}}},"sort":[{"_score":{"order":"desc"}}]}`)
	f.Add(`{"ext":{"icicle":{"query":"q"},"x":1},"size":0,"aggs":{}}`)
	f.Add(`{"from":"1e3","search_after":null}`)
	f.Add(`[]`)
	s := newServer(&fakeSearcher{}, &fakeReranker{rank: copyBeta}, testOptions{Options: Options{MaxBodyBytes: 1 << 16, RequestTimeout: 1e9, MaxQueryChars: 200, MaxHits: 50},
		MinTopScore: -1e9})
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/icicle-docs/_search", strings.NewReader(body)))
		switch {
		case rec.Code == http.StatusOK, rec.Code == http.StatusBadRequest:
		case rec.Code == http.StatusForbidden && strings.Contains(rec.Body.String(), "scripts are disabled"): // scripts are refused
		default:
			t.Fatalf("status %d for body %q: %s", rec.Code, body, rec.Body)
		}
	})
}

// TestDropinProxy: what the proxy forwards (path rewritten for index-less reads, query string, media-type
// headers, body) and what it refuses, with Elasticsearch's error shape.
func TestDropinProxy(t *testing.T) {
	const vendor = "application/vnd.elasticsearch+json; compatible-with=8"
	tests := []struct {
		name, method, path, body string
		wantPath                 string // forwarded path; empty: not forwarded
		code                     int
		errType                  string // the sidecar's own error type
	}{
		{name: "info", method: "GET", path: "/", wantPath: "/", code: 200},
		{name: "ping", method: "HEAD", path: "/", wantPath: "/", code: 200},
		{name: "count", method: "POST", path: "/icicle-docs/_count?q=x", body: `{"query":{"match_all":{}}}`, wantPath: "/icicle-docs/_count", code: 200},
		{name: "count without index goes to the configured index", method: "GET", path: "/_count", wantPath: "/icicle-docs/_count", code: 200},
		{name: "mapping of an alias", method: "GET", path: "/my-alias/_mapping", wantPath: "/my-alias/_mapping", code: 200},
		{name: "mapping without index", method: "GET", path: "/_mapping", wantPath: "/icicle-docs/_mapping", code: 200},
		{name: "get a document", method: "GET", path: "/icicle-docs/_doc/a%2Fb", wantPath: "/icicle-docs/_doc/a/b", code: 200},
		{name: "index exists", method: "HEAD", path: "/icicle-docs", wantPath: "/icicle-docs", code: 200},
		{name: "open a point in time", method: "POST", path: "/icicle-docs/_pit?keep_alive=1m", wantPath: "/icicle-docs/_pit", code: 200},
		{name: "close a point in time", method: "DELETE", path: "/_pit", body: `{"id":"x"}`, wantPath: "/_pit", code: 200},
		{name: "scroll", method: "POST", path: "/_search/scroll", body: `{"scroll":"1m","scroll_id":"x"}`, wantPath: "/_search/scroll", code: 200},
		{name: "clear scroll", method: "DELETE", path: "/_search/scroll", body: `{"scroll_id":"x"}`, wantPath: "/_search/scroll", code: 200},
		{name: "msearch", method: "POST", path: "/_msearch", body: "{}\n{\"query\":{\"match_all\":{}}}\n{\"index\":\"my-alias\"}\n{}\n",
			wantPath: "/icicle-docs/_msearch", code: 200},
		{name: "msearch header naming another index", method: "POST", path: "/icicle-docs/_msearch", body: "{\"index\":\"secrets\"}\n{}\n",
			code: 403, errType: "security_exception"},
		{name: "msearch header with a pattern list", method: "POST", path: "/icicle-docs/_msearch", body: "{\"index\":[\"icicle-docs\",\"s*\"]}\n{}\n",
			code: 403, errType: "security_exception"},
		{name: "msearch with a script", method: "POST", path: "/icicle-docs/_msearch", body: "{}\n{\"script_fields\":{\"x\":{\"script\":\"1\"}}}\n",
			code: 403, errType: "security_exception"},
		{name: "mget naming another index", method: "POST", path: "/_mget", body: `{"docs":[{"_index":"secrets","_id":"1"}]}`, code: 403, errType: "security_exception"},
		{name: "another index", method: "GET", path: "/secrets/_count", code: 403, errType: "security_exception"},
		{name: "a pattern", method: "GET", path: "/icicle-*/_mapping", code: 403, errType: "security_exception"},
		{name: "_all", method: "GET", path: "/_all/_count", code: 403, errType: "security_exception"},
		{name: "an exclusion", method: "GET", path: "/icicle-docs,-icicle-docs/_count", code: 403, errType: "security_exception"},
		{name: "a remote cluster", method: "GET", path: "/other:icicle-docs/_count", code: 403, errType: "security_exception"},
		{name: "runtime_mappings in a count", method: "POST", path: "/icicle-docs/_count", body: `{"runtime_mappings":{"x":{"type":"long","script":"emit(1)"}}}`,
			code: 403, errType: "security_exception"},
		{name: "a script query", method: "POST", path: "/icicle-docs/_search", body: `{"query":{"bool":{"filter":{"script":{"script":"true"}}}}}`,
			code: 403, errType: "security_exception"},
		{name: "a write", method: "PUT", path: "/icicle-docs/_doc/1", body: `{"title":"x"}`, code: 403, errType: "security_exception"},
		{name: "a bulk", method: "POST", path: "/_bulk", body: "{}\n", code: 403, errType: "security_exception"},
		{name: "delete the index", method: "DELETE", path: "/icicle-docs", code: 403, errType: "security_exception"},
		{name: "cluster settings", method: "GET", path: "/_cluster/settings", code: 403, errType: "security_exception"},
		{name: "cat indices", method: "GET", path: "/_cat/indices", code: 403, errType: "security_exception"},
		{name: "the sidecar's own unknown path", method: "GET", path: "/v1/nothing", code: 404},
		{name: "too large", method: "POST", path: "/icicle-docs/_count", body: `{"query":{"match":{"title":"` + strings.Repeat("x", 2<<20) + `"}}}`,
			code: 413, errType: "content_too_long_exception"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []adapter.RawRequest
			es := &fakeSearcher{raw: func(_ context.Context, req adapter.RawRequest) (adapter.RawResponse, error) {
				got = append(got, req)
				return adapter.RawResponse{Status: 200, Header: http.Header{"X-Elastic-Product": {"Elasticsearch"}, "Content-Type": {vendor},
					"Content-Length": {"7"}}, Body: []byte(`{"a":1}`)}, nil
			}}
			s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, nil)
			req := httptest.NewRequestWithContext(t.Context(), tt.method, tt.path, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", vendor)
			req.Header.Set("Accept", vendor)
			req.Header.Set("X-Opaque-Id", "op-1")
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			require.Equal(t, tt.code, rec.Code, rec.Body.String())
			if tt.wantPath == "" {
				require.Empty(t, got, "nothing reaches Elasticsearch")
				if tt.errType != "" {
					var e dropin.ErrorBody
					require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e), rec.Body.String())
					require.Equal(t, tt.code, e.Status)
					require.Equal(t, tt.errType, e.Error.Type)
					require.Equal(t, tt.errType, e.Error.RootCause[0].Type)
					require.NotEmpty(t, e.Error.Reason)
					require.Equal(t, "Elasticsearch", rec.Header().Get("X-Elastic-Product"), "the clients read the error")
				}
				return
			}
			require.Len(t, got, 1)
			require.Equal(t, tt.method, got[0].Method)
			require.Equal(t, tt.wantPath, "/"+strings.Join(got[0].Path, "/"))
			require.Equal(t, req.URL.Query(), got[0].Query, "query string unchanged")
			require.Equal(t, tt.body, string(got[0].Body), "body unchanged")
			require.Equal(t, vendor, got[0].Header.Get("Accept"))
			require.Equal(t, "op-1", got[0].Header.Get("X-Opaque-Id"))
			require.Equal(t, "Elasticsearch", rec.Header().Get("X-Elastic-Product"))
			require.Equal(t, vendor, rec.Header().Get("Content-Type"), "Elasticsearch's media type")
			if tt.method == "HEAD" {
				require.Equal(t, "7", rec.Header().Get("Content-Length"))
			} else {
				require.JSONEq(t, `{"a":1}`, rec.Body.String())
			}
		})
	}
}

func TestAllowList(t *testing.T) {
	t.Run("resolved from the cluster, refreshed on readiness", func(t *testing.T) {
		names := []string{"icicle-docs"}
		es := &fakeSearcher{indexNames: func(context.Context) ([]string, error) { return names, nil }}
		s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, nil)
		code, _, _ := do(t, s, "GET", "/docs-alias/_count", "")
		require.Equal(t, 403, code)
		names = []string{"icicle-docs", "docs-alias"}
		code, _, _ = do(t, s, "GET", "/docs-alias/_count", "")
		require.Equal(t, 403, code, "kept until the next readiness check")
		code, _, _ = do(t, s, "GET", "/readyz", "")
		require.Equal(t, 200, code)
		code, _, _ = do(t, s, "GET", "/docs-alias/_count", "")
		require.Equal(t, 200, code, "an alias added since the start")
	})
	t.Run("configured", func(t *testing.T) {
		es := &fakeSearcher{indexNames: func(context.Context) ([]string, error) { return nil, errors.New("not asked") }}
		s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.AllowedIndices = []string{"a", "b"} })
		for path, want := range map[string]int{"/a,b/_count": 200, "/a/_count": 200, "/icicle-docs/_count": 403, "/a,c/_count": 403} {
			code, _, _ := do(t, s, "GET", path, "")
			require.Equal(t, want, code, path)
		}
	})
	t.Run("unresolvable: the configured index alone", func(t *testing.T) {
		es := &fakeSearcher{indexNames: func(context.Context) ([]string, error) { return nil, errors.New("down") }}
		s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, nil)
		code, _, _ := do(t, s, "GET", "/icicle-docs/_count", "")
		require.Equal(t, 200, code)
		code, _, _ = do(t, s, "GET", "/my-alias/_count", "")
		require.Equal(t, 403, code)
	})
	t.Run("scripts allowed by option", func(t *testing.T) {
		s := newTestServer(t, &fakeSearcher{}, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.AllowScripts = true })
		code, _, _ := do(t, s, "POST", "/icicle-docs/_count", `{"runtime_mappings":{"x":{"type":"long","script":"emit(1)"}}}`)
		require.Equal(t, 200, code)
	})
}

// TestDropinPaging: consecutive pages are cut from one ranking of the window: page 1 + page 2 is the
// first two pages' worth of the window, no hit twice, and Elasticsearch is asked for the window from 0.
func TestDropinPaging(t *testing.T) {
	var sent []string
	es := recordingES(200, esSearchBody, &sent)
	s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.RankWindowSize = 3 })
	page := func(from, size int) []string {
		code, out, _ := do(t, s, "POST", "/icicle-docs/_search", fmt.Sprintf(`{"query":{"match":{"title":"q"}},"from":%d,"size":%d}`, from, size))
		require.Equal(t, http.StatusOK, code, out)
		require.EqualValues(t, 3, out["icicle"].(map[string]any)["rank_window_size"])
		return hitOrder(t, out)
	}
	window := page(0, 3)
	require.Equal(t, []string{"Beta/copy", "Seen Doc/parametric", "Alpha/bm25"}, window)
	require.JSONEq(t, `{"query":{"match":{"title":"q"}},"from":0,"size":3}`, sent[2])
	p1, p2 := page(0, 2), page(2, 2)
	require.JSONEq(t, `{"query":{"match":{"title":"q"}},"from":0,"size":4}`, sent[len(sent)-1], "from 2 size 2: the window widened to 4")
	require.Equal(t, window[:2], p1)
	require.Equal(t, []string{"Alpha/bm25", "Gamma/bm25"}, p2, "page 2 goes on where page 1 stopped; Gamma, pushed out of the window by the recalled document, follows")
	require.Empty(t, page(4, 2), "past the end")
}

// TestDuplicateKeysRefused: the drop-in answers a body with a repeated key as Elasticsearch does (400,
// x_content_parse_exception at the place in the caller's body) instead of forwarding the last value; the
// sidecar's own endpoints name the field.
func TestDuplicateKeysRefused(t *testing.T) {
	var sent []string
	s := newTestServer(t, recordingES(200, esSearchBody, &sent), &fakeReranker{rank: copyBeta}, nil)
	code, out, _ := do(t, s, "POST", "/icicle-docs/_search", `{"size": 1, "query": {"match_all": {}}, "size": 2}`)
	require.Equal(t, http.StatusBadRequest, code, out)
	e := out["error"].(map[string]any)
	require.Equal(t, "x_content_parse_exception", e["type"])
	require.Equal(t, "[1:47] Duplicate field 'size'", e["reason"])
	require.EqualValues(t, 400, out["status"])
	for _, b := range sent {
		require.NotContains(t, b, `"size"`, "nothing was searched")
	}

	es := &fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return threeHits(), nil }}
	s = newTestServer(t, es, &fakeReranker{rank: copyBeta}, nil)
	code, out, _ = do(t, s, "POST", "/v1/search", `{"query": "q", "size": 2, "size": 50}`)
	require.Equal(t, http.StatusBadRequest, code, out)
	require.Equal(t, "size", out["field"])
	require.Equal(t, "duplicate key (line 1, column 33)", out["error"])
}
