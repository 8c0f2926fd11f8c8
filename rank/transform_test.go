package rank

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

func TestRouteByFirstStage(t *testing.T) {
	base := []adapter.Hit{{DocID: "Seen A"}, {DocID: "New B"}, {DocID: "New C"}, {DocID: "Seen D"}}
	cp := func(d string) Scored { return Scored{DocID: d, Route: RouteCopy} }
	mem := func(d string) Scored { return Scored{DocID: d, Route: RouteParametric, Candidate: -1} }
	tests := []struct {
		name    string
		scored  []Scored
		want    []string
		changed bool
	}{
		{"the memory's answer ranked above the copy's goes first, the rest in order",
			[]Scored{cp("New B"), cp("New C"), mem("Seen A"), mem("Seen D")}, []string{"Seen A", "New B", "New C", "Seen D"}, true},
		{"the copy's answer ranked above the memory's goes first",
			[]Scored{mem("Seen D"), cp("New C"), cp("New B")}, []string{"New C", "Seen D", "New B"}, true},
		{"only the best of the other route counts: a lower one ranked higher does not",
			[]Scored{cp("New C"), mem("Seen D"), mem("Seen A")}, []string{"New C", "Seen D", "Seen A"}, false},
		{"the router's choice ranked higher stands", []Scored{cp("New B"), mem("Seen D")}, []string{"New B", "Seen D"}, false},
		{"an answer the first stage does not hold loses to one it does",
			[]Scored{mem("Nowhere"), cp("New C")}, []string{"New C", "Nowhere"}, true},
		{"neither held: the router's order stands", []Scored{mem("Nowhere"), cp("Elsewhere")}, []string{"Nowhere", "Elsewhere"}, false},
		{"one route only: unchanged", []Scored{cp("New C"), cp("New B")}, []string{"New C", "New B"}, false},
		{"one beam: unchanged", []Scored{cp("New C")}, []string{"New C"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]Scored(nil), tt.scored...)
			out, changed := RouteByFirstStage(Reading{Scored: in}, base)
			var got []string
			for _, b := range out.Scored {
				got = append(got, b.DocID)
			}
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.changed, changed)
			require.Equal(t, tt.scored, in, "the caller's reading is not reordered in place")
		})
	}
}

func TestDoubted(t *testing.T) {
	copyTop := Reading{Scored: []Scored{{DocID: "A", Route: RouteCopy, Score: -1}}, Confidence: map[string]float64{ConfidenceCopy: 0.4}}
	memTop := Reading{Scored: []Scored{{DocID: "S", Route: RouteParametric, Score: -1}}, Confidence: map[string]float64{ConfidenceCopy: 0.4}}
	noRouter := Reading{Scored: []Scored{{DocID: "A", Route: RouteCopy, Score: 0.7}}}
	tests := []struct {
		name            string
		r               Reading
		minCopy, minTop float64
		want            bool
	}{
		{"an empty reading", Reading{}, 0, -100, true},
		{"a copied top below min_copy_prob", copyTop, 0.5, -100, true},
		{"a remembered top ignores min_copy_prob", memTop, 0.5, -100, false},
		{"a top below min_top_score", copyTop, 0, -0.5, true},
		{"confident enough", copyTop, 0.3, -2, false},
		{"a reader without a router is as sure as a copy can be", noRouter, 0.99, 0, false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, Doubted(tt.r, tt.minCopy, tt.minTop), tt.name)
	}
}

// TestRankPrior: no prior at weight 0 (the engine then decodes as without it); else the place k (from 1) loses
// w x ln(k), so the first place keeps its score and each later one loses more.
func TestRankPrior(t *testing.T) {
	require.Nil(t, RankPrior(0))
	p := RankPrior(4)
	require.NotNil(t, p)
	require.Equal(t, 0.0, p(1))
	require.InDelta(t, -4*math.Log(2), p(2), 1e-12)
	require.InDelta(t, -4*math.Log(100), p(100), 1e-12)
	require.Less(t, p(3), p(2))
}
