//go:build integration && ort && tokenizers

package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/plugin"
)

// The fault matrix of docs/evaluation.md: each subtest of TestFaults drives the sidecar (real node, real
// model) into one failure, asserts the documented status, and then that the process still serves
// /healthz. Elasticsearch faults are made by a proxy between the sidecar and the node: the node itself is
// never slowed or stopped, because other test packages share it. "Down" therefore means every connection
// to the proxy is accepted and closed without an answer (what a crashed node behind a load balancer
// looks like), not a refused port.

// proxyMode is how esProxy treats a request.
type proxyMode int32

const (
	// proxyPass forwards to the node.
	proxyPass proxyMode = iota
	// proxySlow waits esProxy.delay (or until the client gives up) before forwarding.
	proxySlow
	// proxyDown closes the connection without answering.
	proxyDown
)

// esProxy sits between the sidecar and the node.
type esProxy struct {
	t     *testing.T
	url   string
	delay time.Duration
	mode  atomic.Int32
	seen  atomic.Int64 // requests received while not passing
	// release ends every slow wait at cleanup, so closing the proxy never waits on one.
	release chan struct{}
}

func newESProxy(t *testing.T, target string, delay time.Duration) *esProxy {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	tr := &http.Transport{DisableKeepAlives: true}
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) }, Transport: tr}
	p := &esProxy{t: t, delay: delay, release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch proxyMode(p.mode.Load()) {
		case proxySlow:
			p.seen.Add(1)
			select {
			case <-time.After(p.delay):
			case <-r.Context().Done():
				return
			case <-p.release:
				return
			}
		case proxyDown:
			p.seen.Add(1)
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				p.t.Errorf("hijack: %v", err)
				return
			}
			conn.Close()
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		close(p.release)
		srv.CloseClientConnections()
		srv.Close()
		tr.CloseIdleConnections()
	})
	p.url = srv.URL
	return p
}

func (p *esProxy) set(m proxyMode) { p.mode.Store(int32(m)) }

// faultStack is the e2e stack's index and model served by a second sidecar whose Elasticsearch client
// goes through an esProxy, with the shipped defaults for budgets and retries (config/example.yaml).
type faultStack struct {
	*stack
	proxy  *esProxy
	url    string
	budget time.Duration
	esURL  string
}

// Limits of the fault stack: the shipped request budget and ES share, a small body limit so that 413
// is cheap to provoke.
const (
	faultBudget       = 2 * time.Second
	faultMaxBodyBytes = 1 << 20
	faultMaxHits      = 1000
)

func newFaultStack(t *testing.T) *faultStack {
	t.Helper()
	s := newStack(t, 300)
	esURL := os.Getenv("ICICLE_ES_URL")
	p := newESProxy(t, esURL, 10*faultBudget)
	via, err := adapter.New(adapter.Options{Addresses: []string{p.url}, Index: s.es.Index(), RequestTimeout: 5 * time.Second, MaxRetries: 3}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = via.Close() })
	srv := newSidecar(via, s.engine, sidecarOptions{MaxBodyBytes: faultMaxBodyBytes, RequestTimeout: faultBudget,
		ESBudgetFraction: 0.3, MaxQueryChars: 1024, MaxHits: faultMaxHits, MaxCandidates: 100,
		Decode: inference.Options{BeamWidth: 10}, MaxInflight: 2, QueueSize: 8, ConsecutiveFailures: 5,
		OpenTimeout: time.Second, MinTopScore: -1e9, Model: plugin.ModelInfo{Name: "fault"}, Ingester: via,
		WriteToken: faultWriteToken})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &faultStack{stack: s, proxy: p, url: hs.URL, budget: faultBudget, esURL: esURL}
}

// faultWriteToken is the fault stack's server.write_token (POST /v1/ingest needs it).
const faultWriteToken = "fault-write-token-0123456789"

// answer is one raw HTTP exchange.
type answer struct {
	status int
	header http.Header
	body   []byte
	took   time.Duration
}

func (a answer) response(t *testing.T) plugin.Response {
	t.Helper()
	var r plugin.Response
	require.NoError(t, json.Unmarshal(a.body, &r), string(a.body))
	return r
}

func (a answer) errorBody(t *testing.T) plugin.ErrorBody {
	t.Helper()
	var e plugin.ErrorBody
	require.NoError(t, json.Unmarshal(a.body, &e), string(a.body))
	return e
}

func (f *faultStack) call(t *testing.T, method, path string, body []byte) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, f.url+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if strings.HasPrefix(path, "/v1/ingest") {
		req.Header.Set("Authorization", "Bearer "+faultWriteToken)
	}
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return answer{status: res.StatusCode, header: res.Header, body: raw, took: time.Since(start)}
}

