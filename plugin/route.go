package plugin

import (
	"slices"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/inference"
)

// routeByFirstStage settles the model's choice between its two routes with the first stage's evidence
// (experimental.route_by_first_stage): the model's best answer from each route, the copy route's (a candidate in
// its prompt) and the memory route's (a title it was trained on), goes first by the first stage's rank over
// the whole index (base), and the router's own order stands where the first stage ranks neither (the server
// asks the engine to keep each route's best in its answer: inference.Options.EachRoute). The
// router's choice is what loses the seen-document questions, not the memory: with models/r24e the memory's
// best answer is right on 0.58-0.63 of held-out seen questions and the router takes it on a third of them
// (docs/research/2026-11-readers.md, "Routing by the first stage"). The beams keep their scores; it returns beams reordered
// (a copy, beams untouched) and whether the first stage changed the top.
func routeByFirstStage(beams []inference.Beam, base []adapter.Hit) ([]inference.Beam, bool) {
	if len(beams) < 2 {
		return beams, false
	}
	other := slices.IndexFunc(beams, func(b inference.Beam) bool { return b.Route != beams[0].Route })
	if other < 0 {
		return beams, false
	}
	rank := func(docid string) int {
		if i := slices.IndexFunc(base, func(h adapter.Hit) bool { return h.DocID == docid }); i >= 0 {
			return i
		}
		return len(base)
	}
	if rank(beams[other].DocID) >= rank(beams[0].DocID) {
		return beams, false
	}
	out := make([]inference.Beam, 0, len(beams))
	out = append(out, beams[other])
	out = append(out, beams[:other]...)
	return append(out, beams[other+1:]...), true
}
