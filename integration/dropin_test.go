//go:build integration && ort && tokenizers

package integration

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/dropin"
	"github.com/icicle-search/sidecar/plugin"
)

// dropinResponse is the part of an Elasticsearch search response the tests read, plus the sidecar's additions.
type dropinResponse struct {
	Took     *int            `json:"took"`
	TimedOut *bool           `json:"timed_out"`
	Shards   json.RawMessage `json:"_shards"`
	Hits     struct {
		Total struct {
			Value int `json:"value"`
		} `json:"total"`
		Hits []struct {
			Index  string          `json:"_index"`
			ID     string          `json:"_id"`
			Score  *float64        `json:"_score"`
			Source map[string]any  `json:"_source"`
			Icicle *dropin.HitInfo `json:"_icicle"`
		} `json:"hits"`
	} `json:"hits"`
	Aggregations json.RawMessage `json:"aggregations"`
	Icicle       *dropin.Info    `json:"icicle"`
	Error        json.RawMessage `json:"error"`
	Status       int             `json:"status"`
}

func postRaw(t *testing.T, url, body string) (int, http.Header, []byte) {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, res.Header, b
}

func TestDropin(t *testing.T) {
	s := newStack(t, 300)
	esURL := os.Getenv("ICICLE_ES_URL")
	index := s.es.Index()
	query := "who appoints the chair of the federal reserve system"
	match := `{"query":{"match":{"text":"` + query + `"}},"size":10}`

	t.Run("match query is reranked in Elasticsearch's shape", func(t *testing.T) {
		code, hdr, b := postRaw(t, s.url+"/"+index+"/_search", match)
		require.Equal(t, http.StatusOK, code, string(b))
		require.Equal(t, "Elasticsearch", hdr.Get("X-Elastic-Product"))
		var resp dropinResponse
		require.NoError(t, json.Unmarshal(b, &resp))
		require.NotNil(t, resp.Took)
		require.NotNil(t, resp.TimedOut)
		require.NotEmpty(t, resp.Shards)
		require.Positive(t, resp.Hits.Total.Value)

		ic := resp.Icicle
		require.NotNil(t, ic)
		require.Equal(t, plugin.ModeReranked, ic.Mode, ic.Reason)
		require.Equal(t, "query.match.text", ic.QueryFrom)
		require.Equal(t, 10, ic.HitsReceived)
		require.Positive(t, ic.CandidatesInContext)
		require.NotNil(t, ic.RouterProb)
		require.Positive(t, ic.Timings.Model)

		// The same query straight to Elasticsearch: the hits the drop-in started from.
		_, _, direct := postRaw(t, esURL+"/"+index+"/_search", match)
		var es dropinResponse
		require.NoError(t, json.Unmarshal(direct, &es))
		esRank := make(map[string]int)
		for i, h := range es.Hits.Hits {
			esRank[h.ID] = i + 1
		}
		require.Len(t, resp.Hits.Hits, len(es.Hits.Hits), "the page keeps Elasticsearch's size")
		ids := make([]string, 0, len(resp.Hits.Hits))
		for i, h := range resp.Hits.Hits {
			require.NotNil(t, h.Icicle, "hit %d has _icicle", i)
			require.Equal(t, index, h.Index)
			require.NotContains(t, ids, h.ID, "no hit twice")
			ids = append(ids, h.ID)
			docid, _ := h.Source["docid"].(string)
			require.Equal(t, adapter.DocumentID(docid), h.ID)
			switch h.Icicle.Provenance {
			case plugin.FromCopy, plugin.FromBM25:
				require.NotNil(t, h.Icicle.BM25Rank)
				require.Equal(t, esRank[h.ID], *h.Icicle.BM25Rank, "bm25_rank is the hit's place in Elasticsearch's answer")
				require.NotNil(t, h.Score, "Elasticsearch's _score is kept")
			case plugin.FromParametric:
				if h.Icicle.BM25Rank == nil {
					require.Nil(t, h.Score, "an inserted document has no Elasticsearch score")
					require.Contains(t, s.seen, docid, "a parametric docid belongs to the seen corpus")
				}
			default:
				t.Fatalf("hit %d: provenance %q", i, h.Icicle.Provenance)
			}
		}
	})

	t.Run("ext.icicle.query is used and stripped", func(t *testing.T) {
		body := `{"query":{"bool":{"should":[{"match":{"title":"federal"}},{"match":{"text":"reserve"}}]}},"ext":{"icicle":{"query":"` + query + `"}}}`
		code, _, b := postRaw(t, s.url+"/"+index+"/_search", body)
		require.Equal(t, http.StatusOK, code, "Elasticsearch never sees ext.icicle: %s", b)
		var resp dropinResponse
		require.NoError(t, json.Unmarshal(b, &resp))
		require.Equal(t, plugin.ModeReranked, resp.Icicle.Mode)
		require.Equal(t, "ext.icicle.query", resp.Icicle.QueryFrom)
	})

	t.Run("an aggregation-only body passes through", func(t *testing.T) {
		body := `{"size":0,"aggs":{"seen":{"terms":{"field":"seen"}}}}`
		code, _, b := postRaw(t, s.url+"/"+index+"/_search", body)
		require.Equal(t, http.StatusOK, code, string(b))
		var resp dropinResponse
		require.NoError(t, json.Unmarshal(b, &resp))
		require.Equal(t, dropin.ModePassthrough, resp.Icicle.Mode)
		require.Equal(t, dropin.ReasonAggregationsOnly, resp.Icicle.Reason)
		require.Empty(t, resp.Hits.Hits)
		_, _, direct := postRaw(t, esURL+"/"+index+"/_search", body)
		var es dropinResponse
		require.NoError(t, json.Unmarshal(direct, &es))
		require.JSONEq(t, string(es.Aggregations), string(resp.Aggregations), "Elasticsearch's aggregations unchanged")
	})

	t.Run("Elasticsearch's errors pass through", func(t *testing.T) {
		for _, tc := range []struct {
			name, path, body, errType string
			status                    int
		}{
			{"bad query", "/" + index + "/_search", `{"query":{"matc":{"text":"x"}}}`, "parsing_exception", 400},
			{"result window too large", "/" + index + "/_search", `{"query":{"match":{"text":"x"}},"from":10000,"size":10}`, "illegal_argument_exception", 400},
		} {
			code, hdr, b := postRaw(t, s.url+tc.path, tc.body)
			require.Equal(t, tc.status, code, tc.name)
			require.Equal(t, "Elasticsearch", hdr.Get("X-Elastic-Product"))
			var resp dropinResponse
			require.NoError(t, json.Unmarshal(b, &resp))
			require.Nil(t, resp.Icicle, "an error is Elasticsearch's alone")
			require.Equal(t, tc.status, resp.Status)
			require.Contains(t, string(resp.Error), tc.errType)
			_, _, direct := postRaw(t, esURL+tc.path, tc.body)
			require.JSONEq(t, string(direct), string(b), "%s: byte for byte what Elasticsearch said", tc.name)
		}
	})

	t.Run("an index outside the allow-list is the sidecar's 403", func(t *testing.T) {
		for _, path := range []string{"/icicle-no-such-index/_search", "/*/_search", "/_all/_search", "/" + index + ",.security/_search"} {
			code, hdr, b := postRaw(t, s.url+path, match)
			require.Equal(t, http.StatusForbidden, code, path)
			require.Equal(t, "Elasticsearch", hdr.Get("X-Elastic-Product"))
			var e dropin.ErrorBody
			require.NoError(t, json.Unmarshal(b, &e))
			require.Equal(t, "security_exception", e.Error.Type, path)
			require.Equal(t, 403, e.Status)
		}
	})

	t.Run("the official Go client works against the sidecar", func(t *testing.T) {
		client, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{s.url}})
		require.NoError(t, err)
		res, err := client.Search(client.Search.WithIndex(index), client.Search.WithBody(bytes.NewReader([]byte(match))))
		require.NoError(t, err, "the client's product check accepts the sidecar")
		defer res.Body.Close()
		require.False(t, res.IsError(), res.String())
		var resp dropinResponse
		require.NoError(t, json.NewDecoder(res.Body).Decode(&resp))
		require.True(t, slices.Contains([]plugin.Mode{plugin.ModeReranked, plugin.ModeFirstStageFallback}, resp.Icicle.Mode))
		require.NotEmpty(t, resp.Hits.Hits)
	})
}

