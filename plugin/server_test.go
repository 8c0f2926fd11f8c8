package plugin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/inference"
)

// fakeSearcher is an Elasticsearch stand-in for handler tests; each method is a function field.
type fakeSearcher struct {
	searchNew func(ctx context.Context, q string, k int) ([]adapter.Hit, error)
	searchAll func(ctx context.Context, q string, k int) ([]adapter.Hit, error) // nil: searchNew's answer
	resolve   func(ctx context.Context, ids []string) (map[string]adapter.Hit, error)
	seenDiff  func(ctx context.Context, modelSeen []string) (adapter.SeenDiff, error)
	// rawSearch answers the drop-in's forwarded search; nil: 200 with esSearchBody.
	rawSearch func(ctx context.Context, index string, query url.Values, body []byte) (int, http.Header, []byte, error)
	// raw answers every other forwarded request (the drop-in's proxy, its _mget and recalls); nil: fakeRecall.
	raw func(ctx context.Context, req adapter.RawRequest) (adapter.RawResponse, error)
	// indexNames is the default allow-list; nil: icicle-docs and the alias my-alias.
	indexNames func(ctx context.Context) ([]string, error)
	checkErr   error
	seen       int
	// snippets answers Snippets; nil: every hit's Summary becomes "snippet of DOCID for QUERY".
	snippets func(ctx context.Context, q string, hits []adapter.Hit, chars int) error
}

func (f *fakeSearcher) Snippets(ctx context.Context, q string, hits []adapter.Hit, chars int) error {
	if f.snippets != nil {
		return f.snippets(ctx, q, hits, chars)
	}
	for i := range hits {
		hits[i].Summary = "snippet of " + hits[i].DocID + " for " + q
	}
	return nil
}

func (f *fakeSearcher) SearchNew(ctx context.Context, q string, k int) ([]adapter.Hit, error) {
	return f.searchNew(ctx, q, k)
}

func (f *fakeSearcher) SearchAll(ctx context.Context, q string, k int) ([]adapter.Hit, error) {
	if f.searchAll == nil {
		return f.searchNew(ctx, q, k)
	}
	return f.searchAll(ctx, q, k)
}

func (f *fakeSearcher) Resolve(ctx context.Context, ids []string) (map[string]adapter.Hit, error) {
	if f.resolve == nil {
		out := make(map[string]adapter.Hit)
		for _, id := range ids {
			out[id] = adapter.Hit{ID: "es-" + id, DocID: id, Title: id, Summary: "stored " + id}
		}
		return out, nil
	}
	return f.resolve(ctx, ids)
}

func (f *fakeSearcher) Check(context.Context) (adapter.ClusterInfo, error) {
	return adapter.ClusterInfo{}, f.checkErr
}

func (f *fakeSearcher) SeenCount(context.Context) (int, error) { return f.seen, nil }

func (f *fakeSearcher) SeenDiff(ctx context.Context, modelSeen []string) (adapter.SeenDiff, error) {
	if f.seenDiff == nil {
		return adapter.SeenDiff{ModelSeen: len(modelSeen), MissingInIndex: modelSeen, MissingInIndexCount: len(modelSeen)}, nil
	}
	return f.seenDiff(ctx, modelSeen)
}

// Raw answers a search of the window (POST /{index}/_search, not a recall by ids) with rawSearch, anything
// else with raw.
func (f *fakeSearcher) Raw(ctx context.Context, req adapter.RawRequest) (adapter.RawResponse, error) {
	if n := len(req.Path); n >= 1 && req.Path[n-1] == "_search" && !strings.Contains(string(req.Body), `"ids"`) {
		index := strings.Join(req.Path[:n-1], "/")
		if f.rawSearch == nil {
			return adapter.RawResponse{Status: http.StatusOK, Header: http.Header{"X-Elastic-Product": {"Elasticsearch"}}, Body: []byte(esSearchBody)}, nil
		}
		status, h, b, err := f.rawSearch(ctx, index, req.Query, req.Body)
		return adapter.RawResponse{Status: status, Header: h, Body: b}, err
	}
	if f.raw == nil {
		return fakeRecall(req), nil
	}
	return f.raw(ctx, req)
}

