package adapter_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/icicle-search/sidecar/adapter"
)

func TestMain(m *testing.M) {
	// The bulk indexer starts worker goroutines; Ingest must stop them all before it returns.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"))
}

func TestNew(t *testing.T) {
	t.Run("default index", func(t *testing.T) {
		a, err := adapter.New(adapter.Options{}, nil)
		require.NoError(t, err)
		require.Equal(t, adapter.DefaultIndex, a.Index())
		require.NoError(t, a.Close())
	})
	t.Run("missing CA file", func(t *testing.T) {
		_, err := adapter.New(adapter.Options{CACertPath: "testdata/no-such-ca.pem"}, nil)
		require.ErrorIs(t, err, os.ErrNotExist)
		require.ErrorContains(t, err, "CA certificate")
	})
	t.Run("CA file without certificates", func(t *testing.T) {
		_, err := adapter.New(adapter.Options{CACertPath: "testdata/info.json"}, nil)
		require.ErrorContains(t, err, "no PEM certificates")
	})
	t.Run("unknown vector index type", func(t *testing.T) {
		_, err := adapter.New(adapter.Options{VectorIndex: "int4_flat"}, nil)
		require.ErrorContains(t, err, `vector index "int4_flat", want one of hnsw, int8_hnsw, bbq_hnsw`)
	})
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name      string
		routes    map[string][]reply
		wantErr   error
		wantInfo  adapter.ClusterInfo
		wantCalls int // requests to GET / (retries included)
	}{
		{
			name:     "ready",
			routes:   map[string][]reply{routeInfo: okInfo, routeMapping: okMapping},
			wantInfo: adapter.ClusterInfo{ClusterName: "icicle", Version: "8.14.3", Index: "icicle-docs", IndexExists: true, MappingOK: true},
		},
		{
			name:     "index missing",
			routes:   map[string][]reply{routeInfo: okInfo, routeMapping: missingMapping},
			wantErr:  adapter.ErrIndexMissing,
			wantInfo: adapter.ClusterInfo{ClusterName: "icicle", Version: "8.14.3", Index: "icicle-docs"},
		},
		{
			name:     "wrong mapping",
			routes:   map[string][]reply{routeInfo: okInfo, routeMapping: {{status: 200, file: "mapping_bad.json"}}},
			wantErr:  adapter.ErrMappingMismatch,
			wantInfo: adapter.ClusterInfo{ClusterName: "icicle", Version: "8.14.3", Index: "icicle-docs", IndexExists: true},
		},
		{
			name:      "503 after retries",
			routes:    map[string][]reply{routeInfo: unavailable},
			wantErr:   adapter.ErrUnavailable,
			wantInfo:  adapter.ClusterInfo{Index: "icicle-docs"},
			wantCalls: 4,
		},
		{
			name:      "connection refused",
			routes:    map[string][]reply{routeInfo: {{err: syscall.ECONNREFUSED}}},
			wantErr:   adapter.ErrUnavailable,
			wantInfo:  adapter.ClusterInfo{Index: "icicle-docs"},
			wantCalls: 4,
		},
		{
			name:      "not elasticsearch",
			routes:    map[string][]reply{routeInfo: {{status: 200, file: "info.json", noProduct: true}}},
			wantErr:   adapter.ErrUnavailable,
			wantInfo:  adapter.ClusterInfo{Index: "icicle-docs"},
			wantCalls: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, f := newFakeAdapter(t, tt.routes)
			info, err := a.Check(t.Context())
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.wantErr)
			}
			require.Equal(t, tt.wantInfo, info)
			if tt.wantCalls > 0 {
				require.Len(t, f.requests("GET", "/"), tt.wantCalls)
			}
		})
	}
}

