package rank

import (
	"math"
	"slices"

	"github.com/icicle-search/sidecar/adapter"
)

// Transforms over a reading: pure functions of a reading and the first stage's order, applied by the
// pipeline between the reader and the policy, as a sampler applies its transforms to a distribution.

// RankPrior is the first stage's order as a prior over a reader's pick (experimental.copy_rank_prior over the
// candidates it picks from, experimental.memory_rank_prior over the documents it names from the first stage's
// scope): the title at place k (from 1) loses w x ln(k). A reader by blocks with shared positions cannot see
// the candidates' order (every block sits at the same positions); this gives it back. It is a shift by place
// rather than a reordering of the finished reading because a beam search cuts its routes to the beam width and
// bounds one route by the other's scores: the ICICLE engine applies it where it cuts
// (inference.Options.CopyShift and MemoryShift), so the cut is exact after the prior. Nil for w 0: no prior.
func RankPrior(w float64) func(place int) float64 {
	if w == 0 {
		return nil
	}
	return func(k int) float64 { return -w * math.Log(float64(k)) }
}

// RouteByFirstStage settles a two-route reader's choice between its routes with the first stage's evidence
// (experimental.route_by_first_stage): of the reading's best candidate it picked (RouteCopy) and its best
// document named beyond them (RouteParametric), the one the first stage ranks higher over the whole index
// (base) goes first; the reader's own order stands where the first stage ranks neither. The ICICLE router's
// choice is what loses seen-document questions, not its memory (docs/research, "Routing by the first
// stage"). The scores stay the reader's; it returns the reading with its documents reordered (a copy) and
// whether the first stage changed the top.
func RouteByFirstStage(r Reading, base []adapter.Hit) (Reading, bool) {
	scored := r.Scored
	if len(scored) < 2 {
		return r, false
	}
	other := slices.IndexFunc(scored, func(s Scored) bool { return s.Route != scored[0].Route })
	if other < 0 {
		return r, false
	}
	rank := func(docid string) int {
		if i := slices.IndexFunc(base, func(h adapter.Hit) bool { return h.DocID == docid }); i >= 0 {
			return i
		}
		return len(base)
	}
	if rank(scored[other].DocID) >= rank(scored[0].DocID) {
		return r, false
	}
	out := make([]Scored, 0, len(scored))
	out = append(out, scored[other])
	out = append(out, scored[:other]...)
	r.Scored = append(out, scored[other+1:]...)
	return r, true
}

// Doubted reports whether a reading falls below the confidence floors (experimental.min_copy_prob, applied
// to a top the reader picked from its candidates, and experimental.min_top_score): the first stage's order
// then answers with ReasonLowConfidence. An empty reading is doubted.
func Doubted(r Reading, minCopyProb, minTopScore float64) bool {
	if len(r.Scored) == 0 {
		return true
	}
	top := r.Scored[0]
	return copyConfidence(r) < minCopyProb && top.Route == RouteCopy || top.Score < minTopScore
}
