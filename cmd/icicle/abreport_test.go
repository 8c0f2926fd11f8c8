package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/internal/abtest"
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
	require.Equal(t, "B", r.Interleaving.Winner)
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
