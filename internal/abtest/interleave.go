package abtest

import (
	"math/rand/v2"

	"github.com/icicle-search/sidecar/rank"
)

// Team is the ranking that contributed a result to an interleaved list.
type Team string

const (
	// TeamA is arm A's ranking: Elasticsearch BM25 over all documents.
	TeamA Team = "A"
	// TeamB is arm B's ranking: the ICICLE answer of /v1/search.
	TeamB Team = "B"
)

// Pick is one position of an interleaved list: the team that chose the document and the document's
// index in that team's ranking.
type Pick struct {
	Team  Team
	Index int
}

// TeamDraft interleaves two rankings of document ids, best first, into at most n picks by team-draft
// interleaving (Radlinski, Kurup and Joachims, "How does clickthrough data reflect retrieval quality?",
// CIKM 2008). Picks go in rounds: when both teams have picked as often, coin decides which picks first
// (true: A); otherwise the team behind picks. A team picks its highest-ranked document not yet shown, so
// a document appears once (dedup by id, duplicates within one ranking included) and is credited to the
// team that placed it. Where the paper stops once a team has nothing left to pick, this keeps filling from
// the other team, so a short ranking (the model's few beams) does not cut the page short; those picks are
// the other team's by the same rule and analyses that want the paper's exact credit can stop counting at
// the first position where a team ran dry. coin is called only when both teams can pick and have picked
// as often, so the picks are a function of a, b, n and the coin's sequence.
func TeamDraft(a, b []string, n int, coin func() bool) []Pick {
	shown := make(map[string]bool, n)
	picks := make([]Pick, 0, min(n, len(a)+len(b)))
	var ia, ib, na, nb int // next index to consider in a and b; picks per team
	next := func(list []string, i int) int {
		for i < len(list) && shown[list[i]] {
			i++
		}
		return i
	}
	for len(picks) < n {
		ia, ib = next(a, ia), next(b, ib)
		canA, canB := ia < len(a), ib < len(b)
		var pickA bool
		switch {
		case !canA && !canB:
			return picks
		case !canB:
			pickA = true
		case !canA:
			pickA = false
		case na != nb:
			pickA = na < nb
		default:
			pickA = coin()
		}
		if pickA {
			shown[a[ia]] = true
			picks = append(picks, Pick{Team: TeamA, Index: ia})
			na++
		} else {
			shown[b[ib]] = true
			picks = append(picks, Pick{Team: TeamB, Index: ib})
			nb++
		}
	}
	return picks
}

// Interleave is the team-draft interleaving (TeamDraft) of two rankings, at most n results: each result is
// its own ranking's, with its 1-based rank in the interleaved list and the team that placed it. The coin
// is a PCG stream seeded by seed (Assignment.Seed), so the same seed interleaves the same way.
func Interleave(a, b []rank.Result, n int, seed [2]uint64) []rank.Result {
	rng := rand.New(rand.NewPCG(seed[0], seed[1]))
	picks := TeamDraft(docIDs(a), docIDs(b), n, func() bool { return rng.Uint64()&1 == 1 })
	out := make([]rank.Result, len(picks))
	for i, p := range picks {
		list := b
		if p.Team == TeamA {
			list = a
		}
		r := list[p.Index]
		r.Rank, r.Team = i+1, string(p.Team)
		out[i] = r
	}
	return out
}

func docIDs(rs []rank.Result) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.DocID
	}
	return out
}
