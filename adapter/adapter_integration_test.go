//go:build integration

package adapter_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/internal/testenv"
)

// The integration tests need a real node: scripts/es.sh start, then
// ICICLE_ES_URL=$(scripts/es.sh url) go test -tags integration ./adapter
// Each test uses its own index named after the test and deletes it afterwards.

// plain is for the tests' own requests; without keep-alive it leaves no connection goroutines for goleak.
var plain = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func esURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("ICICLE_ES_URL")
	if u == "" {
		testenv.Missing(t, "ICICLE_ES_URL is not set: start a node with scripts/es.sh start and export ICICLE_ES_URL=$(scripts/es.sh url)")
	}
	return u
}

// newIndex returns an adapter on a fresh index that is deleted when the test ends.
func newIndex(t *testing.T) (*adapter.Adapter, string) {
	t.Helper()
	u := esURL(t)
	index := "icicle-it-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	deleteIndex(t, u, index)
	t.Cleanup(func() { deleteIndex(t, u, index) })
	a, err := adapter.New(adapter.Options{Addresses: []string{u}, Index: index, RequestTimeout: 30 * time.Second}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	return a, index
}

func deleteIndex(t *testing.T, url, index string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, url+"/"+index+"?ignore_unavailable=true", nil)
	require.NoError(t, err)
	res, err := plain.Do(req)
	require.NoError(t, err)
	res.Body.Close()
}

// corpus reads the first n valid documents of the repository's NQ-QED corpus.
func corpus(t *testing.T, n int) []adapter.Doc {
	t.Helper()
	cr, err := adapter.OpenCorpus(filepath.Join(repoRoot(t), "data", "nq_qed", "corpus.jsonl.gz"), adapter.CorpusLimits{})
	require.NoError(t, err)
	defer cr.Close()
	var docs []adapter.Doc
	for d := range cr.All() {
		d.Summary = firstSentence(d.Text)
		docs = append(docs, d)
		if len(docs) == n {
			break
		}
	}
	require.NoError(t, cr.Err())
	require.Len(t, docs, n)
	return docs
}

func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i > 0 && i < 300 {
		return s[:i+1]
	}
	return s[:min(len(s), 300)]
}

func TestIntegrationLifecycle(t *testing.T) {
	a, index := newIndex(t)
	ctx := t.Context()

	info, err := a.Check(ctx)
	require.ErrorIs(t, err, adapter.ErrIndexMissing)
	require.False(t, info.IndexExists)
	// The suite runs against 8.x and 9.x nodes (scripts/test.sh).
	require.Regexp(t, `^(8|9)\.\d+\.\d+`, info.Version)

	_, err = a.SearchAll(ctx, "anything", 5)
	require.ErrorIs(t, err, adapter.ErrIndexMissing)

	require.NoError(t, a.EnsureIndex(ctx))
	require.NoError(t, a.EnsureIndex(ctx), "second EnsureIndex must accept the index it created")
	info, err = a.Check(ctx)
	require.NoError(t, err)
	require.True(t, info.IndexExists && info.MappingOK)
	t.Logf("cluster %s version %s", info.ClusterName, info.Version)

	// 50 documents: the first 20 are D_train (seen), the rest D_new.
	docs := corpus(t, 50)
	for i := range docs[:20] {
		docs[i].Seen = true
	}
	rep, err := a.Ingest(ctx, slices.Values(docs), adapter.IngestOptions{Refresh: true})
	require.NoError(t, err)
	require.Empty(t, rep.Failed)
	require.Equal(t, 50, rep.Indexed)
	require.Equal(t, 0, rep.Updated)

	n, err := a.SeenCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 20, n)

	t.Run("search all finds a document by its title words", func(t *testing.T) {
		for _, d := range []adapter.Doc{docs[3], docs[30]} {
			hits, err := a.SearchAll(ctx, d.Title, 5)
			require.NoError(t, err)
			require.NotEmpty(t, hits)
			require.Contains(t, docIDs(hits), d.DocID)
			require.Equal(t, 1, hits[0].Rank)
			require.Positive(t, hits[0].Score)
			for i := 1; i < len(hits); i++ {
				require.GreaterOrEqual(t, hits[i-1].Score, hits[i].Score)
				require.Equal(t, i+1, hits[i].Rank)
			}
		}
	})

	t.Run("search new never returns seen documents", func(t *testing.T) {
		seenIDs := docDocIDs(docs[:20])
		for _, d := range docs[:20] {
			hits, err := a.SearchNew(ctx, d.Title, 10)
			require.NoError(t, err)
			for _, h := range hits {
				require.NotContains(t, seenIDs, h.DocID)
			}
		}
		hits, err := a.SearchNew(ctx, docs[40].Title, 5)
		require.NoError(t, err)
		require.Contains(t, docIDs(hits), docs[40].DocID)
		require.Equal(t, adapter.DocumentID(hits[0].DocID), hits[0].ID)
		require.NotEmpty(t, hits[0].Summary)
	})

	t.Run("resolve", func(t *testing.T) {
		got, err := a.Resolve(ctx, []string{docs[0].DocID, docs[45].DocID, docs[0].DocID, "no such document"})
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.Equal(t, docs[45].Title, got[docs[45].DocID].Title)
		require.Equal(t, docs[45].Summary, got[docs[45].DocID].Summary)
		require.Equal(t, adapter.DocumentID(docs[0].DocID), got[docs[0].DocID].ID)
	})

	t.Run("re-ingest is idempotent", func(t *testing.T) {
		rep, err := a.Ingest(ctx, slices.Values(docs), adapter.IngestOptions{Refresh: true})
		require.NoError(t, err)
		require.Equal(t, adapter.IngestReport{Updated: 50}, rep)
		total, err := count(t, esURL(t), index)
		require.NoError(t, err)
		require.Equal(t, 50, total)
	})

	t.Run("bad documents are reported, good ones written", func(t *testing.T) {
		bad := []adapter.Doc{{DocID: "", Title: "x", Text: "y"}, docs[0]}
		rep, err := a.Ingest(ctx, slices.Values(bad), adapter.IngestOptions{Refresh: true})
		require.NoError(t, err)
		require.Equal(t, 1, rep.Updated)
		require.Len(t, rep.Failed, 1)
		require.Equal(t, 2, rep.Total())
	})

	t.Run("mark seen", func(t *testing.T) {
		ids := []string{docs[20].DocID, docs[21].DocID, docs[0].DocID, "no such document"}
		rep, err := a.MarkSeen(ctx, ids)
		require.NoError(t, err)
		require.Equal(t, 2, rep.Marked)
		require.Equal(t, 1, rep.Unchanged)
		require.Equal(t, []string{"no such document"}, rep.Missing)
		n, err := a.SeenCount(ctx)
		require.NoError(t, err)
		require.Equal(t, 22, n)
		hits, err := a.SearchNew(ctx, docs[20].Title, 10)
		require.NoError(t, err)
		require.NotContains(t, docIDs(hits), docs[20].DocID)
	})
}

