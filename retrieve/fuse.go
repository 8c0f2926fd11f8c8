package retrieve

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/icicle-search/sidecar/adapter"
)

// Fusion methods (Params.Method).
const (
	// MethodBM25 is BM25's order: the first stage without the encoder.
	MethodBM25 = "bm25"
	// MethodLinear orders by w x minmax(cosine) + (1-w) x BM25/max(BM25) over the candidates: the cosine
	// min-max scaled over them, BM25's score as a share of its top score (0 for a document BM25 did not
	// return), so that the kNN's documents leave the BM25 scale as it is. Chosen over min-max of both on
	// held-out nq_qed training queries (docs/evaluation.md, "The first stage").
	MethodLinear = "linear"
	// MethodRRF orders by w / (k + rank by cosine) + (1-w) / (k + BM25 rank), a list that lacks the
	// document adding nothing (reciprocal rank fusion, weighted).
	MethodRRF = "rrf"
)

// Params are the first stage's settings: how deep it searches and how it fuses. The defaults were chosen on
// held-out nq_qed training queries (docs/evaluation.md, "The first stage"); `icicle calibrate
// -first-stage` fits them on a team's labelled queries into a file the sidecar loads.
type Params struct {
	// Method is MethodLinear, MethodRRF or MethodBM25.
	Method string `json:"method"`
	// DenseWeight is w, the dense side's weight, 0..1; with DenseWeightSpread, its value at a spread of 0.
	DenseWeight float64 `json:"dense_weight"`
	// DenseWeightSpread is added to DenseWeight per unit of the query's cosine spread (Spread: the
	// candidates' highest cosine less their SpreadAt-th), the sum clamped to 0..1; 0 keeps the weight fixed.
	// The encoder's top cosines lie close together (a spread of 0.04-0.06) where it tells documents apart
	// poorly, as on scientific abstracts, and far apart (0.15) on the Wikipedia questions it was trained
	// for, so the weight follows how much the encoder's scores say for this query.
	DenseWeightSpread float64 `json:"dense_weight_spread,omitempty"`
	// RRFK is k of MethodRRF (> 0).
	RRFK float64 `json:"rrf_k"`
	// Depth is how many BM25 hits are fetched and re-scored, 1..adapter.MaxK.
	Depth int `json:"depth"`
	// KNN is how many nearest documents by cosine join BM25's (0: only BM25's hits are re-scored).
	KNN int `json:"knn"`
}

// DefaultParams is the first stage when nothing is calibrated: linear, w = 0.55 + 3 x the spread (0.68 at
// scientific abstracts' median spread, 1 from a spread of 0.15), chosen without each corpus's labels on four
// kinds of labelled corpus (docs/evaluation.md, "The first stage").
var DefaultParams = Params{Method: MethodLinear, DenseWeight: 0.55, DenseWeightSpread: 3, RRFK: 60, Depth: 100, KNN: 10}

// SpreadAt is the rank whose cosine Spread takes from the top one.
const SpreadAt = 10

// Spread is the highest cosine of hits (those with one) less their SpreadAt-th highest (the lowest where
// fewer have one); 0 without two cosines.
func Spread(hits []adapter.Hit) float64 {
	var cos []float64
	for _, h := range hits {
		if h.HasDense {
			cos = append(cos, h.Dense)
		}
	}
	if len(cos) < 2 {
		return 0
	}
	slices.SortFunc(cos, func(a, b float64) int { return cmp.Compare(b, a) })
	return cos[0] - cos[min(SpreadAt, len(cos))-1]
}

// WeightText is the dense weight as people read it: "0.8", or "0.55 + 3 x spread".
func (p Params) WeightText() string {
	if p.DenseWeightSpread == 0 {
		return fmt.Sprintf("%g", p.DenseWeight)
	}
	sign := "+"
	if p.DenseWeightSpread < 0 {
		sign = "-"
	}
	return fmt.Sprintf("%g %s %g x spread", p.DenseWeight, sign, math.Abs(p.DenseWeightSpread))
}

// Weight is the dense weight of a query whose candidates' cosine spread is spread.
func (p Params) Weight(spread float64) float64 {
	if p.DenseWeightSpread == 0 {
		return p.DenseWeight
	}
	return min(1, max(0, p.DenseWeight+p.DenseWeightSpread*spread))
}

// weightOf is the dense weight for candidates hits: Weight of their Spread, read only when the weight
// follows it.
func (p Params) weightOf(hits []adapter.Hit) float64 {
	if p.DenseWeightSpread == 0 {
		return p.DenseWeight
	}
	return p.Weight(Spread(hits))
}