func TestEnsureIndex(t *testing.T) {
	tests := []struct {
		name       string
		routes     map[string][]reply
		wantErr    error
		wantErrMsg []string
		wantCreate bool
	}{
		{
			name:       "absent: created",
			routes:     map[string][]reply{routeMapping: missingMapping, routeCreate: {{status: 200, file: "create_index.json"}}},
			wantCreate: true,
		},
		{
			name:   "present with the right mapping: untouched",
			routes: map[string][]reply{routeMapping: okMapping},
		},
		{
			name:    "present with a wrong mapping: reported, untouched",
			routes:  map[string][]reply{routeMapping: {{status: 200, file: "mapping_bad.json"}}},
			wantErr: adapter.ErrMappingMismatch,
			wantErrMsg: []string{
				`ensure index "icicle-docs"`,
				`field "docid": type is "text", want "keyword"`,
				`field "seen": type is "keyword", want "boolean"`,
				`field "summary": missing, want type "text"`,
				`field "title.keyword": missing, want type "keyword"`,
			},
		},
		{
			name: "created concurrently by someone else: theirs is verified",
			routes: map[string][]reply{
				routeMapping: {missingMapping[0], okMapping[0]},
				routeCreate:  {{status: 400, file: "index_exists.json"}},
			},
			wantCreate: true,
		},
		{
			name:    "cluster down",
			routes:  map[string][]reply{routeMapping: unavailable},
			wantErr: adapter.ErrUnavailable,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, f := newFakeAdapter(t, tt.routes)
			err := a.EnsureIndex(t.Context())
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.wantErr)
			}
			for _, m := range tt.wantErrMsg {
				require.ErrorContains(t, err, m)
			}
			creates := f.requests("PUT", "/icicle-docs")
			if !tt.wantCreate {
				require.Empty(t, creates)
				return
			}
			require.Len(t, creates, 1)
			golden(t, "create_index.request.json", creates[0].Body)
		})
	}
}