func TestIntegrationBadMapping(t *testing.T) {
	a, index := newIndex(t)
	u := esURL(t)
	// An index someone created by hand: seen is a keyword, title.keyword is missing, summary is absent.
	body := `{"mappings":{"properties":{"docid":{"type":"keyword"},"title":{"type":"text"},"text":{"type":"text"},` +
		`"seen":{"type":"keyword"},"ingested_at":{"type":"date"}}}}`
	req, err := http.NewRequest(http.MethodPut, u+"/"+index, bytes.NewBufferString(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	res, err := plain.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	err = a.EnsureIndex(t.Context())
	require.ErrorIs(t, err, adapter.ErrMappingMismatch)
	for _, want := range []string{`"seen": type is "keyword", want "boolean"`, `"summary": missing`, `"title.keyword": missing`} {
		require.ErrorContains(t, err, want)
	}
	t.Log(err)

	info, err := a.Check(t.Context())
	require.ErrorIs(t, err, adapter.ErrMappingMismatch)
	require.True(t, info.IndexExists)
	require.False(t, info.MappingOK)

	_, err = a.Ingest(t.Context(), slices.Values(corpus(t, 1)), adapter.IngestOptions{})
	require.ErrorIs(t, err, adapter.ErrMappingMismatch)
}

func TestIntegrationUnavailable(t *testing.T) {
	esURL(t)
	// A port nothing listens on: connection refused, retried, then ErrUnavailable.
	a, err := adapter.New(adapter.Options{Addresses: []string{"http://127.0.0.1:1"}, MaxRetries: 1}, nil)
	require.NoError(t, err)
	defer a.Close()
	_, err = a.Check(t.Context())
	require.ErrorIs(t, err, adapter.ErrUnavailable)
}

func count(t *testing.T, url, index string) (int, error) {
	t.Helper()
	res, err := plain.Get(url + "/" + index + "/_count")
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	var v struct {
		Count int `json:"count"`
	}
	err = json.NewDecoder(res.Body).Decode(&v)
	return v.Count, err
}

func docDocIDs(docs []adapter.Doc) []string {
	out := make([]string, len(docs))
	for i, d := range docs {
		out[i] = d.DocID
	}
	return out
}

// TestEnsureIndexShards: an index the sidecar creates has Options.Shards primary shards (one by default); an
// existing index is taken as it is.
func TestEnsureIndexShards(t *testing.T) {
	_, index := newIndex(t)
	shards := func() string {
		t.Helper()
		s := esDo(t, http.MethodGet, "/"+index+"/_settings/index.number_of_shards", "")
		return s[index].(map[string]any)["settings"].(map[string]any)["index"].(map[string]any)["number_of_shards"].(string)
	}
	a, err := adapter.New(adapter.Options{Addresses: []string{esURL(t)}, Index: index, Shards: 3}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	require.NoError(t, a.EnsureIndex(t.Context()))
	require.Equal(t, "3", shards())
	b, err := adapter.New(adapter.Options{Addresses: []string{esURL(t)}, Index: index}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.NoError(t, b.EnsureIndex(t.Context()), "an existing index keeps its shards")
	require.Equal(t, "3", shards())
}
