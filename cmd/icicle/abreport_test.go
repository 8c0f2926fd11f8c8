package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/config"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/internal/abtest"
	"github.com/icicle-search/sidecar/plugin"
	"github.com/icicle-search/sidecar/rank"
	"github.com/icicle-search/sidecar/retrieve"
)

// writeInterleavedLog writes n interleaved impressions over a rotated and a current file, in the sidecar's
// format; query q%d's relevant document is "rel", placed by team B in every answer but each fourth.
func writeInterleavedLog(t *testing.T, dir string, n int) (string, string) {
	t.Helper()
	var rotated, current, qrels bytes.Buffer
	qrels.WriteString("qid\tdocid\trelevance\n")
	for i := range n {
		relTeam, other := "B", "A"
		if i%4 == 3 {
			relTeam, other = "A", "B"
		}
		line := fmt.Sprintf(`{"ts":"2026-01-01T00:00:00Z","impression_id":"%032x","request_id":"q%d#1","experiment":"icicle","arm":"interleaved","mode":"reranked","shown":[`+
			`{"rank":1,"docid":"x%d","provenance":"bm25","team":"%s"},{"rank":2,"docid":"rel","provenance":"copy","team":"%s"}]}`+"\n", i, i, i, other, relTeam)
		if i < n/2 {
			rotated.WriteString(line)
		} else {
			current.WriteString(line)
		}
		fmt.Fprintf(&qrels, "q%d\trel\t1\n", i)
	}
	current.WriteString("{torn")
	imp := filepath.Join(dir, "impressions.jsonl")
	require.NoError(t, os.WriteFile(imp+".20260101T000000.000000000Z", rotated.Bytes(), 0o644))
	require.NoError(t, os.WriteFile(imp, current.Bytes(), 0o644))
	qr := filepath.Join(dir, "qrels.tsv")
	require.NoError(t, os.WriteFile(qr, qrels.Bytes(), 0o644))
	return imp, qr
}

func TestABReportSimulatedClicks(t *testing.T) {
	dir := t.TempDir()
	imp, qrels := writeInterleavedLog(t, dir, 200)
	clicks := filepath.Join(dir, "clicks.jsonl")
	var md bytes.Buffer
	require.NoError(t, abReport([]string{"-impressions", imp + "*", "-simulate-clicks-from", qrels, "-seed", "3",
		"-click-noise", "0.05", "-write-clicks", clicks}, &md))
	out := md.String()
	require.Contains(t, out, "Arm B wins")
	require.Contains(t, out, "The qrels favour arm B; the report names B: it agrees.")
	require.Contains(t, out, "Skipped 1 unreadable impression lines")

	// The written clicks are a click log: reading them back gives the same verdict and statistic.
	var js bytes.Buffer
	require.NoError(t, abReport([]string{"-impressions", imp + "*", "-clicks", clicks, "-json"}, &js))
	var r abtest.Report
	require.NoError(t, json.Unmarshal(js.Bytes(), &r))
	require.Equal(t, 200, r.Impressions["interleaved"])
	require.Equal(t, abtest.ArmB, r.Interleaving.Winner)
	require.Less(t, r.Interleaving.Test.P, 1e-3)
	require.Zero(t, r.Join.Orphans)
	require.Nil(t, r.Simulation)
	require.Equal(t, 1, r.BadImpressions.Count)
}