func (f *faultStack) postJSON(t *testing.T, path string, v any) answer {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return f.call(t, http.MethodPost, path, b)
}

// healthy asserts the process still serves /healthz (and, with Elasticsearch passing, /readyz).
func (f *faultStack) healthy(t *testing.T) {
	t.Helper()
	a := f.call(t, http.MethodGet, "/healthz", nil)
	require.Equal(t, http.StatusOK, a.status, "healthz after the fault: %s", a.body)
	if proxyMode(f.proxy.mode.Load()) == proxyPass {
		a = f.call(t, http.MethodGet, "/readyz", nil)
		require.Equal(t, http.StatusOK, a.status, "readyz after the fault: %s", a.body)
	}
}

// count is the number of documents in the index, asked of the node directly.
func (f *faultStack) count(t *testing.T) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, f.esURL+"/"+f.es.Index()+"/_count", nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out struct{ Count int }
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	return out.Count
}

// esHits renders adapter hits as the Elasticsearch hits /v1/rerank takes.
func esHits(hits []adapter.Hit, withSummary bool) []map[string]any {
	out := make([]map[string]any, len(hits))
	for i, h := range hits {
		src := map[string]any{"title": h.Title}
		if withSummary {
			src["summary"] = h.Summary
		}
		out[i] = map[string]any{"_id": h.ID, "_score": h.Score, "_source": src}
	}
	return out
}

const faultQuery = "who appoints the chair of the federal reserve system"