// fakeRecall answers a search by ids (the drop-in's recall of parametric documents, whose _ids the fake
// Resolve makes "es-<docid>") with one hit per id, filtered by the body's _source list if any; anything
// else is 200 {}.
func fakeRecall(req adapter.RawRequest) adapter.RawResponse {
	h := http.Header{"X-Elastic-Product": {"Elasticsearch"}, "Content-Type": {"application/json"}}
	var q struct {
		Query struct {
			IDs struct {
				Values []string `json:"values"`
			} `json:"ids"`
		} `json:"query"`
		Source []string `json:"_source"`
	}
	if len(req.Path) > 0 && req.Path[len(req.Path)-1] == "_mget" {
		return fakeMget(req, h)
	}
	if json.Unmarshal(req.Body, &q) != nil || len(q.Query.IDs.Values) == 0 {
		return adapter.RawResponse{Status: http.StatusOK, Header: h, Body: []byte(`{}`)}
	}
	hits := make([]map[string]any, 0, len(q.Query.IDs.Values))
	for _, id := range q.Query.IDs.Values {
		d := strings.TrimPrefix(id, "es-")
		src := map[string]any{"docid": d, "title": d, "summary": "stored " + d, "text": "body of " + d}
		if q.Source != nil {
			for k := range src {
				if !slices.Contains(q.Source, k) {
					delete(src, k)
				}
			}
		}
		hits = append(hits, map[string]any{"_index": "icicle-docs-v1", "_id": id, "_score": 1, "_source": src})
	}
	b, _ := json.Marshal(map[string]any{"took": 1, "hits": map[string]any{"hits": hits}})
	return adapter.RawResponse{Status: http.StatusOK, Header: h, Body: b}
}