func TestABReportFlags(t *testing.T) {
	dir := t.TempDir()
	imp, qrels := writeInterleavedLog(t, dir, 4)
	tests := []struct {
		args []string
		want string
	}{
		{nil, "-impressions: required"},
		{[]string{"-impressions", filepath.Join(dir, "nope.jsonl")}, "no such file"},
		{[]string{"-impressions", imp, "-alpha", "1"}, "-alpha"},
		{[]string{"-impressions", imp, "-clicks", imp, "-simulate-clicks-from", qrels}, "give one"},
		{[]string{"-impressions", imp, "-write-clicks", "x"}, "needs -simulate-clicks-from"},
		{[]string{"-impressions", imp, "-simulate-clicks-from", qrels, "-click-noise", "2"}, "-click-noise"},
	}
	for _, tt := range tests {
		err := abReport(tt.args, &bytes.Buffer{})
		require.ErrorContains(t, err, tt.want, "args %q", tt.args)
	}
	// An empty click log is a report without a verdict, not an error.
	empty := filepath.Join(dir, "clicks.jsonl")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	var md bytes.Buffer
	require.NoError(t, abReport([]string{"-impressions", imp, "-clicks", empty}, &md))
	require.True(t, strings.Contains(md.String(), "No impression with a winner yet"), md.String())
}

// fakeSearcher is a fake Elasticsearch for TestABLoopThroughTheSidecar: BM25 over all documents puts each
// query's relevant document ("rel-<qid>") first; BM25 over new documents never has it.
type fakeSearcher struct{ plugin.Searcher }

func (fakeSearcher) SearchAll(_ context.Context, q string, k int) ([]adapter.Hit, error) {
	return fakeHits(append([]string{"rel-" + q}, "n1", "n2", "n3"), k), nil
}

func (fakeSearcher) SearchNew(_ context.Context, _ string, k int) ([]adapter.Hit, error) {
	return fakeHits([]string{"n2", "n4", "n5", "n6"}, k), nil
}

// The first stage over the fake is BM25 alone: no dense searches.
func (fakeSearcher) Dense(context.Context, []float32, []adapter.DenseQuery) ([][]adapter.Hit, error) {
	return nil, errors.New("no encoder")
}

func (f fakeSearcher) SearchLean(ctx context.Context, q string, k int, onlyNew bool) ([]adapter.Hit, error) {
	if onlyNew {
		return f.SearchNew(ctx, q, k)
	}
	return f.SearchAll(ctx, q, k)
}

func (fakeSearcher) Sources(context.Context, []adapter.Hit) error { return nil }

func fakeHits(ids []string, k int) []adapter.Hit {
	var out []adapter.Hit
	for i, d := range ids[:min(k, len(ids))] {
		out = append(out, adapter.Hit{ID: d, DocID: d, Title: d, Summary: d, Score: float64(10 - i), Rank: i + 1})
	}
	return out
}

// fakeReranker copies the new-document candidates in their order, so arm B (policy model) is a ranking of
// new documents alone, which never holds the relevant document.
type fakeReranker struct{}

func (fakeReranker) Rank(_ context.Context, _ string, cands []inference.Candidate, _ inference.Options) (inference.Result, error) {
	res := inference.Result{PCopy: 1, InContext: len(cands)}
	for i, c := range cands {
		res.Beams = append(res.Beams, inference.Beam{DocID: c.Title, Route: inference.RouteCopy, Score: -float64(i + 1)})
	}
	return res, nil
}

