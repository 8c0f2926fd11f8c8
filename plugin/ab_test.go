package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/internal/abtest"
)

// allHits is arm A's ranking over all documents: a seen document first, then Alpha (shared with the new
// documents' BM25), then two more.
func allHits() []adapter.Hit {
	return []adapter.Hit{
		{ID: "s", DocID: "Seen Doc", Title: "Seen Doc", Score: 9, Rank: 1},
		{ID: "1", DocID: "Alpha", Title: "Alpha", Summary: "a", Score: 8, Rank: 2},
		{ID: "o1", DocID: "Old One", Title: "Old One", Score: 7, Rank: 3},
		{ID: "o2", DocID: "Old Two", Title: "Old Two", Score: 6, Rank: 4},
	}
}

// abSearcher counts the calls of each search.
func abSearcher(newCalls, allCalls *atomic.Int64) *fakeSearcher {
	return &fakeSearcher{
		searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { newCalls.Add(1); return threeHits(), nil },
		searchAll: func(_ context.Context, _ string, k int) ([]adapter.Hit, error) {
			allCalls.Add(1)
			return allHits()[:min(k, 4)], nil
		},
	}
}

// search posts to /v1/search with the key header (none when key is "") and a fixed request id (a random
// one when rid is "").
func search(t *testing.T, s *Server, key, rid, body string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/search", strings.NewReader(body))
	if key != "" {
		req.Header.Set("X-ICICLE-AB-Key", key)
	}
	if rid != "" {
		req.Header.Set("X-Request-ID", rid)
	}
	s.Handler().ServeHTTP(rec, req)
	var out map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
	return rec.Code, out
}

func results(body map[string]any) []map[string]any {
	var out []map[string]any
	for _, r := range body["results"].([]any) {
		out = append(out, r.(map[string]any))
	}
	return out
}

func TestSearchSplit(t *testing.T) {
	var newCalls, allCalls, modelCalls atomic.Int64
	model := &fakeReranker{rank: func(ctx context.Context, q string, c []inference.Candidate) (inference.Result, error) {
		modelCalls.Add(1)
		return copyBeta(ctx, q, c)
	}}
	split := func(share float64) *Server {
		return newTestServer(t, abSearcher(&newCalls, &allCalls), model, func(o *testOptions) {
			o.AB = ABOptions{Enabled: true, Mode: abtest.ModeSplit, SplitB: share}
		})
	}

	t.Run("arm A is BM25 over all documents, without the model", func(t *testing.T) {
		newCalls.Store(0)
		allCalls.Store(0)
		modelCalls.Store(0)
		code, body := search(t, split(0), "user-1", "", `{"query":"q","size":3}`)
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, map[string]any{"arm": "A", "experiment": "icicle", "key_source": "header"}, body["ab"])
		require.Equal(t, "bm25", body["mode"])
		require.NotContains(t, body, "model")
		var got []string
		for _, r := range results(body) {
			got = append(got, r["docid"].(string))
			require.Equal(t, "bm25", r["provenance"])
			require.NotContains(t, r, "team")
		}
		require.Equal(t, []string{"Seen Doc", "Alpha", "Old One"}, got)
		require.EqualValues(t, 1, allCalls.Load())
		require.Zero(t, newCalls.Load())
		require.Zero(t, modelCalls.Load())
	})
	t.Run("arm B is the ICICLE answer", func(t *testing.T) {
		allCalls.Store(0)
		code, body := search(t, split(1), "user-1", "", `{"query":"q"}`)
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, "B", body["ab"].(map[string]any)["arm"])
		require.Equal(t, "reranked", body["mode"])
		require.Equal(t, "copy", results(body)[0]["provenance"])
		require.EqualValues(t, 1, allCalls.Load(), "arm B's baseline is BM25 over all documents")
	})
	t.Run("the same key gets the same arm, whatever the request id", func(t *testing.T) {
		s := split(0.5)
		arms := map[string]map[any]bool{}
		for i := range 40 {
			key := fmt.Sprintf("user-%d", i%4)
			_, body := search(t, s, key, "", `{"query":"q"}`)
			if arms[key] == nil {
				arms[key] = map[any]bool{}
			}
			arms[key][body["ab"].(map[string]any)["arm"]] = true
		}
		for key, seen := range arms {
			require.Len(t, seen, 1, "key %s got arms %v", key, seen)
		}
	})
	t.Run("without a key the request id assigns", func(t *testing.T) {
		s := split(0.5)
		_, first := search(t, s, "", "req-fixed", `{"query":"q"}`)
		require.Equal(t, "request_id", first["ab"].(map[string]any)["key_source"])
		for range 5 {
			_, again := search(t, s, "", "req-fixed", `{"query":"q"}`)
			require.Equal(t, first["ab"], again["ab"])
		}
		seen := map[any]bool{}
		for range 40 {
			_, body := search(t, s, "", "", `{"query":"q"}`)
			seen[body["ab"].(map[string]any)["arm"]] = true
		}
		require.Len(t, seen, 2, "random request ids reach both arms")
	})
	t.Run("off: no ab section", func(t *testing.T) {
		s := newTestServer(t, abSearcher(&newCalls, &allCalls), model, nil)
		_, body := search(t, s, "user-1", "", `{"query":"q"}`)
		require.NotContains(t, body, "ab")
		require.Equal(t, "reranked", body["mode"])
	})
	t.Run("metrics count arms", func(t *testing.T) {
		s := split(0)
		search(t, s, "k", "", `{"query":"q"}`)
		search(t, s, "k", "", `{"query":"q"}`)
		require.Contains(t, scrape(t, s), `icicle_ab_requests_total{arm="A"} 2`)
	})
	t.Run("Elasticsearch down in arm A is a 503", func(t *testing.T) {
		es := &fakeSearcher{searchAll: func(context.Context, string, int) ([]adapter.Hit, error) {
			return nil, errors.New("dial tcp: connection refused")
		}}
		s := newTestServer(t, es, model, func(o *testOptions) { o.AB = ABOptions{Enabled: true, SplitB: 0} })
		code, body := search(t, s, "k", "", `{"query":"q"}`)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.NotContains(t, body["error"], "refused")
	})
}