func TestFaults(t *testing.T) {
	f := newFaultStack(t)
	hits, err := f.es.SearchNew(t.Context(), faultQuery, 150)
	require.NoError(t, err)
	require.Len(t, hits, 150, "the e2e corpus has 300 new documents")

	t.Run("es_slow_search_504_within_budget", func(t *testing.T) {
		f.proxy.set(proxySlow)
		defer f.proxy.set(proxyPass)
		a := f.postJSON(t, "/v1/search", plugin.SearchRequest{Query: faultQuery})
		require.Equal(t, http.StatusGatewayTimeout, a.status, string(a.body))
		require.Equal(t, "elasticsearch timed out", a.errorBody(t).Error)
		// Elasticsearch gets es_budget_fraction of the budget; the whole request must not outlive the budget
		// (a generous bound: this asserts "no hang", not speed).
		require.Less(t, a.took, f.budget+time.Second, "took %s", a.took)
		f.healthy(t)
	})

	t.Run("es_slow_rerank_200_parametric_unresolved", func(t *testing.T) {
		f.proxy.set(proxySlow)
		defer f.proxy.set(proxyPass)
		// No hits: every result is parametric and needs Elasticsearch to resolve its docid.
		a := f.postJSON(t, "/v1/rerank", map[string]any{"query": faultQuery, "hits": []any{}})
		require.Equal(t, http.StatusOK, a.status, string(a.body))
		require.Less(t, a.took, f.budget+time.Second, "resolving parametric docids is bounded by the budget; took %s", a.took)
		r := a.response(t)
		require.NotEmpty(t, r.Results)
		for _, res := range r.Results {
			require.Equal(t, plugin.FromParametric, res.Provenance)
			require.False(t, res.Resolved, "%q cannot be resolved while Elasticsearch hangs", res.DocID)
		}
		f.healthy(t)
	})

	// Under the shipped max_retries: 3 the retries' backoff can outlast the Elasticsearch share of the
	// budget; the adapter's retrier then returns the last connection failure rather than waiting into the
	// deadline, and a deadline that ends the retries is still ErrUnavailable, so the outage is a 503.
	t.Run("es_down_503_retry_after_then_recovers", func(t *testing.T) {
		f.proxy.set(proxyDown)
		defer f.proxy.set(proxyPass)
		before := f.proxy.seen.Load()
		for range 3 {
			a := f.postJSON(t, "/v1/search", plugin.SearchRequest{Query: faultQuery})
			require.Equal(t, http.StatusServiceUnavailable, a.status,
				"an outage is a 503 with Retry-After, not a deadline: %s", a.body)
			require.Equal(t, "1", a.header.Get("Retry-After"))
			require.Equal(t, "elasticsearch unavailable", a.errorBody(t).Error)
			require.Less(t, a.took, f.budget+time.Second)
		}
		require.Greater(t, f.proxy.seen.Load(), before, "the sidecar did try the proxy")
		a := f.call(t, http.MethodGet, "/readyz", nil)
		require.Equal(t, http.StatusServiceUnavailable, a.status, "not ready while Elasticsearch is down")
		a = f.call(t, http.MethodPost, "/v1/ingest?refresh=true", []byte(`{"docid":"Fault Doc","title":"Fault Doc","text":"written while down"}`+"\n"))
		require.Equal(t, http.StatusServiceUnavailable, a.status, string(a.body))
		require.Equal(t, "1", a.header.Get("Retry-After"))
		require.Contains(t, string(a.body), "resend the whole body")
		// /v1/rerank needs Elasticsearch only to resolve parametric docids: it still answers.
		a = f.postJSON(t, "/v1/rerank", map[string]any{"query": faultQuery, "hits": esHits(hits[:10], true)})
		require.Equal(t, http.StatusOK, a.status, string(a.body))
		f.healthy(t)

		f.proxy.set(proxyPass)
		a = f.postJSON(t, "/v1/search", plugin.SearchRequest{Query: faultQuery})
		require.Equal(t, http.StatusOK, a.status, "recovered once the proxy passes again: %s", a.body)
		require.Equal(t, 100, a.response(t).HitsReceived)
		f.healthy(t)
	})

	t.Run("malformed_json_400", func(t *testing.T) {
		for _, c := range []struct{ path, body, field string }{
			{"/v1/search", `{"query": "unterminated`, "body"},
			{"/v1/search", `{"query": 5}`, "query"},
			{"/v1/search", `{"query": "a"} {"query": "b"}`, "body"},
			{"/v1/rerank", `{"query": "q", "hits": {}}`, "hits"},
			{"/v1/rerank", `[`, "body"},
		} {
			a := f.call(t, http.MethodPost, c.path, []byte(c.body))
			require.Equal(t, http.StatusBadRequest, a.status, "%s %s: %s", c.path, c.body, a.body)
			require.Equal(t, c.field, a.errorBody(t).Field, "%s %s", c.path, c.body)
		}
		f.healthy(t)
	})

	t.Run("oversized_body_413", func(t *testing.T) {
		big := `{"query": "q", "hits": [], "pad": "` + strings.Repeat("x", faultMaxBodyBytes) + `"}`
		for _, path := range []string{"/v1/rerank", "/v1/search", "/v1/ingest"} {
			a := f.call(t, http.MethodPost, path, []byte(big))
			require.Equal(t, http.StatusRequestEntityTooLarge, a.status, "%s: %s", path, a.body)
		}
		f.healthy(t)
	})

	t.Run("invalid_utf8_query_400", func(t *testing.T) {
		for _, path := range []string{"/v1/search", "/v1/rerank"} {
			a := f.call(t, http.MethodPost, path, []byte("{\"query\": \"caf\xe9 \xff\", \"hits\": []}"))
			require.Equal(t, http.StatusBadRequest, a.status, "%s: %s", path, a.body)
			e := a.errorBody(t)
			require.Equal(t, "body", e.Field)
			require.Equal(t, "invalid UTF-8", e.Error)
		}
		f.healthy(t)
	})

	t.Run("more_than_100_hits_top_100_used", func(t *testing.T) {
		a := f.postJSON(t, "/v1/rerank", map[string]any{"query": faultQuery, "hits": esHits(hits, true)})
		require.Equal(t, http.StatusOK, a.status, string(a.body))
		r := a.response(t)
		require.Equal(t, 150, r.HitsReceived)
		require.True(t, r.CandidatesTruncated, "the response says hits beyond 100 never reached the model")
		require.LessOrEqual(t, r.CandidatesInContext, 100)
		for _, res := range r.Results {
			if res.Provenance == plugin.FromCopy {
				require.LessOrEqual(t, *res.BM25Rank, 100, "a copied document is one of the first 100 hits")
			}
		}
		f.healthy(t)
	})

	t.Run("more_than_max_hits_400", func(t *testing.T) {
		many := make([]map[string]any, faultMaxHits+1)
		for i := range many {
			many[i] = map[string]any{"_id": fmt.Sprint(i), "_source": map[string]any{"title": fmt.Sprint("doc ", i)}}
		}
		a := f.postJSON(t, "/v1/rerank", map[string]any{"query": faultQuery, "hits": many})
		require.Equal(t, http.StatusBadRequest, a.status, string(a.body))
		require.Equal(t, "hits", a.errorBody(t).Field)
		f.healthy(t)
	})

	t.Run("empty_hits_200_parametric_only", func(t *testing.T) {
		a := f.postJSON(t, "/v1/rerank", map[string]any{"query": faultQuery, "hits": []any{}})
		require.Equal(t, http.StatusOK, a.status, string(a.body))
		r := a.response(t)
		require.Zero(t, r.HitsReceived)
		require.Zero(t, r.CandidatesInContext)
		for _, res := range r.Results {
			require.NotEqual(t, plugin.FromCopy, res.Provenance, "nothing to copy from")
		}
		f.healthy(t)
	})

	t.Run("duplicate_ids_200", func(t *testing.T) {
		dup := esHits([]adapter.Hit{hits[0], hits[1], hits[0], hits[2], hits[1]}, true)
		a := f.postJSON(t, "/v1/rerank", map[string]any{"query": faultQuery, "hits": dup})
		require.Equal(t, http.StatusOK, a.status, string(a.body))
		r := a.response(t)
		require.Equal(t, 5, r.HitsReceived)
		seen := map[string]bool{}
		for _, res := range r.Results {
			require.False(t, seen[res.DocID], "docid %q ranked twice", res.DocID)
			seen[res.DocID] = true
			if res.Provenance == plugin.FromCopy {
				require.Contains(t, []int{1, 2, 4}, *res.BM25Rank, "a duplicate points at its first occurrence")
			}
		}
		f.healthy(t)
	})

	t.Run("hits_without_summaries_200_title_only", func(t *testing.T) {
		var r plugin.Response
		// Shed as overloaded while the machine is still busy with the reads before (a loaded machine's answer, not
		// this fault's): asked again after a pause, at most three times.
		for try := range 3 {
			a := f.postJSON(t, "/v1/rerank", map[string]any{"query": faultQuery, "hits": esHits(hits[:20], false)})
			require.Equal(t, http.StatusOK, a.status, string(a.body))
			r = a.response(t)
			if r.FallbackReason != plugin.ReasonOverloaded || try == 2 {
				break
			}
			time.Sleep(2 * time.Second)
		}
		require.NotEqual(t, plugin.ModeFirstStageFallback, r.Mode, "the model did not read: %s", r.FallbackReason)
		require.Equal(t, 20, r.TitleOnlyCandidates, "mode %s", r.Mode)
		f.healthy(t)
	})

	t.Run("hit_without_title_400", func(t *testing.T) {
		bad := esHits(hits[:3], true)
		bad[1]["_source"] = map[string]any{"summary": "no title"}
		a := f.postJSON(t, "/v1/rerank", map[string]any{"query": faultQuery, "hits": bad})
		require.Equal(t, http.StatusBadRequest, a.status, string(a.body))
		require.Equal(t, "hits[1]._source.title", a.errorBody(t).Field)
		f.healthy(t)
	})

	t.Run("ingest_bad_records_beside_good_207", func(t *testing.T) {
		before := f.count(t)
		body := strings.Join([]string{
			`{"docid": "Quibbleton Fault Lighthouse", "title": "Quibbleton Fault Lighthouse", "text": "The Quibbleton Fault Lighthouse stands on a fictional cape."}`,
			`{"docid": "Broken", "title": "Broken", "text": `,
			`{"docid": "No Title", "text": "a record without a title"}`,
			"{\"docid\": \"Bad Bytes\", \"title\": \"Bad Bytes\", \"text\": \"caf\xe9 au lait\"}",
			`{"docid": "Zephyrine Fault Aqueduct", "title": "Zephyrine Fault Aqueduct", "text": "The Zephyrine Fault Aqueduct is a fictional aqueduct.", "summary": "Zephyrine Fault Aqueduct: fictional aqueduct."}`,
			`{"docid": "Quibbleton Fault Lighthouse", "title": "Quibbleton Fault Lighthouse", "text": "a duplicate in the same batch"}`,
			`{"docid": "Seen As Text", "title": "Seen As Text", "text": "seen must be a boolean", "seen": "yes"}`,
		}, "\n") + "\n"
		a := f.call(t, http.MethodPost, "/v1/ingest?refresh=true", []byte(body))
		require.Equal(t, http.StatusMultiStatus, a.status, string(a.body))
		var rep plugin.IngestResponse
		require.NoError(t, json.Unmarshal(a.body, &rep))
		require.Equal(t, 2, rep.Indexed+rep.Updated+rep.Unchanged, "the two good records")
		require.Empty(t, rep.Failed)
		var lines []int
		for _, r := range rep.Rejected {
			lines = append(lines, r.Line)
		}
		require.Equal(t, []int{2, 3, 4, 6, 7}, lines, "every bad record with its line: %s", a.body)
		require.Equal(t, before+2, f.count(t), "nothing previously ingested lost, the good ones added")

		for _, q := range []string{"Quibbleton Fault Lighthouse cape", "Zephyrine Fault Aqueduct"} {
			got, err := f.es.SearchNew(t.Context(), q, 1)
			require.NoError(t, err)
			require.NotEmpty(t, got)
			require.Contains(t, q, got[0].DocID, "searchable after refresh")
		}
		found, err := f.es.Resolve(t.Context(), f.seen[:5])
		require.NoError(t, err)
		require.Len(t, found, 5, "seen documents ingested before are still there")
		f.healthy(t)
	})
}
