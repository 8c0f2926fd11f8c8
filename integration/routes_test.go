//go:build integration && ort && tokenizers

package integration

import (
	"bufio"
	"compress/gzip"
	"encoding/csv"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/plugin"
)

// routeFloor is the least share of never-trained NQ dev queries the default model must answer at rank 1
// through the right route (copy for a document it has not seen, parametric for one it has). Each floor sits
// well under what models/small measured on this test's corpus (the comment says what), and well above what
// a model that ignores its context scores (the tiny fixture: 0.0-0.1), so the test fails for a model that
// does not route or read. Measured with: go test -tags "integration ort tokenizers" -run TestRoutes -v.
var routeFloor = map[string]float64{
	"copy":       0.5, // models/small: see the log line "copy route"
	"parametric": 0.2, // models/small: see the log line "parametric route"
}

// labelledQuery is an NQ query with its one relevant document.
type labelledQuery struct{ query, docid string }

// devQueries reads the NQ dev queries of data/nq_qed with their relevant document (never trained on: the
// training split takes NQ train queries only).
func devQueries(t *testing.T) []labelledQuery {
	t.Helper()
	dir := filepath.Join("..", "data", "nq_qed")
	qf, err := os.Open(filepath.Join(dir, "qrels.tsv"))
	require.NoError(t, err)
	defer qf.Close()
	rd := csv.NewReader(qf)
	rd.Comma = '\t'
	rd.FieldsPerRecord = 3
	rel := map[string]string{}
	for {
		rec, err := rd.Read()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if rec[2] != "0" {
			rel[rec[0]] = rec[1]
		}
	}
	f, err := os.Open(filepath.Join(dir, "queries.jsonl.gz"))
	require.NoError(t, err)
	defer f.Close()
	gz, err := gzip.NewReader(f)
	require.NoError(t, err)
	sc := bufio.NewScanner(gz)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var out []labelledQuery
	for sc.Scan() {
		var q struct{ QID, Query, Split string }
		require.NoError(t, json.Unmarshal(sc.Bytes(), &q))
		if d, ok := rel[q.QID]; ok && q.Split == "dev" {
			out = append(out, labelledQuery{q.Query, d})
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// TestRoutes: through /v1/search on the real node, dev queries about documents the model never saw come back
// at rank 1 through the copy route, and queries about seen documents through the parametric route, resolved
// to the stored document. Needs a model that reads its context: it runs on the default model (models/small)
// and skips on the tiny fixture.
func TestRoutes(t *testing.T) {
	s := newStack(t, 1000)
	if s.config == "tiny" {
		t.Skip("the tiny fixture does not read its context (docs/evaluation.md); run with models/small")
	}
	inIndex := map[string]bool{}
	for _, d := range s.ingested {
		inIndex[d] = true
	}
	seen := map[string]bool{}
	for _, d := range s.seen {
		seen[d] = true
	}
	const perRoute = 40
	var got = map[string][2]int{} // route -> {right at rank 1, asked}
	for _, q := range devQueries(t) {
		if !inIndex[q.docid] {
			continue
		}
		route := "copy"
		if seen[q.docid] {
			route = "parametric"
		}
		c := got[route]
		if c[1] >= perRoute {
			continue
		}
		code, resp := s.post(t, "/v1/search", plugin.SearchRequest{Query: q.query, Size: 10})
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, plugin.ModeReranked, resp.Mode, resp.FallbackReason)
		c[1]++
		if top := resp.Results[0]; top.DocID == q.docid && string(top.Provenance) == route {
			c[0]++
			require.True(t, top.Resolved, "rank 1 %q resolves to its stored document", top.DocID)
		}
		got[route] = c
	}
	for route, floor := range routeFloor {
		c := got[route]
		require.Equal(t, perRoute, c[1], "%s: not enough dev queries of indexed documents", route)
		share := float64(c[0]) / float64(c[1])
		t.Logf("%s route: %d/%d dev queries answered at rank 1 through it (%.2f, floor %.2f)", route, c[0], c[1], share, floor)
		require.GreaterOrEqual(t, share, floor, "%s route", route)
	}
}