// Validate reports every problem at once, naming the field.
func (p Params) Validate() error {
	var errs []error
	switch p.Method {
	case MethodBM25, MethodLinear, MethodRRF:
	default:
		errs = append(errs, fmt.Errorf("method: %q, want %q, %q or %q", p.Method, MethodLinear, MethodRRF, MethodBM25))
	}
	if p.DenseWeight < 0 || p.DenseWeight > 1 {
		errs = append(errs, fmt.Errorf("dense_weight: %g, want 0..1", p.DenseWeight))
	}
	if math.IsNaN(p.DenseWeightSpread) || p.DenseWeightSpread < -20 || p.DenseWeightSpread > 20 {
		errs = append(errs, fmt.Errorf("dense_weight_spread: %g, want -20..20", p.DenseWeightSpread))
	}
	if p.Method == MethodRRF && p.RRFK <= 0 {
		errs = append(errs, fmt.Errorf("rrf_k: %g, want > 0", p.RRFK))
	}
	if p.Depth < 1 || p.Depth > adapter.MaxK {
		errs = append(errs, fmt.Errorf("depth: %d, want 1..%d", p.Depth, adapter.MaxK))
	}
	if p.KNN < 0 || p.KNN > adapter.MaxK {
		errs = append(errs, fmt.Errorf("knn: %d, want 0..%d", p.KNN, adapter.MaxK))
	}
	return errors.Join(errs...)
}

// Fuse merges BM25's hits (in BM25 order, with BM25 and BM25Rank set) and the kNN's (nearest first) into
// one list by p.Method, best first, Score the fused score and Rank the new rank. dense holds the exact
// cosine of documents by _id; a document without one (no vector) ranks by BM25 alone. Ties go to the better
// BM25 rank, then the docid. MethodBM25 returns bm25 unchanged.
func Fuse(bm25, knn []adapter.Hit, dense map[string]float64, p Params) []adapter.Hit {
	if p.Method == MethodBM25 {
		return bm25
	}
	byID := make(map[string]int, len(bm25)+len(knn))
	union := make([]adapter.Hit, 0, len(bm25)+len(knn))
	for li, list := range [][]adapter.Hit{bm25, knn} {
		for _, h := range list {
			if li == 1 { // a kNN hit BM25 did not return: no BM25 evidence
				h.BM25, h.BM25Rank = 0, 0
			}
			if _, ok := byID[h.ID]; ok {
				continue
			}
			if d, ok := dense[h.ID]; ok {
				h.Dense, h.HasDense = d, true
			}
			byID[h.ID] = len(union)
			union = append(union, h)
		}
	}
	if len(union) == 0 {
		return union
	}
	w := p.weightOf(union)
	switch p.Method {
	case MethodLinear:
		dLo, dHi := minMax(union, func(h adapter.Hit) (float64, bool) { return h.Dense, h.HasDense })
		_, bHi := minMax(union, func(h adapter.Hit) (float64, bool) { return h.BM25, h.BM25Rank > 0 })
		for i := range union {
			h := &union[i]
			var s float64
			if h.BM25Rank > 0 && bHi > 0 {
				s = (1 - w) * h.BM25 / bHi
			}
			if h.HasDense {
				s += w * scale(h.Dense, dLo, dHi)
			}
			h.Score = s
		}
	case MethodRRF:
		byDense := make([]int, len(union))
		for i := range byDense {
			byDense[i] = i
		}
		slices.SortStableFunc(byDense, func(a, b int) int { return cmp.Compare(union[b].Dense, union[a].Dense) })
		for i := range union {
			if union[i].BM25Rank > 0 {
				union[i].Score = (1 - w) / (p.RRFK + float64(union[i].BM25Rank))
			} else {
				union[i].Score = 0
			}
		}
		for r, i := range byDense {
			if union[i].HasDense {
				union[i].Score += w / (p.RRFK + float64(r+1))
			}
		}
	}
	slices.SortStableFunc(union, func(a, b adapter.Hit) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		if c := cmp.Compare(bm25Order(a), bm25Order(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.DocID, b.DocID)
	})
	for i := range union {
		union[i].Rank = i + 1
	}
	return union
}

func bm25Order(h adapter.Hit) int {
	if h.BM25Rank == 0 {
		return int(^uint(0) >> 1)
	}
	return h.BM25Rank
}

// minMax returns the least and greatest of the values v gives (ok false: no value).
func minMax(hs []adapter.Hit, v func(adapter.Hit) (float64, bool)) (lo, hi float64) {
	first := true
	for _, h := range hs {
		x, ok := v(h)
		if !ok {
			continue
		}
		if first || x < lo {
			lo = x
		}
		if first || x > hi {
			hi = x
		}
		first = false
	}
	return lo, hi
}

// scale maps x from [lo, hi] to [0, 1]; 1 when the range is empty (every candidate alike).
func scale(x, lo, hi float64) float64 {
	if hi <= lo {
		return 1
	}
	return (x - lo) / (hi - lo)
}