// fakeMget answers an _mget by _id from the hits of esSearchBody (the window's full documents).
func fakeMget(req adapter.RawRequest, h http.Header) adapter.RawResponse {
	var all struct {
		Hits struct {
			Hits []struct {
				ID     string          `json:"_id"`
				Source json.RawMessage `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	_ = json.Unmarshal([]byte(esSearchBody), &all)
	var q struct {
		Docs []struct {
			ID string `json:"_id"`
		} `json:"docs"`
	}
	_ = json.Unmarshal(req.Body, &q)
	docs := make([]map[string]any, 0, len(q.Docs))
	for _, d := range q.Docs {
		doc := map[string]any{"_id": d.ID, "found": false}
		for _, hit := range all.Hits.Hits {
			if hit.ID == d.ID {
				doc["found"], doc["_source"] = true, hit.Source
			}
		}
		docs = append(docs, doc)
	}
	b, _ := json.Marshal(map[string]any{"docs": docs})
	return adapter.RawResponse{Status: http.StatusOK, Header: h, Body: b}
}

func (f *fakeSearcher) IndexNames(ctx context.Context) ([]string, error) {
	if f.indexNames == nil {
		return []string{"icicle-docs", "my-alias"}, nil
	}
	return f.indexNames(ctx)
}

func (f *fakeSearcher) Index() string { return "icicle-docs" }

// fakeReranker scripts the model's answer.
type fakeReranker struct {
	rank func(ctx context.Context, q string, cands []inference.Candidate) (inference.Result, error)
	// tokens is the prompt length the fake reports to the admission hook (inference.Options.Admit), as the
	// engine does once it has built the prompt; 0 is 100.
	tokens int
	// options, if set, sees each call's options.
	options func(inference.Options)
}

func (f *fakeReranker) Rank(ctx context.Context, q string, cands []inference.Candidate, o inference.Options) (inference.Result, error) {
	if o.Admit != nil {
		if err := o.Admit(cmp.Or(f.tokens, 100)); err != nil {
			return inference.Result{}, fmt.Errorf("rank: %w", err)
		}
	}
	if f.options != nil {
		f.options(o)
	}
	return f.rank(ctx, q, cands)
}

func threeHits() []adapter.Hit {
	return []adapter.Hit{
		{ID: "1", DocID: "Alpha", Title: "Alpha", Summary: "a", Score: 3, Rank: 1, BM25: 3, BM25Rank: 1},
		{ID: "2", DocID: "Beta", Title: "Beta", Summary: "b", Score: 2, Rank: 2, BM25: 2, BM25Rank: 2},
		{ID: "3", DocID: "Gamma", Title: "Gamma", Score: 1, Rank: 3, BM25: 1, BM25Rank: 3},
	}
}

// copyBeta answers Beta by the copy route, then a parametric seen document, in a prefill of 12 ms and a decode
// of 3 ms.
func copyBeta(_ context.Context, _ string, cands []inference.Candidate) (inference.Result, error) {
	return inference.Result{PCopy: 0.9, InContext: len(cands), Stats: inference.Stats{Prefill: 12 * time.Millisecond, Decode: 3 * time.Millisecond}, Beams: []inference.Beam{
		{DocID: "Beta", Route: inference.RouteCopy, Score: -0.1, Candidate: 1},
		{DocID: "Seen Doc", Route: inference.RouteParametric, Score: -2.5, Candidate: -1},
	}}, nil
}

func newTestServer(t *testing.T, es *fakeSearcher, m *fakeReranker, mod func(*testOptions)) *Server {
	t.Helper()
	opts := testOptions{Options: Options{MaxBodyBytes: 1 << 20, RequestTimeout: time.Second, MaxQueryChars: 100, MaxHits: 1000, Model: ModelInfo{Name: "fake", SeenDocIDs: 200},
		WriteToken: testWriteToken, AllowPolicyOverride: true}, ESBudgetFraction: 0.3, MaxCandidates: 100,
		MaxInflight: 2, QueueSize: 2, ConsecutiveFailures: 2, OpenTimeout: time.Hour, MinTopScore: -1e9}
	if mod != nil {
		mod(&opts)
	}
	if m == nil {
		return newServer(es, nil, opts) // a server without a model
	}
	return newServer(es, m, opts)
}

func do(t *testing.T, s *Server, method, path, body string) (int, map[string]any, http.Header) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(t.Context(), method, path, strings.NewReader(body))
	s.Handler().ServeHTTP(rec, req)
	var out map[string]any
	if rec.Body.Len() > 0 && strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
	}
	return rec.Code, out, rec.Header()
}

func rerankBody(hits []adapter.Hit, query string) string {
	var es []string
	for _, h := range hits {
		src := map[string]any{"title": h.Title}
		if h.Summary != "" {
			src["summary"] = h.Summary
		}
		b, _ := json.Marshal(map[string]any{"_id": h.ID, "_score": h.Score, "_source": src})
		es = append(es, string(b))
	}
	q, _ := json.Marshal(query)
	return fmt.Sprintf(`{"query": %s, "hits": [%s]}`, q, strings.Join(es, ","))
}

func TestRerankModes(t *testing.T) {
	es := &fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return threeHits(), nil }}
	t.Run("reranked with provenance", func(t *testing.T) {
		s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, nil)
		code, body, _ := do(t, s, "POST", "/v1/rerank", rerankBody(threeHits(), "q"))
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, "reranked", body["mode"])
		require.EqualValues(t, 3, body["candidates_in_context"])
		require.EqualValues(t, 1, body["title_only_candidates"], "Gamma has no summary")
		res := body["results"].([]any)
		require.Len(t, res, 2)
		first, second := res[0].(map[string]any), res[1].(map[string]any)
		require.Equal(t, "copy", first["provenance"])
		require.Equal(t, "2", first["id"])
		require.EqualValues(t, 2, first["bm25_rank"])
		require.Equal(t, "parametric", second["provenance"])
		require.Equal(t, "es-Seen Doc", second["id"], "resolved in Elasticsearch")
		require.NotContains(t, second, "bm25_rank")
		require.InDelta(t, 0.9, body["router_prob"], 1e-9)
		timings := body["timings"].(map[string]any)
		require.EqualValues(t, 12, timings["prefill_ms"], "the engine's split of the model's time")
		require.EqualValues(t, 3, timings["decode_ms"])
	})
	t.Run("search runs BM25 first", func(t *testing.T) {
		s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, nil)
		code, body, _ := do(t, s, "POST", "/v1/search", `{"query":"q","size":1}`)
		require.Equal(t, http.StatusOK, code, body)
		require.Len(t, body["results"], 1)
	})
	t.Run("model error falls back to BM25, then the breaker opens", func(t *testing.T) {
		calls := 0
		m := &fakeReranker{rank: func(context.Context, string, []inference.Candidate) (inference.Result, error) {
			calls++
			return inference.Result{}, errors.New("onnx exploded")
		}}
		s := newTestServer(t, es, m, nil)
		for i, want := range []string{"model_error", "model_error", "breaker_open", "breaker_open"} {
			code, body, _ := do(t, s, "POST", "/v1/rerank", rerankBody(threeHits(), "q"))
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, "first_stage_fallback", body["mode"])
			require.Equal(t, want, body["fallback_reason"], "request %d", i)
			res := body["results"].([]any)
			require.Equal(t, "Alpha", res[0].(map[string]any)["docid"], "BM25 order")
			require.Equal(t, "bm25", res[0].(map[string]any)["provenance"])
			require.NotContains(t, body, "onnx exploded")
			require.NotContains(t, body["timings"], "prefill_ms", "no split when the model did not answer")
		}
		require.Equal(t, 2, calls, "an open breaker does not call the model")
	})
	t.Run("model timeout falls back", func(t *testing.T) {
		m := &fakeReranker{rank: func(ctx context.Context, _ string, _ []inference.Candidate) (inference.Result, error) {
			<-ctx.Done()
			return inference.Result{}, ctx.Err()
		}}
		s := newTestServer(t, es, m, func(o *testOptions) { o.RequestTimeout = 20 * time.Millisecond })
		code, body, _ := do(t, s, "POST", "/v1/rerank", rerankBody(threeHits(), "q"))
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "model_timeout", body["fallback_reason"])
	})
	t.Run("low confidence falls back", func(t *testing.T) {
		s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.MinTopScore = -0.01 })
		_, body, _ := do(t, s, "POST", "/v1/rerank", rerankBody(threeHits(), "q"))
		require.Equal(t, "low_confidence", body["fallback_reason"])
	})
	t.Run("overload sheds to BM25", func(t *testing.T) {
		release := make(chan struct{})
		started := make(chan struct{}, 1)
		m := &fakeReranker{rank: func(ctx context.Context, q string, c []inference.Candidate) (inference.Result, error) {
			started <- struct{}{}
			<-release
			return copyBeta(ctx, q, c)
		}}
		s := newTestServer(t, es, m, func(o *testOptions) { o.MaxInflight, o.QueueSize = 1, 0 })
		done := make(chan struct{})
		go func() {
			defer close(done)
			do(t, s, "POST", "/v1/rerank", rerankBody(threeHits(), "q"))
		}()
		<-started
		_, body, _ := do(t, s, "POST", "/v1/rerank", rerankBody(threeHits(), "q"))
		require.Equal(t, "overloaded", body["fallback_reason"])
		close(release)
		<-done
	})
}

func TestRerankBadInput(t *testing.T) {
	es := &fakeSearcher{}
	s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.MaxHits = 3; o.MaxBodyBytes = 2000 })
	tests := []struct {
		name, body string
		code       int
		field      string
	}{
		{"invalid json", `{"query": `, 400, "body"},
		{"wrong type", `{"query": 42}`, 400, "query"},
		{"missing query", `{"hits": []}`, 400, "query"},
		{"query too long", `{"query": "` + strings.Repeat("x", 101) + `"}`, 400, "query"},
		{"hit without title", `{"query": "q", "hits": [{"_id": "1", "_source": {"summary": "s"}}]}`, 400, "hits[0]._source.title"},
		{"hit without source", `{"query": "q", "hits": [{"_id": "1"}]}`, 400, "hits[0]._source"},
		{"too many hits", rerankBody(append(threeHits(), threeHits()...), "q"), 400, "hits"},
		{"invalid utf-8", "{\"query\": \"\xff\"}", 400, "body"},
		{"bad size", `{"query": "q", "size": 500}`, 400, "size"},
		{"body too large", `{"query": "` + strings.Repeat("x", 3000) + `"}`, 413, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body, _ := do(t, s, "POST", "/v1/rerank", tc.body)
			require.Equal(t, tc.code, code, body)
			if tc.field != "" {
				require.Equal(t, tc.field, body["field"], body)
			} else {
				require.NotContains(t, body, "field")
			}
			require.NotEmpty(t, body["error"])
		})
	}
}

func TestSearchElasticsearchDown(t *testing.T) {
	es := &fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) {
		return nil, errors.New("dial tcp 127.0.0.1:9200: connection refused")
	}}
	s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, nil)
	code, body, hdr := do(t, s, "POST", "/v1/search", `{"query":"q"}`)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "1", hdr.Get("Retry-After"))
	require.NotContains(t, body["error"], "connection refused", "internal text stays in the log")
}

// TestSearchElasticsearchBudgetSpent: when the Elasticsearch share of the budget runs out, the adapter's
// verdict decides the status. Retries of refused connections cut short by the deadline are an outage (503
// with Retry-After, as the adapter reports them: ErrUnavailable without context.DeadlineExceeded); a
// cluster that took the request and did not answer in time is a 504.
func TestSearchElasticsearchBudgetSpent(t *testing.T) {
	for _, tt := range []struct {
		name       string
		err        func(ctx context.Context) error
		wantStatus int
		wantError  string
	}{
		{"retrying refused connections", func(context.Context) error {
			return fmt.Errorf("search new: %w: 3 attempts failed before the deadline, the last: %w",
				adapter.ErrUnavailable, errors.New("connection refused"))
		}, http.StatusServiceUnavailable, "elasticsearch unavailable"},
		{"no answer in time", func(ctx context.Context) error { return ctx.Err() }, http.StatusGatewayTimeout, "elasticsearch timed out"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			es := &fakeSearcher{searchNew: func(ctx context.Context, _ string, _ int) ([]adapter.Hit, error) {
				<-ctx.Done() // the ES share of the budget
				return nil, tt.err(ctx)
			}}
			s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.RequestTimeout = 100 * time.Millisecond })
			code, body, hdr := do(t, s, "POST", "/v1/search", `{"query":"q"}`)
			require.Equal(t, tt.wantStatus, code, body)
			require.Equal(t, tt.wantError, body["error"])
			if code == http.StatusServiceUnavailable {
				require.Equal(t, "1", hdr.Get("Retry-After"))
			}
		})
	}
}

func TestHealthAndMetrics(t *testing.T) {
	s := newTestServer(t, &fakeSearcher{}, &fakeReranker{rank: copyBeta}, nil)
	code, _, _ := do(t, s, "GET", "/healthz", "")
	require.Equal(t, 200, code)
	code, body, _ := do(t, s, "GET", "/readyz", "")
	require.Equal(t, 200, code)
	require.Equal(t, true, body["ready"])
	require.Equal(t, false, body["seen_consistent"], "the fake index has 0 seen documents, the model 200")
	require.EqualValues(t, 200, body["model_seen"])

	down := newTestServer(t, &fakeSearcher{checkErr: errors.New("connection refused")}, &fakeReranker{rank: copyBeta}, nil)
	code, body, _ = do(t, down, "GET", "/readyz", "")
	require.Equal(t, 503, code)
	require.Equal(t, false, body["ready"])
	do(t, s, "POST", "/v1/rerank", rerankBody(threeHits(), "q"))
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), "GET", "/metrics", nil))
	require.Contains(t, rec.Body.String(), `icicle_requests_total{endpoint="rerank",mode="reranked",status="200"} 1`)
	require.Contains(t, rec.Body.String(), `icicle_routes_total{route="copy"} 1`)
	require.Contains(t, rec.Body.String(), `icicle_stage_duration_seconds_sum{stage="model_prefill"} 0.012`)
	require.Contains(t, rec.Body.String(), `icicle_stage_duration_seconds_sum{stage="model_decode"} 0.003`)
}

// TestNoModel: a sidecar without a model (model.dir empty, the default) answers the first stage's order under
// every policy, says why in every response, and never searches new documents for a context.
func TestNoModel(t *testing.T) {
	var newCalls, allCalls atomic.Int64
	for _, policy := range []string{"gate", "model", "fusion", "first_stage"} {
		t.Run(policy, func(t *testing.T) {
			s := newTestServer(t, abSearcher(&newCalls, &allCalls), nil, func(o *testOptions) { o.Policy = policy })
			code, body := search(t, s, "", "", `{"query":"q","size":4}`)
			require.Equal(t, http.StatusOK, code, body)
			require.Equal(t, "first_stage", body["mode"])
			require.Equal(t, "no_model", body["model_skipped"])
			require.Equal(t, []string{"Seen Doc", "Alpha", "Old One", "Old Two"}, docids(body))
			require.NotContains(t, body, "fallback_reason")
			require.NotContains(t, body, "gate")

			code, body, _ = do(t, s, "POST", "/v1/rerank", rerankBody(threeHits(), "q"))
			require.Equal(t, http.StatusOK, code, body)
			require.Equal(t, "no_model", body["model_skipped"])

			code, body, _ = do(t, s, "GET", "/v1/model", "")
			require.Equal(t, http.StatusOK, code, body)
			require.Equal(t, false, body["reader"])
		})
	}
	require.Zero(t, newCalls.Load(), "no context is searched without a model")
	require.EqualValues(t, 4, allCalls.Load())
}

// TestPolicyOverride: without policy.allow_override a request may ask only for the configured policy or the
// first stage alone; anything else is a 403 naming the field, and the model is not run.
func TestPolicyOverride(t *testing.T) {
	m := &fakeReranker{rank: func(context.Context, string, []inference.Candidate) (inference.Result, error) {
		t.Fatal("the model ran for a refused policy")
		return inference.Result{}, nil
	}}
	es := &fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return threeHits(), nil }}
	s := newTestServer(t, es, m, func(o *testOptions) { o.Policy, o.AllowPolicyOverride = "first_stage", false })
	for _, p := range []string{"model", "fusion", "gate"} {
		code, body, _ := do(t, s, "POST", "/v1/search", `{"query":"q","policy":"`+p+`"}`)
		require.Equal(t, http.StatusForbidden, code, body)
		require.Equal(t, "policy", body["field"])
		require.Contains(t, body["error"], `policy "`+p+`"`)
	}
	for _, p := range []string{"first_stage", "bm25", ""} {
		code, body, _ := do(t, s, "POST", "/v1/search", `{"query":"q","policy":"`+p+`"}`)
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, "first_stage", body["mode"])
	}
	code, body, _ := do(t, s, "POST", "/v1/search", `{"query":"q","policy":"neural"}`)
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Equal(t, "policy", body["field"])
}

func TestPolicies(t *testing.T) {
	es := &fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return threeHits(), nil }}
	t.Run("bm25 never calls the model", func(t *testing.T) {
		m := &fakeReranker{rank: func(context.Context, string, []inference.Candidate) (inference.Result, error) {
			t.Fatal("model called under policy bm25")
			return inference.Result{}, nil
		}}
		s := newTestServer(t, es, m, func(o *testOptions) { o.Policy = "bm25" })
		code, body, _ := do(t, s, "POST", "/v1/search", `{"query":"q"}`)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "first_stage", body["mode"])
		require.Equal(t, "policy", body["model_skipped"])
		require.NotContains(t, body, "fallback_reason")
		require.Equal(t, "Alpha", body["results"].([]any)[0].(map[string]any)["docid"])
	})
	t.Run("fusion interleaves the model and BM25 by reciprocal rank", func(t *testing.T) {
		s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.Policy = "fusion"; o.FusionK = 60 })
		code, body, _ := do(t, s, "POST", "/v1/search", `{"query":"q","size":10}`)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "fused", body["mode"])
		var got []string
		for _, r := range body["results"].([]any) {
			m := r.(map[string]any)
			got = append(got, fmt.Sprintf("%s/%s", m["docid"], m["provenance"]))
		}
		// Beta: 1/61 + 1/62 (model 1st, BM25 2nd); Alpha: 1/61; Seen Doc: 1/62; Gamma: 1/63.
		require.Equal(t, []string{"Beta/copy", "Alpha/bm25", "Seen Doc/parametric", "Gamma/bm25"}, got)
		first := body["results"].([]any)[0].(map[string]any)
		require.InDelta(t, 1.0/61+1.0/62, first["score"], 1e-12)
		require.EqualValues(t, 2, first["bm25_rank"])
	})
}

// TestNothingToRankFallsBackWithoutTrippingTheBreaker: a query with no new-document hits, for a model with no
// memory to answer from (the engine's empty allowed set), is the request's, not a model failure.
func TestNothingToRankFallsBackWithoutTrippingTheBreaker(t *testing.T) {
	es := &fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return nil, nil }}
	m := &fakeReranker{rank: func(context.Context, string, []inference.Candidate) (inference.Result, error) {
		return inference.Result{}, fmt.Errorf("rank: %w", inference.ErrEmptyAllowedSet)
	}}
	s := newTestServer(t, es, m, func(o *testOptions) { o.Policy = "model" }) // the breaker opens after 2 failures
	for range 4 {
		_, body, _ := do(t, s, "POST", "/v1/search", `{"query":"q"}`)
		require.Equal(t, "first_stage_fallback", body["mode"])
		require.Equal(t, "nothing_to_rank", body["fallback_reason"])
	}
}

func TestContextFullFallsBackWithoutTrippingTheBreaker(t *testing.T) {
	es := &fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return threeHits(), nil }}
	m := &fakeReranker{rank: func(context.Context, string, []inference.Candidate) (inference.Result, error) {
		return inference.Result{}, fmt.Errorf("rank: prompt of header and query is 900 tokens, budget 512: %w", inference.ErrContextFull)
	}}
	s := newTestServer(t, es, m, nil) // the breaker opens after 2 failures
	for range 4 {
		_, body, _ := do(t, s, "POST", "/v1/search", `{"query":"q"}`)
		require.Equal(t, "context_full", body["fallback_reason"])
	}
}