func TestSearch(t *testing.T) {
	tests := []struct {
		name     string
		search   func(*adapter.Adapter, context.Context, string, int) ([]adapter.Hit, error)
		routes   map[string][]reply
		query    string
		k        int
		wantErr  error
		wantHits []adapter.Hit
		golden   string
	}{
		{
			name:   "new",
			search: (*adapter.Adapter).SearchNew,
			routes: map[string][]reply{routeSearch: {{status: 200, file: "search.json"}}},
			query:  "wild card super bowl", k: 5,
			wantHits: []adapter.Hit{
				{ID: adapter.DocumentID("Super Bowl XV"), DocID: "Super Bowl XV", Title: "Super Bowl XV", Summary: "Oakland won Super Bowl XV as a wild card.", Score: 3.621187, Rank: 1, BM25: 3.621187, BM25Rank: 1},
				{ID: adapter.DocumentID("Green Bay Packers"), DocID: "Green Bay Packers", Title: "Green Bay Packers", Score: 0.9926106, Rank: 2, BM25: 0.9926106, BM25Rank: 2},
			},
			golden: "search_new.request.json",
		},
		{
			name:     "all",
			search:   (*adapter.Adapter).SearchAll,
			routes:   map[string][]reply{routeSearch: {{status: 200, file: "search.json"}}},
			query:    "wild card super bowl",
			k:        5,
			wantHits: nil, // checked by length below
			golden:   "search_all.request.json",
		},
		{
			name:   "429 then success is retried",
			search: (*adapter.Adapter).SearchAll,
			routes: map[string][]reply{routeSearch: {{status: 429, file: "too_many_requests.json"}, {status: 200, file: "search.json"}}},
			query:  "wild card", k: 2,
		},
		{
			name:   "index missing",
			search: (*adapter.Adapter).SearchNew,
			routes: map[string][]reply{routeSearch: missingMapping},
			query:  "q", k: 5,
			wantErr: adapter.ErrIndexMissing,
		},
		{name: "empty query", search: (*adapter.Adapter).SearchNew, query: "  ", k: 5, wantErr: adapter.ErrInvalidArgument},
		{name: "k zero", search: (*adapter.Adapter).SearchAll, query: "q", k: 0, wantErr: adapter.ErrInvalidArgument},
		{name: "k too large", search: (*adapter.Adapter).SearchAll, query: "q", k: adapter.MaxK + 1, wantErr: adapter.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, f := newFakeAdapter(t, tt.routes)
			hits, err := tt.search(a, t.Context(), tt.query, tt.k)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				require.ErrorContains(t, err, `"icicle-docs"`)
				return
			}
			require.NoError(t, err)
			require.Len(t, hits, 2)
			if tt.wantHits != nil {
				require.Equal(t, tt.wantHits, hits)
			}
			if tt.golden != "" {
				reqs := f.requests("POST", "/icicle-docs/_search")
				require.Len(t, reqs, 1)
				golden(t, tt.golden, reqs[0].Body)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	t.Run("found and missing, one request, duplicates once", func(t *testing.T) {
		a, f := newFakeAdapter(t, map[string][]reply{routeMget: {{status: 200, file: "mget.json"}}})
		got, err := a.Resolve(t.Context(), []string{"Super Bowl XV", "nope", "Super Bowl XV"})
		require.NoError(t, err)
		require.Equal(t, map[string]adapter.Hit{"Super Bowl XV": {
			ID: adapter.DocumentID("Super Bowl XV"), DocID: "Super Bowl XV", Title: "Super Bowl XV",
			Summary: "Oakland won Super Bowl XV as a wild card.",
		}}, got)
		reqs := f.requests("POST", "/icicle-docs/_mget")
		require.Len(t, reqs, 1)
		require.JSONEq(t, `{"ids":["`+adapter.DocumentID("Super Bowl XV")+`","`+adapter.DocumentID("nope")+`"]}`, string(reqs[0].Body))
		require.Contains(t, reqs[0].Query, "_source_includes=docid%2Ctitle%2Csummary")
	})
	t.Run("nothing to resolve makes no request", func(t *testing.T) {
		a, f := newFakeAdapter(t, nil)
		got, err := a.Resolve(t.Context(), nil)
		require.NoError(t, err)
		require.Empty(t, got)
		require.Empty(t, f.calls)
	})
	t.Run("index missing", func(t *testing.T) {
		a, _ := newFakeAdapter(t, map[string][]reply{routeMget: missingMapping})
		_, err := a.Resolve(t.Context(), []string{"x"})
		require.ErrorIs(t, err, adapter.ErrIndexMissing)
	})
}

func TestSeenCount(t *testing.T) {
	a, f := newFakeAdapter(t, map[string][]reply{routeCount: {{status: 200, file: "count.json"}}})
	n, err := a.SeenCount(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.JSONEq(t, `{"query":{"term":{"seen":true}}}`, string(f.requests("POST", "/icicle-docs/_count")[0].Body))
}

// fixtureDocs are the four documents whose bulk responses are in testdata/bulk_*.json, in order; the
// fourth is the one the real node rejected.
var fixtureDocs = []adapter.Doc{
	{DocID: "Wild card (sports)", Title: "Wild card (sports)", Text: "The NFL was the first league ever to use the wild - card format.", Summary: "The NFL introduced the wild card in 1970.", Seen: true},
	{DocID: "Super Bowl XV", Title: "Super Bowl XV", Text: "Super Bowl XV was played in 1981.", Summary: "Oakland won Super Bowl XV as a wild card."},
	{DocID: "Green Bay Packers", Title: "Green Bay Packers", Text: "The Green Bay Packers won Super Bowl XLV in 2011."},
	{DocID: "Bad", Title: "Bad", Text: "x"},
}

func TestIngest(t *testing.T) {
	invalid := adapter.Doc{DocID: " ", Title: "no id", Text: "t"}
	tests := []struct {
		name       string
		routes     map[string][]reply
		docs       []adapter.Doc
		wantErr    error
		want       adapter.IngestReport
		wantFailed []string // substrings of the failure reasons, in order
		wantBulk   int
	}{
		{
			name:       "created, rejected by ES, invalid",
			routes:     map[string][]reply{routeMapping: okMapping, routeBulk: {{status: 200, file: "bulk_partial.json"}}},
			docs:       append([]adapter.Doc{invalid}, fixtureDocs...),
			want:       adapter.IngestReport{Indexed: 3},
			wantFailed: []string{"empty docid", "document_parsing_exception: [1:55] failed to parse field [seen]"},
			wantBulk:   1,
		},
		{
			name:       "re-ingest counts updates",
			routes:     map[string][]reply{routeMapping: okMapping, routeBulk: {{status: 200, file: "bulk_reingest.json"}}},
			docs:       fixtureDocs,
			want:       adapter.IngestReport{Updated: 3},
			wantFailed: []string{"document_parsing_exception"},
			wantBulk:   1,
		},
		{
			name:       "a document the response does not mention is failed, not dropped",
			routes:     map[string][]reply{routeMapping: okMapping, routeBulk: {{status: 200, file: "bulk_partial.json"}}},
			docs:       append(slices.Clone(fixtureDocs), adapter.Doc{DocID: "Fifth", Title: "Fifth", Text: "t"}),
			want:       adapter.IngestReport{Indexed: 3},
			wantFailed: []string{"document_parsing_exception", "no result from the bulk indexer"},
			wantBulk:   1,
		},
		{
			name:     "index missing: nothing sent",
			routes:   map[string][]reply{routeMapping: missingMapping},
			docs:     fixtureDocs,
			wantErr:  adapter.ErrIndexMissing,
			wantBulk: 0,
		},
		{
			name:       "cluster fails every bulk: every document failed, error is ErrUnavailable",
			routes:     map[string][]reply{routeMapping: okMapping, routeBulk: unavailable},
			docs:       fixtureDocs[:2],
			wantErr:    adapter.ErrUnavailable,
			wantFailed: []string{"503", "503"},
			wantBulk:   4, // 1 + 3 retries
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, f := newFakeAdapter(t, tt.routes)
			rep, err := a.Ingest(t.Context(), slices.Values(tt.docs), adapter.IngestOptions{Workers: 1, Refresh: true})
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.wantErr)
			}
			require.Equal(t, tt.want.Indexed, rep.Indexed)
			require.Equal(t, tt.want.Updated, rep.Updated)
			require.Len(t, rep.Failed, len(tt.wantFailed))
			for i, w := range tt.wantFailed {
				require.Contains(t, rep.Failed[i].Reason, w)
			}
			if tt.wantErr == nil || len(tt.wantFailed) > 0 {
				require.Equal(t, len(tt.docs), rep.Total(), "every document is accounted for")
			}
			bulks := f.requests("POST", "/icicle-docs/_bulk")
			require.Len(t, bulks, tt.wantBulk)
			if len(bulks) > 0 {
				require.Contains(t, bulks[0].Query, "refresh=wait_for")
				checkBulkBody(t, bulks[0].Body, tt.docs)
			}
		})
	}
}

