package plugin

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
)

// TestRouteByFirstStageServed: the fake model copies Beta (not in the first stage's list over the whole
// index) and remembers Seen Doc (its first): with experimental.route_by_first_stage the memory's answer leads and
// the response says so, and the engine was asked for each route's best; without it the router's choice does.
func TestRouteByFirstStageServed(t *testing.T) {
	for _, on := range []bool{false, true} {
		var newCalls, allCalls atomic.Int64
		var each []bool // the engine is asked to keep each route's best (inference.Options.EachRoute)
		m := &fakeReranker{rank: copyBeta, options: func(o inference.Options) { each = append(each, o.EachRoute) }}
		s := newTestServer(t, abSearcher(&newCalls, &allCalls), m, func(o *testOptions) {
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
		s := newTestServer(t, abSearcher(&newCalls, &allCalls), m, func(o *testOptions) {
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