func TestSearchInterleaved(t *testing.T) {
	var newCalls, allCalls atomic.Int64
	s := newTestServer(t, abSearcher(&newCalls, &allCalls), &fakeReranker{rank: copyBeta}, func(o *testOptions) {
		o.AB = ABOptions{Enabled: true, Mode: abtest.ModeInterleave, Experiment: "exp"}
	})
	// Arm A: Seen Doc, Alpha, Old One, Old Two. Arm B (copyBeta): Beta (copy), Seen Doc (parametric).
	render := func(body map[string]any) string {
		var out []string
		for i, r := range results(body) {
			require.EqualValues(t, i+1, r["rank"])
			out = append(out, fmt.Sprintf("%s:%s/%s", r["team"], r["docid"], r["provenance"]))
		}
		return strings.Join(out, " ")
	}
	code, body := search(t, s, "user-7", "req-1", `{"query":"q","size":10}`)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "interleaved", body["ab"].(map[string]any)["arm"])
	require.Equal(t, "reranked", body["mode"], "arm B's mode")
	first := render(body)
	docs := map[string]bool{}
	teams := map[string]int{}
	for _, r := range results(body) {
		require.False(t, docs[r["docid"].(string)], "deduplicated: %s", first)
		docs[r["docid"].(string)] = true
		teams[r["team"].(string)]++
	}
	require.Len(t, docs, 5, "the union of both arms: %s", first)
	require.Positive(t, teams["A"], first)
	require.Positive(t, teams["B"], first)
	for range 5 {
		_, again := search(t, s, "user-7", "req-1", `{"query":"q","size":10}`)
		require.Equal(t, first, render(again), "same key and request id, same interleaving")
	}
	orders := map[string]bool{}
	for i := range 30 {
		_, b := search(t, s, "user-7", fmt.Sprintf("req-%d", i), `{"query":"q","size":10}`)
		orders[render(b)] = true
	}
	require.Greater(t, len(orders), 1, "the coin changes with the request")

	_, small := search(t, s, "user-7", "req-1", `{"query":"q","size":2}`)
	require.Len(t, results(small), 2)
	m := scrape(t, s)
	require.Contains(t, m, `icicle_ab_requests_total{arm="interleaved"}`)
	require.Contains(t, m, `icicle_ab_interleaved_results_total{team="A"}`)
	require.Contains(t, m, `icicle_ab_interleaved_results_total{team="B"}`)
}

func TestSearchImpressions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "impressions.jsonl")
	l, err := abtest.OpenImpressionLog(path, abtest.LogOptions{})
	require.NoError(t, err)
	var newCalls, allCalls atomic.Int64
	s := newTestServer(t, abSearcher(&newCalls, &allCalls), &fakeReranker{rank: copyBeta}, func(o *testOptions) {
		o.AB = ABOptions{Enabled: true, Mode: abtest.ModeInterleave}
		o.Impressions = l
	})
	_, body := search(t, s, "alice@example.com", "", `{"query":"who sang","size":4}`)
	off := newTestServer(t, abSearcher(&newCalls, &allCalls), &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.Impressions = l })
	_, plain := search(t, off, "", "", `{"query":"who sang","size":1}`)
	code, _ := search(t, off, "", "", `{"query":""}`)
	require.Equal(t, http.StatusBadRequest, code)
	require.NoError(t, l.Close())

	raw, err := readFile(path)
	require.NoError(t, err)
	require.NotContains(t, raw, "alice", "the key is hashed")
	require.NotContains(t, raw, "who sang", "no query text")
	got := readImpressions(t, path)
	require.Len(t, got, 2, "one line per answer; errors are not impressions")

	imp := got[0]
	require.Equal(t, body["request_id"], imp.RequestID)
	require.Equal(t, abtest.ArmInterleaved, imp.Arm)
	require.Equal(t, "icicle", imp.Experiment)
	require.Equal(t, "header", imp.KeySource)
	require.Equal(t, abtest.Experiment{Name: "icicle"}.Assign("alice@example.com", "").KeyHash(), imp.KeyHash)
	require.Equal(t, ModeReranked, imp.Mode)
	require.Equal(t, "fake", imp.Model)
	require.Len(t, imp.Shown, len(results(body)))
	for i, r := range results(body) {
		require.Equal(t, abtest.Shown{Rank: i + 1, DocID: r["docid"].(string), ID: r["id"].(string),
			Provenance: Provenance(r["provenance"].(string)), Team: abtest.Team(r["team"].(string))}, imp.Shown[i])
	}

	require.Equal(t, plain["request_id"], got[1].RequestID)
	require.Empty(t, got[1].Arm, "experiment off")
	require.Empty(t, got[1].KeyHash)
	require.Len(t, got[1].Shown, 1)
	require.Contains(t, scrape(t, s), `icicle_impressions_written_total 2`)
	require.Contains(t, scrape(t, s), `icicle_impressions_dropped_total{reason="closed"} 0`)
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

// readImpressions reads the impression log at path as ab-report does (abtest.ReadJSONL), every line whole.
func readImpressions(t *testing.T, path string) []abtest.Impression {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []abtest.Impression
	var bad abtest.BadLines
	require.NoError(t, abtest.ReadJSONL(f, path, func(imp abtest.Impression) { out = append(out, imp) }, &bad))
	require.Zero(t, bad.Count, bad.First)
	return out
}
