package plugin

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/inference"
)

func TestRouteByFirstStage(t *testing.T) {
	base := []adapter.Hit{{DocID: "Seen A"}, {DocID: "New B"}, {DocID: "New C"}, {DocID: "Seen D"}}
	cp := func(d string) inference.Beam { return inference.Beam{DocID: d, Route: inference.RouteCopy} }
	mem := func(d string) inference.Beam {
		return inference.Beam{DocID: d, Route: inference.RouteParametric, Candidate: -1}
	}
	tests := []struct {
		name    string
		beams   []inference.Beam
		want    []string
		changed bool
	}{
		{"the memory's answer ranked above the copy's goes first, the rest in order",
			[]inference.Beam{cp("New B"), cp("New C"), mem("Seen A"), mem("Seen D")}, []string{"Seen A", "New B", "New C", "Seen D"}, true},
		{"the copy's answer ranked above the memory's goes first",
			[]inference.Beam{mem("Seen D"), cp("New C"), cp("New B")}, []string{"New C", "Seen D", "New B"}, true},
		{"only the best of the other route counts: a lower one ranked higher does not",
			[]inference.Beam{cp("New C"), mem("Seen D"), mem("Seen A")}, []string{"New C", "Seen D", "Seen A"}, false},
		{"the router's choice ranked higher stands", []inference.Beam{cp("New B"), mem("Seen D")}, []string{"New B", "Seen D"}, false},
		{"an answer the first stage does not hold loses to one it does",
			[]inference.Beam{mem("Nowhere"), cp("New C")}, []string{"New C", "Nowhere"}, true},
		{"neither held: the router's order stands", []inference.Beam{mem("Nowhere"), cp("Elsewhere")}, []string{"Nowhere", "Elsewhere"}, false},
		{"one route only: unchanged", []inference.Beam{cp("New C"), cp("New B")}, []string{"New C", "New B"}, false},
		{"one beam: unchanged", []inference.Beam{cp("New C")}, []string{"New C"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]inference.Beam(nil), tt.beams...)
			out, changed := routeByFirstStage(in, base)
			var got []string
			for _, b := range out {
				got = append(got, b.DocID)
			}
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.changed, changed)
			require.Equal(t, tt.beams, in, "the caller's beams are not reordered in place")
		})
	}
}

// TestRouteByFirstStageServed: the fake model copies Beta (not in the first stage's list over the whole
// index) and remembers Seen Doc (its first): with experimental.route_by_first_stage the memory's answer leads and
// the response says so, and the engine was asked for each route's best; without it the router's choice does.
func TestRouteByFirstStageServed(t *testing.T) {
	for _, on := range []bool{false, true} {
		var newCalls, allCalls atomic.Int64
		var each []bool // the engine is asked to keep each route's best (inference.Options.EachRoute)
		m := &fakeReranker{rank: copyBeta, options: func(o inference.Options) { each = append(each, o.EachRoute) }}
		s := newTestServer(t, abSearcher(&newCalls, &allCalls), m, func(o *Options) {
			o.Policy, o.RouteByFirstStage = "model", on
		})
		code, body := search(t, s, "", "", `{"query":"q","size":2}`)
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, []bool{on}, each)
		top := results(body)[0]
		if on {
			require.Equal(t, "Seen Doc", top["docid"])
			require.Equal(t, "parametric", top["provenance"])
			require.Equal(t, true, body["rerouted"])
			require.Equal(t, []string{"Seen Doc", "Beta"}, docids(body))
		} else {
			require.Equal(t, []string{"Beta", "Seen Doc"}, docids(body))
			require.NotContains(t, body, "rerouted")
		}
	}
}

// TestMemoryFromFirstStage: with experimental.memory_scope first_stage the model is asked to recall among the
// docids of the first stage's list over the whole index (the seen ones among them are the engine's to pick),
// on /v1/search and on /v1/rerank (the caller's hits); without it, among the whole seen corpus (nil).
func TestMemoryFromFirstStage(t *testing.T) {
	var all []string
	for _, h := range allHits()[:4] {
		all = append(all, h.DocID)
	}
	for _, on := range []bool{false, true} {
		var newCalls, allCalls atomic.Int64
		var scopes [][]string
		m := &fakeReranker{rank: copyBeta, options: func(o inference.Options) { scopes = append(scopes, o.MemoryScope) }}
		s := newTestServer(t, abSearcher(&newCalls, &allCalls), m, func(o *Options) {
			o.Policy, o.MemoryFromFirstStage = "model", on
		})
		code, body := search(t, s, "", "", `{"query":"q","size":2}`)
		require.Equal(t, http.StatusOK, code, body)
		code, raw, _ := do(t, s, "POST", "/v1/rerank", rerankBody(threeHits(), "q"))
		require.Equal(t, http.StatusOK, code, raw)
		require.Len(t, scopes, 2)
		if !on {
			require.Nil(t, scopes[0])
			require.Nil(t, scopes[1])
			continue
		}
		require.ElementsMatch(t, all, scopes[0])
		require.ElementsMatch(t, []string{"Alpha", "Beta", "Gamma"}, scopes[1])
	}
}