// esCall sends one request to base and returns status, headers and body.
func esCall(t *testing.T, method, url, contentType, body string) (int, http.Header, []byte) {
	t.Helper()
	return send(t, method, url, contentType, "", body)
}

// TestDropinPassthrough: what is not a reranked _search reaches the node unchanged and comes back as the
// node answered, status, product header, media type and body; scroll and point in time work through it;
// the sidecar's own refusals have Elasticsearch's error shape.
func TestDropinPassthrough(t *testing.T) {
	s := newStack(t, 300)
	esURL := os.Getenv("ICICLE_ES_URL")
	index := s.es.Index()
	const vendor = "application/vnd.elasticsearch+json; compatible-with=8"
	for _, tc := range []struct {
		name, method, path, ct, body string
	}{
		{"info", "GET", "/", "", ""},
		{"ping", "HEAD", "/", "", ""},
		{"count", "POST", "/" + index + "/_count", "application/json", `{"query":{"term":{"seen":true}}}`},
		{"count, vendor media type", "POST", "/" + index + "/_count", vendor, `{"query":{"match_all":{}}}`},
		{"mapping", "GET", "/" + index + "/_mapping", "", ""},
		{"index exists", "HEAD", "/" + index, "", ""},
		{"get a document", "GET", "/" + index + "/_doc/" + adapter.DocumentID(s.seen[0]) + "?_source_includes=title", "", ""},
		{"missing document", "GET", "/" + index + "/_doc/nope", "", ""},
		{"msearch", "POST", "/" + index + "/_msearch", "application/x-ndjson", "{}\n{\"size\":2,\"query\":{\"match\":{\"text\":\"federal reserve\"}}}\n"},
		{"bad count", "POST", "/" + index + "/_count", "application/json", `{"query":{"matc":{}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, hdr, b := esCall(t, tc.method, s.url+tc.path, tc.ct, tc.body)
			wantCode, wantHdr, want := esCall(t, tc.method, esURL+tc.path, tc.ct, tc.body)
			require.Equal(t, wantCode, code, string(b))
			require.Equal(t, wantHdr.Get("X-Elastic-Product"), hdr.Get("X-Elastic-Product"))
			require.Equal(t, wantHdr.Get("Content-Type"), hdr.Get("Content-Type"))
			if tc.name == "msearch" {
				var got, exp struct {
					Responses []struct {
						Hits json.RawMessage `json:"hits"`
					} `json:"responses"`
				}
				require.NoError(t, json.Unmarshal(b, &got))
				require.NoError(t, json.Unmarshal(want, &exp))
				require.Len(t, got.Responses, 1)
				require.JSONEq(t, string(exp.Responses[0].Hits), string(got.Responses[0].Hits), "passed through, not reranked")
				return
			}
			require.Equal(t, string(want), string(b), "byte for byte")
		})
	}

	t.Run("search without an index reads the configured index", func(t *testing.T) {
		code, _, b := esCall(t, "POST", s.url+"/_search", "application/json", `{"query":{"match":{"text":"federal reserve chair"}}}`)
		require.Equal(t, http.StatusOK, code, string(b))
		var resp dropinResponse
		require.NoError(t, json.Unmarshal(b, &resp))
		require.NotNil(t, resp.Icicle)
		require.NotEqual(t, dropin.ModePassthrough, resp.Icicle.Mode)
		for _, h := range resp.Hits.Hits {
			require.Equal(t, index, h.Index)
		}
	})

	t.Run("scroll: opened on the index, continued and cleared without one", func(t *testing.T) {
		code, _, b := esCall(t, "POST", s.url+"/"+index+"/_search?scroll=1m", "application/json", `{"size":2,"query":{"match_all":{}},"sort":["_doc"]}`)
		require.Equal(t, http.StatusOK, code, string(b))
		var first struct {
			ScrollID string `json:"_scroll_id"`
		}
		require.NoError(t, json.Unmarshal(b, &first))
		require.NotEmpty(t, first.ScrollID)
		code, _, b = esCall(t, "POST", s.url+"/_search/scroll", "application/json", `{"scroll":"1m","scroll_id":"`+first.ScrollID+`"}`)
		require.Equal(t, http.StatusOK, code, string(b))
		var next dropinResponse
		require.NoError(t, json.Unmarshal(b, &next))
		require.Len(t, next.Hits.Hits, 2)
		code, _, b = esCall(t, "DELETE", s.url+"/_search/scroll", "application/json", `{"scroll_id":"`+first.ScrollID+`"}`)
		require.Equal(t, http.StatusOK, code, string(b))
		require.Contains(t, string(b), `"succeeded":true`)
	})

	t.Run("point in time: opened on the index, searched, closed", func(t *testing.T) {
		code, _, b := esCall(t, "POST", s.url+"/"+index+"/_pit?keep_alive=1m", "", "")
		require.Equal(t, http.StatusOK, code, string(b))
		var pit struct {
			ID string `json:"id"`
		}
		require.NoError(t, json.Unmarshal(b, &pit))
		require.NotEmpty(t, pit.ID)
		code, _, b = esCall(t, "POST", s.url+"/_search", "application/json",
			`{"size":5,"query":{"match":{"text":"federal reserve chair"}},"pit":{"id":"`+pit.ID+`","keep_alive":"1m"}}`)
		require.Equal(t, http.StatusOK, code, string(b))
		var resp dropinResponse
		require.NoError(t, json.Unmarshal(b, &resp))
		require.NotEmpty(t, resp.Hits.Hits)
		require.NotNil(t, resp.Icicle)
		code, _, b = esCall(t, "DELETE", s.url+"/_pit", "application/json", `{"id":"`+pit.ID+`"}`)
		require.Equal(t, http.StatusOK, code, string(b))
		require.Contains(t, string(b), `"succeeded":true`)
	})

	t.Run("the sidecar's own errors have Elasticsearch's shape", func(t *testing.T) {
		big := `{"query":{"match":{"text":"` + strings.Repeat("x ", 5<<20) + `"}}}` // 10 MB
		for _, tc := range []struct {
			name, method, path, body, errType string
			code                              int
		}{
			{"10 MB body", "POST", "/" + index + "/_search", big, "content_too_long_exception", 413},
			{"a write", "PUT", "/" + index + "/_doc/x", `{"title":"x"}`, "security_exception", 403},
			{"a script", "POST", "/" + index + "/_search", `{"query":{"match_all":{}},"script_fields":{"x":{"script":"1"}}}`, "security_exception", 403},
			{"runtime mappings", "POST", "/" + index + "/_count", `{"runtime_mappings":{"x":{"type":"long","script":"emit(1)"}}}`, "security_exception", 403},
			{"bad ext.icicle", "POST", "/" + index + "/_search", `{"ext":{"icicle":{"query":1}}}`, "illegal_argument_exception", 400},
		} {
			code, hdr, b := esCall(t, tc.method, s.url+tc.path, "application/json", tc.body)
			require.Equal(t, tc.code, code, tc.name)
			require.Equal(t, "Elasticsearch", hdr.Get("X-Elastic-Product"), tc.name)
			var e dropin.ErrorBody
			require.NoError(t, json.Unmarshal(b, &e), tc.name)
			require.Equal(t, tc.code, e.Status, tc.name)
			require.Equal(t, tc.errType, e.Error.Type, tc.name)
			require.Equal(t, tc.errType, e.Error.RootCause[0].Type, tc.name)
		}
	})
}