// TestABLoopThroughTheSidecar runs the loop through the real handlers and logs (fakes stand in for
// Elasticsearch and the model): ab-simulate sends labelled queries (request ids q<i>#1, q<i>#2), and
// posts clicks drawn from the qrels to /v1/click; ab-report on the sidecar's own logs names arm A, which the
// fakes make the only arm that ever shows a relevant document (arm B ranks new documents only).
func TestABLoopThroughTheSidecar(t *testing.T) {
	dir := t.TempDir()
	var queries, qrels bytes.Buffer
	qrels.WriteString("qid\tdocid\trelevance\n")
	for i := range 30 {
		// The fake searcher answers with "rel-<query text>", so the query text is the query id.
		fmt.Fprintf(&queries, `{"qid": "q%d", "query": "q%d", "split": "dev"}`+"\n", i, i)
		fmt.Fprintf(&qrels, "q%d\trel-q%d\t1\n", i, i)
	}
	qPath, rPath := filepath.Join(dir, "queries.jsonl"), filepath.Join(dir, "qrels.tsv")
	require.NoError(t, os.WriteFile(qPath, queries.Bytes(), 0o644))
	require.NoError(t, os.WriteFile(rPath, qrels.Bytes(), 0o644))
	modelDir := filepath.Join(dir, "model")
	require.NoError(t, os.MkdirAll(modelDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(modelDir, "seen_docids.txt"), []byte("seen-doc\n"), 0o644))

	impPath, clickPath := filepath.Join(dir, "impressions.jsonl"), filepath.Join(dir, "clicks.jsonl")
	imps, err := abtest.OpenImpressionLog(impPath, abtest.LogOptions{})
	require.NoError(t, err)
	clicks, err := abtest.OpenClickLog(clickPath, abtest.LogOptions{})
	require.NoError(t, err)
	const token = "loop-write-token-0123456789"
	cfg := config.Default()
	cfg.Server.RequestTimeout, cfg.Server.ESBudgetFraction, cfg.Decode.MaxCandidates, cfg.Decode.BeamWidth = 5*time.Second, 0.3, 100, 4
	cfg.Concurrency.MaxInflight, cfg.Experimental.MinTopScore, cfg.Policy.Mode = 2, -1e9, config.PolicyModel
	bm25 := retrieve.DefaultParams
	bm25.Method = retrieve.MethodBM25
	first, err := retrieve.New(fakeSearcher{}, nil, bm25, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	reader := rank.Fixed{Reader: rank.NewICICLE(fakeReranker{}, inference.Options{BeamWidth: 4}, false), N: "fake"}
	reg := prometheus.NewRegistry()
	pipe, err := newPipeline(cfg, first, fakeSearcher{}, reader, rank.NewMetrics(reg), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	srv := plugin.New(fakeSearcher{}, pipe, nil, plugin.Options{MaxBodyBytes: 1 << 20, RequestTimeout: 5 * time.Second,
		MaxQueryChars: 100, MaxHits: 100, AB: plugin.ABOptions{Enabled: true, Mode: abtest.ModeInterleave},
		Impressions: imps, Clicks: clicks, WriteToken: token, Registry: reg})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()

	var out bytes.Buffer
	require.NoError(t, abSimulate(t.Context(), []string{"-sidecar", hs.URL, "-queries", qPath, "-qrels", rPath, "-n", "30",
		"-model-dir", modelDir, "-write-token", token, "-repeat", "2", "-size", "4", "-seed", "5"}, &out))
	require.Contains(t, out.String(), "30 queries x 2 repeats")
	require.Contains(t, out.String(), "The labels favour arm A.")
	hs.Close()
	require.NoError(t, imps.Close())
	require.NoError(t, clicks.Close())

	var js bytes.Buffer
	require.NoError(t, abReport([]string{"-impressions", impPath, "-clicks", clickPath, "-json"}, &js))
	var r abtest.Report
	require.NoError(t, json.Unmarshal(js.Bytes(), &r))
	require.Equal(t, map[abtest.Arm]int{abtest.ArmInterleaved: 60}, r.Impressions)
	require.Contains(t, out.String(), fmt.Sprintf("%d posted to /v1/click, 0 failed", r.Join.Clicks), "every posted click is in the log")
	require.Greater(t, r.Join.Clicks, 30, "the relevant document is at rank 1 (always examined) or 2 in every answer")
	require.Equal(t, r.Join.Clicks, r.Join.Joined)
	require.Equal(t, abtest.ArmA, r.Interleaving.Winner)
	require.Equal(t, 0, r.Interleaving.WinsB)

	// ab-simulate refuses to run without the write token.
	err = abSimulate(t.Context(), []string{"-sidecar", hs.URL, "-queries", qPath, "-qrels", rPath, "-model-dir", modelDir}, &out)
	require.ErrorContains(t, err, "-write-token")
}
