package abtest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/rank"
)

// coins returns a coin that answers the scripted flips in order ('A' true, 'B' false) and fails the test
// when flipped more often than scripted.
func coins(t *testing.T, script string) (func() bool, *int) {
	t.Helper()
	flips := 0
	return func() bool {
		if flips >= len(script) {
			t.Fatalf("coin flipped %d times, script has %d", flips+1, len(script))
		}
		flips++
		return script[flips-1] == 'A'
	}, &flips
}

// render shows picks as "A:d1 B:d2 ...".
func render(a, b []string, picks []Pick) string {
	var out []string
	for _, p := range picks {
		list := a
		if p.Team == TeamB {
			list = b
		}
		out = append(out, fmt.Sprintf("%s:%s", p.Team, list[p.Index]))
	}
	return strings.Join(out, " ")
}

func TestTeamDraft(t *testing.T) {
	tests := []struct {
		name  string
		a, b  []string
		n     int
		coins string // the scripted flips, all of which must be used
		want  string
	}{
		{
			name: "disjoint rankings alternate by round",
			a:    []string{"a1", "a2", "a3"}, b: []string{"b1", "b2", "b3"}, n: 6, coins: "ABB",
			want: "A:a1 B:b1 B:b2 A:a2 B:b3 A:a3",
		},
		{
			name: "identical rankings: each team takes its best unshown document",
			a:    []string{"x", "y", "z"}, b: []string{"x", "y", "z"}, n: 3, coins: "BA",
			want: "B:x A:y A:z",
		},
		{
			// Radlinski et al. 2008, figure 2's shape: overlapping lists, dedup by id.
			name: "overlapping rankings skip what the other team showed",
			a:    []string{"d1", "d2", "d3", "d4"}, b: []string{"d2", "d5", "d1", "d6"}, n: 6, coins: "AAB",
			want: "A:d1 B:d2 A:d3 B:d5 B:d6 A:d4",
		},
		{
			name: "n cuts the page",
			a:    []string{"a1", "a2", "a3"}, b: []string{"b1", "b2", "b3"}, n: 3, coins: "BA",
			want: "B:b1 A:a1 A:a2",
		},
		{
			name: "unequal lengths: the longer ranking fills the page once the shorter runs dry",
			a:    []string{"a1", "a2", "a3", "a4", "a5"}, b: []string{"b1"}, n: 5, coins: "B",
			want: "B:b1 A:a1 A:a2 A:a3 A:a4",
		},
		{
			name: "a ranking that runs dry through overlap",
			a:    []string{"s", "t"}, b: []string{"t", "s", "u", "v"}, n: 10, coins: "A",
			want: "A:s B:t B:u B:v",
		},
		{
			name: "duplicates within a ranking are shown once",
			a:    []string{"d", "d", "e"}, b: []string{"f", "d", "f", "g"}, n: 10, coins: "AB",
			want: "A:d B:f B:g A:e",
		},
		{
			name: "one ranking empty",
			a:    nil, b: []string{"b1", "b2"}, n: 5, coins: "",
			want: "B:b1 B:b2",
		},
		{name: "both empty", n: 5, want: ""},
		{name: "n zero", a: []string{"a"}, b: []string{"b"}, n: 0, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			coin, flips := coins(t, tt.coins)
			picks := TeamDraft(tt.a, tt.b, tt.n, coin)
			require.Equal(t, tt.want, render(tt.a, tt.b, picks))
			require.Equal(t, len(tt.coins), *flips, "every scripted flip is used")
		})
	}
}

// TestTeamDraftProperties checks the invariants on random rankings: no document twice, every shown
// document is the picking team's best unshown one, teams differ by at most one pick while both can pick,
// and the same seed gives the same interleaving.
func TestTeamDraftProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 500 {
		ranking := func() []string {
			out := make([]string, rng.IntN(12))
			for i := range out {
				out[i] = fmt.Sprintf("d%d", rng.IntN(15))
			}
			return out
		}
		a, b, n := ranking(), ranking(), rng.IntN(15)
		seed := uint64(trial)
		flip := func(r *rand.Rand) func() bool { return func() bool { return r.Uint64()&1 == 1 } }
		picks := TeamDraft(a, b, n, flip(rand.New(rand.NewPCG(seed, 0))))
		require.Equal(t, picks, TeamDraft(a, b, n, flip(rand.New(rand.NewPCG(seed, 0)))), "deterministic given the seed")

		shown := map[string]bool{}
		canPick := func(list []string) bool { return slices.ContainsFunc(list, func(d string) bool { return !shown[d] }) }
		var na, nb int
		for i, p := range picks {
			if canPick(a) && canPick(b) {
				require.LessOrEqual(t, max(na-nb, nb-na), 1, "trial %d pick %d: teams drift apart while both can pick", trial, i)
			}
			list := a
			if p.Team == TeamB {
				list = b
			}
			d := list[p.Index]
			require.False(t, shown[d], "trial %d: %s shown twice", trial, d)
			for _, better := range list[:p.Index] {
				require.True(t, shown[better], "trial %d pick %d: %s skipped the unshown %s", trial, i, d, better)
			}
			shown[d] = true
			if p.Team == TeamA {
				na++
			} else {
				nb++
			}
		}
		union := map[string]bool{}
		for _, d := range slices.Concat(a, b) {
			union[d] = true
		}
		require.Equal(t, min(n, len(union)), len(picks), "trial %d: the page is as full as the rankings allow", trial)
	}
}

func TestInterleave(t *testing.T) {
	a := []rank.Result{{DocID: "s", Rank: 1, Provenance: rank.FromBM25}, {DocID: "x", Rank: 2, Provenance: rank.FromBM25}}
	b := []rank.Result{{DocID: "y", Rank: 1, Provenance: rank.FromCopy}, {DocID: "s", Rank: 2, Provenance: rank.FromParametric}}
	seed := [2]uint64{7, 9}
	got := Interleave(a, b, 10, seed)
	require.Equal(t, got, Interleave(a, b, 10, seed), "the seed decides")
	require.Len(t, got, 3, "the union, s once")
	teams := map[string]string{}
	for i, r := range got {
		require.Equal(t, i+1, r.Rank)
		teams[r.DocID] = r.Team
		want := rank.FromBM25
		if r.Team == string(TeamB) {
			want = b[slices.IndexFunc(b, func(x rank.Result) bool { return x.DocID == r.DocID })].Provenance
		}
		require.Equal(t, want, r.Provenance, "each result is its own team's")
	}
	require.Equal(t, "A", teams["x"])
	require.Equal(t, "B", teams["y"])
	require.Len(t, Interleave(a, b, 1, seed), 1)
}