// checkBulkBody verifies the NDJSON sent: index actions keyed by DocumentID, documents with every field.
func checkBulkBody(t *testing.T, body []byte, docs []adapter.Doc) {
	t.Helper()
	var want []adapter.Doc
	for _, d := range docs {
		if strings.TrimSpace(d.DocID) != "" {
			want = append(want, d)
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for i := 0; sc.Scan(); i++ {
		var meta struct {
			Index struct {
				ID string `json:"_id"`
			} `json:"index"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &meta))
		require.True(t, sc.Scan())
		var doc map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &doc))
		require.Less(t, i, len(want))
		d := want[i]
		require.Equal(t, adapter.DocumentID(d.DocID), meta.Index.ID)
		require.Equal(t, d.DocID, doc["docid"])
		require.Equal(t, d.Title, doc["title"])
		require.Equal(t, d.Text, doc["text"])
		require.Equal(t, d.Seen, doc["seen"])
		require.Contains(t, doc, "ingested_at")
		if d.Summary != "" {
			require.Equal(t, d.Summary, doc["summary"])
		} else {
			require.NotContains(t, doc, "summary")
		}
	}
}

func TestIngestCanceled(t *testing.T) {
	a, _ := newFakeAdapter(t, map[string][]reply{routeMapping: okMapping, routeBulk: {{status: 200, file: "bulk_partial.json"}}})
	ctx, cancel := context.WithCancel(t.Context())
	docs := func(yield func(adapter.Doc) bool) {
		for i, d := range fixtureDocs {
			if i == 2 {
				cancel()
			}
			if !yield(d) {
				return
			}
		}
	}
	rep, err := a.Ingest(ctx, docs, adapter.IngestOptions{Workers: 1})
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, adapter.ErrUnavailable)
	require.Equal(t, 3, rep.Total(), "the two queued documents and the one refused are all accounted for")
	require.Len(t, rep.Failed, 3)
}

func TestMarkSeen(t *testing.T) {
	a, f := newFakeAdapter(t, map[string][]reply{routeBulk: {{status: 200, file: "bulk_mark_seen.json"}}})
	rep, err := a.MarkSeen(t.Context(), []string{"Super Bowl XV", "Wild card (sports)", "nope", "Super Bowl XV"})
	require.NoError(t, err)
	require.Equal(t, adapter.MarkSeenReport{Marked: 1, Unchanged: 1, Missing: []string{"nope"}}, rep)
	reqs := f.requests("POST", "/icicle-docs/_bulk")
	require.Len(t, reqs, 1)
	require.Contains(t, reqs[0].Query, "refresh=wait_for")
	lines := strings.Split(strings.TrimSpace(string(reqs[0].Body)), "\n")
	require.Len(t, lines, 6)
	require.JSONEq(t, `{"update":{"_id":"`+adapter.DocumentID("Super Bowl XV")+`"}}`, lines[0])
	require.JSONEq(t, `{"doc":{"seen":true}}`, lines[1])
}

func TestClose(t *testing.T) {
	a, err := adapter.New(adapter.Options{Transport: newFakeES(t, nil)}, nil)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	require.NoError(t, a.Close(), "Close is idempotent")
	_, err = a.SearchAll(t.Context(), "q", 1)
	require.ErrorIs(t, err, adapter.ErrClosed)
	_, err = a.Ingest(t.Context(), slices.Values(fixtureDocs), adapter.IngestOptions{})
	require.ErrorIs(t, err, adapter.ErrClosed)
}

func TestResponseError(t *testing.T) {
	tests := []struct {
		err  *adapter.ResponseError
		is   []error
		isnt []error
	}{
		{&adapter.ResponseError{Status: 404, Type: "index_not_found_exception"}, []error{adapter.ErrIndexMissing}, []error{adapter.ErrUnavailable}},
		{&adapter.ResponseError{Status: 404, Type: "document_missing_exception"}, nil, []error{adapter.ErrIndexMissing, adapter.ErrUnavailable}},
		{&adapter.ResponseError{Status: 429}, []error{adapter.ErrUnavailable}, nil},
		{&adapter.ResponseError{Status: 504}, []error{adapter.ErrUnavailable}, nil},
		{&adapter.ResponseError{Status: 400, Type: "parsing_exception"}, nil, []error{adapter.ErrUnavailable}},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			for _, e := range tt.is {
				require.True(t, errors.Is(tt.err, e), "%v is %v", tt.err, e)
			}
			for _, e := range tt.isnt {
				require.False(t, errors.Is(tt.err, e), "%v is not %v", tt.err, e)
			}
		})
	}
}

// TestSearchAsksForTheWholeIndex: the sidecar's searches ask Elasticsearch to fail rather than answer from some
// shards, and the refusal (8.14.3's answer when a shard has no copy) reads as unavailable, with the cause that
// Elasticsearch gives only in caused_by.
func TestSearchAsksForTheWholeIndex(t *testing.T) {
	f := newFakeES(t, map[string][]reply{routeSearch: {{status: 503, file: "search_missing_shards.json"}}})
	a, err := adapter.New(adapter.Options{Addresses: []string{"http://es.test:9200"}, Transport: f, MaxRetries: 1}, nil)
	require.NoError(t, err)
	defer a.Close()
	_, err = a.SearchAll(t.Context(), "q", 10)
	require.ErrorIs(t, err, adapter.ErrUnavailable)
	require.ErrorContains(t, err, "503 search_phase_execution_exception: Search rejected due to missing shards [[redx][0]]")
	for _, c := range f.requests("POST", "/icicle-docs/_search") {
		require.Contains(t, c.Query, "allow_partial_search_results=false")
	}
}

// TestSearchesNameTheirShardCopies: a ranking search carries a preference that is the same for the same query
// (BM25 by its text, kNN by its vector) and differs between queries, so a repeated query is answered by the
// same copy of each shard; Elasticsearch refuses a custom preference that starts with '_'.
func TestSearchesNameTheirShardCopies(t *testing.T) {
	f := newFakeES(t, map[string][]reply{
		routeSearch:                  {{status: 200, file: "search.json"}},
		"POST /icicle-docs/_msearch": {{status: 200, file: "dense_hits.json"}},
	})
	a, err := adapter.New(adapter.Options{Addresses: []string{"http://es.test:9200"}, Transport: f, VectorDims: 3}, nil)
	require.NoError(t, err)
	defer a.Close()
	for _, q := range []string{"who sang it", "who sang it", "who wrote it"} {
		_, err = a.SearchAll(t.Context(), q, 10)
		require.NoError(t, err)
		_, err = a.SearchLean(t.Context(), q, 10, false)
		require.NoError(t, err)
	}
	var prefs []string
	for _, c := range f.requests("POST", "/icicle-docs/_search") {
		v, err := url.ParseQuery(c.Query)
		require.NoError(t, err)
		prefs = append(prefs, v.Get("preference"))
	}
	require.Len(t, prefs, 6)
	require.NotEmpty(t, prefs[0])
	require.NotEqual(t, byte('_'), prefs[0][0])
	require.Equal(t, []string{prefs[0], prefs[0], prefs[0]}, prefs[1:4], "one query, one preference")
	require.Equal(t, prefs[4], prefs[5])
	require.NotEqual(t, prefs[0], prefs[4], "another query, another preference")

	for _, v := range [][]float32{{1, 0, 0}, {1, 0, 0}, {0, 1, 0}} {
		_, err = a.Dense(t.Context(), v, []adapter.DenseQuery{{K: 3}})
		require.NoError(t, err)
	}
	var headers []string
	for _, c := range f.requests("POST", "/icicle-docs/_msearch") {
		lines := strings.Split(strings.TrimSpace(string(c.Body)), "\n")
		require.Len(t, lines, 2)
		var h0 map[string]any
		require.NoError(t, json.Unmarshal([]byte(lines[0]), &h0))
		require.Equal(t, false, h0["allow_partial_search_results"])
		headers = append(headers, h0["preference"].(string))
	}
	require.Len(t, headers, 3)
	require.Equal(t, headers[0], headers[1])
	require.NotEqual(t, headers[0], headers[2])
}

func TestDocumentID(t *testing.T) {
	require.Equal(t, "ce32acc7f0b4d626ff456bf8fe2104891b87552d", adapter.DocumentID("Super Bowl XV"))
	require.Len(t, adapter.DocumentID(strings.Repeat("é", 1000)), 40)
}
