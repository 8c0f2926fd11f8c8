//go:build integration && ort && tokenizers

package integration

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/internal/dataset"
	"github.com/icicle-search/sidecar/internal/testenv"
	"github.com/icicle-search/sidecar/plugin"
)

// routeFloor is the least share of never-trained NQ dev queries (40 per route) the model must answer at
// rank 1 through the right route: copy for a document it has not seen, parametric for one it has. These are
// floors of "the route works end to end on real queries", not quality targets: models/small measured 7/40
// (copy) and 2/40 (parametric) on this corpus when this was written, 15/40 and 7/40 later (the index's
// 1,000 new documents, BM25 as the baseline), the tiny fixture 1/40 and 0/8, BM25 far more (docs/research). Measured with: go test -tags "integration ort tokenizers" -run TestRoutes -v
// (ICICLE_ROUTES_ON_TINY=1 runs it on the tiny fixture too).
var routeFloor = map[string]float64{
	"copy":       0.1,
	"parametric": 0.025,
}

// labelledQuery is an NQ query with its one relevant document.
type labelledQuery struct{ query, docid string }

// devQueries reads the NQ dev queries of data/nq_qed with their relevant document (never trained on: the
// training split takes NQ train queries only).
func devQueries(t *testing.T) []labelledQuery {
	t.Helper()
	dir := filepath.Join("..", "data", "nq_qed")
	raw, err := os.ReadFile(filepath.Join(dir, "qrels.tsv"))
	require.NoError(t, err)
	rel := map[string]string{}
	for i, line := range strings.Split(strings.TrimSpace(string(raw)), "\n")[1:] { // header qid, docid, relevance
		f := strings.Split(line, "\t")
		require.Len(t, f, 3, "qrels.tsv line %d", i+2)
		if f[2] != "0" {
			rel[f[0]] = f[1]
		}
	}
	queries, err := dataset.ReadJSONL[struct{ QID, Query, Split string }](filepath.Join(dir, "queries.jsonl.gz"), 0)
	require.NoError(t, err)
	var out []labelledQuery
	for _, q := range queries {
		if d, ok := rel[q.QID]; ok && q.Split == "dev" {
			out = append(out, labelledQuery{q.Query, d})
		}
	}
	return out
}

// TestRoutes: through /v1/search on the real node, dev queries about documents the model never saw come back
// at rank 1 through the copy route, and queries about seen documents through the parametric route, resolved
// to the stored document. Needs a model that reads its context: it runs on models/small (both routes; the shipped default
// models/reader135 has no memory route)
// and skips on the tiny fixture.
func TestRoutes(t *testing.T) {
	s := newStack(t, 1000)
	if s.config == "tiny" && os.Getenv("ICICLE_ROUTES_ON_TINY") == "" {
		testenv.Missing(t, "the tiny fixture does not read its context (docs/research); run with models/small")
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
	type asked struct {
		q   labelledQuery
		top plugin.Result
	}
	var all []asked
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
		all = append(all, asked{q, resp.Results[0]})
		if top := resp.Results[0]; top.DocID == q.docid && string(top.Provenance) == route {
			c[0]++
			require.True(t, top.Resolved, "rank 1 %q resolves to its stored document", top.DocID)
		}
		got[route] = c
	}
	for _, route := range []string{"copy", "parametric"} {
		c := got[route]
		t.Logf("%s route: %d/%d dev queries answered at rank 1 through it (%.3f, floor %.2f)", route, c[0], c[1], float64(c[0])/float64(max(1, c[1])), routeFloor[route])
	}
	for _, route := range []string{"copy", "parametric"} {
		c := got[route]
		require.Equal(t, perRoute, c[1], "%s: not enough dev queries of indexed documents", route)
		require.GreaterOrEqual(t, float64(c[0])/float64(c[1]), routeFloor[route], "%s route", route)
	}

	// The same queries with experimental.route_by_first_stage: of the model's best answer from each route, the one
	// BM25 over the whole index ranks higher comes first, and the response says rerouted exactly where that
	// changed the router's first (the engine is deterministic, so the beams are the ones above).
	routed := s.withOptions(t, func(o *sidecarOptions) { o.RouteByFirstStage = true })
	rank := func(r plugin.Result) int {
		if r.FirstStageRank == nil {
			return 1 << 30
		}
		return *r.FirstStageRank
	}
	rerouted, right, alone := 0, 0, 0
	for _, a := range all {
		if a.top.DocID == a.q.docid {
			alone++
		}
		code, resp := postTo(t, routed, "/v1/search", plugin.SearchRequest{Query: a.q.query, Size: 10})
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, plugin.ModeReranked, resp.Mode, resp.FallbackReason)
		top := resp.Results[0]
		require.Equal(t, resp.Rerouted, top.DocID != a.top.DocID, "%q: rerouted says whether the first changed (%q, router alone %q)", a.q.query, top.DocID, a.top.DocID)
		if resp.Rerouted {
			rerouted++
			require.NotEqual(t, a.top.Provenance, top.Provenance, "%q: rerouting puts the other route's answer first", a.q.query)
		}
		for _, r := range resp.Results[1:] {
			if r.Provenance != top.Provenance {
				require.LessOrEqual(t, rank(top), rank(r), "%q: the first, %q, is the route the first stage ranks higher (the other's best %q)", a.q.query, top.DocID, r.DocID)
				break
			}
		}
		if top.DocID == a.q.docid {
			right++
		}
	}
	t.Logf("route_by_first_stage: %d of %d answers rerouted; %d right at rank 1 (the router alone: %d)", rerouted, len(all), right, alone)
}
