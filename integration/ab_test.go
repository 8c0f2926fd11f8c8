//go:build integration && ort && tokenizers

package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/internal/abtest"
	"github.com/icicle-search/sidecar/plugin"
)

// TestABLoop closes the A/B loop on the real node and the real model (issue 14, item 6): interleaved
// /v1/search answers are logged with their own impression ids even when a request id is reused, clicks
// drawn from the dev qrels go through POST /v1/click with the write token, and ab-report's join of the two
// logs credits every click and names the arm that the labels favour.
func TestABLoop(t *testing.T) {
	s := newStack(t, 300)
	dir := t.TempDir()
	impPath, clickPath := filepath.Join(dir, "impressions.jsonl"), filepath.Join(dir, "clicks.jsonl")
	imps, err := abtest.OpenImpressionLog(impPath, abtest.LogOptions{})
	require.NoError(t, err)
	clicks, err := abtest.OpenClickLog(clickPath, abtest.LogOptions{})
	require.NoError(t, err)
	const token = "integration-write-token-0123"
	srv := newSidecar(s.es, s.engine, sidecarOptions{MaxBodyBytes: 4 << 20, RequestTimeout: 30 * time.Second,
		ESBudgetFraction: 0.3, MaxQueryChars: 1024, MaxHits: 1000, MaxCandidates: 100, Decode: inference.Options{BeamWidth: 10},
		MaxInflight: 1, QueueSize: 4, MinTopScore: -1e9, AB: plugin.ABOptions{Enabled: true, Mode: abtest.ModeInterleave},
		Impressions: imps, Clicks: clicks, WriteToken: token})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()

	inIndex := map[string]bool{}
	for _, d := range s.ingested {
		inIndex[d] = true
	}
	qrels := map[string]map[string]bool{}
	var answers []abtest.Impression
	for i, q := range devQueries(t) {
		if len(qrels) == 40 {
			break
		}
		if !inIndex[q.docid] {
			continue
		}
		qid := fmt.Sprintf("q%d", i)
		qrels[qid] = map[string]bool{q.docid: true}
		var ids []string
		for range 2 { // the same request id twice: two impressions
			imp := searchLogged(t, hs.URL, qid, q.query)
			require.Equal(t, qid, imp.RequestID)
			ids = append(ids, imp.ImpressionID)
			answers = append(answers, imp)
		}
		require.NotEqual(t, ids[0], ids[1], "a reused request id gets a new impression id")
	}
	require.Len(t, qrels, 40)

	drawn, oracle := abtest.Simulate(answers, qrels, abtest.ClickModel{Seed: 1})
	require.NotEmpty(t, drawn)
	for _, c := range drawn {
		body, _ := json.Marshal(map[string]any{"impression_id": c.ImpressionID, "docid": c.DocID, "position": c.Position})
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, hs.URL+"/v1/click", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusAccepted, res.StatusCode)
	}
	hs.Close()
	require.NoError(t, imps.Close())
	require.NoError(t, clicks.Close())

	var logged []abtest.Impression
	var got []abtest.Click
	var bad abtest.BadLines
	readLog := func(path string, add func(*os.File)) {
		f, err := os.Open(path)
		require.NoError(t, err)
		defer f.Close()
		add(f)
	}
	readLog(impPath, func(f *os.File) {
		require.NoError(t, abtest.ReadJSONL(f, impPath, func(i abtest.Impression) { logged = append(logged, i) }, &bad))
	})
	readLog(clickPath, func(f *os.File) {
		require.NoError(t, abtest.ReadJSONL(f, clickPath, func(c abtest.Click) { got = append(got, c) }, &bad))
	})
	require.Zero(t, bad.Count)
	require.Len(t, logged, 80)
	r := abtest.Analyse(logged, got, abtest.Options{})
	require.Equal(t, abtest.JoinCounts{Clicks: len(drawn), Joined: len(drawn)}, r.Join, "every click is credited to its impression")
	it := r.Interleaving
	t.Logf("labels: first relevant result by team A in %d answers, B in %d, none in %d; ab-report: wins A %d, B %d, ties %d, p %.3g",
		oracle.FirstRelevantA, oracle.FirstRelevantB, oracle.FirstRelevantNone, it.WinsA, it.WinsB, it.Ties, it.Test.P)
	require.NotEmpty(t, oracle.Favoured)
	require.Equal(t, oracle.Favoured, it.Winner, "ab-report names the arm the qrels favour")
}

// searchLogged posts one query with X-Request-ID rid and returns the answer as ab-report reads it.
func searchLogged(t *testing.T, base, rid, query string) abtest.Impression {
	t.Helper()
	body, _ := json.Marshal(plugin.SearchRequest{Query: query, Size: 10})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/search", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-Request-ID", rid)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	var out plugin.Response
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	require.Equal(t, out.ImpressionID, res.Header.Get("X-ICICLE-Impression-ID"))
	require.NotNil(t, out.AB)
	imp := abtest.Impression{ImpressionID: out.ImpressionID, RequestID: out.RequestID, Arm: out.AB.Arm, Mode: out.Mode}
	for _, r := range out.Results {
		imp.Shown = append(imp.Shown, abtest.Shown{Rank: r.Rank, DocID: r.DocID, Team: abtest.Team(r.Team)})
	}
	return imp
}
