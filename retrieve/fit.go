package retrieve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/icicle-search/sidecar/adapter"
)

// Sample is one labelled query's first-stage evidence, gathered once (Gather) and fused under every
// candidate setting by Fit: BM25's hits, the kNN's deepest list and the exact cosines of both.
type Sample struct {
	QueryID  string
	Relevant map[string]bool
	BM25     []adapter.Hit
	KNN      []adapter.Hit
	Dense    map[string]float64
}

// Gather searches one query the way Search does, as deep as Fit may need: BM25's top depth and the
// kNN's top maxKNN, with every cosine exact.
func (s *Stage) Gather(ctx context.Context, query string, depth, maxKNN int) (Sample, error) {
	if s.enc == nil {
		return Sample{}, fmt.Errorf("gather %q: the first stage has no encoder", query)
	}
	vec, err := s.enc.Query(ctx, query)
	if err != nil {
		return Sample{}, err
	}
	bm25, err := s.es.SearchLean(ctx, query, depth, false)
	if err != nil {
		return Sample{}, err
	}
	ids := make([]string, len(bm25))
	for i, h := range bm25 {
		ids[i] = h.ID
	}
	qs := []adapter.DenseQuery{{K: maxKNN}}
	if len(ids) > 0 {
		qs = append(qs, adapter.DenseQuery{IDs: ids})
	}
	res, err := s.es.Dense(ctx, vec, qs)
	if err != nil {
		return Sample{}, err
	}
	out := Sample{BM25: bm25, KNN: res[0], Dense: map[string]float64{}}
	for _, list := range res {
		for _, h := range list {
			out.Dense[h.ID] = h.Dense
		}
	}
	return out, nil
}

// Score is how a setting ranks a set of samples: the share of queries with a relevant document first, and
// the mean reciprocal rank of the first relevant one within the top 10.
type Score struct {
	Hits1 float64 `json:"hits_at_1"`
	MRR10 float64 `json:"mrr_at_10"`
	N     int     `json:"queries"`
}

// better orders scores by Hits@1, then MRR@10: the gate and the model compete for the top result.
func (s Score) better(o Score) bool {
	if s.Hits1 != o.Hits1 {
		return s.Hits1 > o.Hits1
	}
	return s.MRR10 > o.MRR10
}

// Evaluate fuses every sample under p and scores the rankings.
func Evaluate(samples []Sample, p Params) Score { return evaluate(samples, p, nil) }

// evaluate is Evaluate, also setting hits[i] to 1 where samples[i]'s first result is relevant (when hits is
// not nil; it has one entry a sample).
func evaluate(samples []Sample, p Params, hits []float64) Score {
	var sc Score
	for j, s := range samples {
		knn := s.KNN[:min(len(s.KNN), p.KNN)]
		ranked := Fuse(s.BM25[:min(len(s.BM25), p.Depth)], knn, s.Dense, p)
		for i, h := range ranked[:min(len(ranked), 10)] {
			if s.Relevant[h.DocID] {
				if i == 0 {
					sc.Hits1++
					if hits != nil {
						hits[j] = 1
					}
				}
				sc.MRR10 += 1 / float64(i+1)
				break
			}
		}
	}
	sc.N = len(samples)
	if sc.N > 0 {
		sc.Hits1 /= float64(sc.N)
		sc.MRR10 /= float64(sc.N)
	}
	return sc
}

// Grid is the settings Fit tries: linear at dense weights 0, 0.1, ..., 1 (0 is BM25's order), linear at
// 0.4, 0.5, 0.55, 0.6 and 0.7 + 3 x the cosine spread (Params.DenseWeightSpread; the default's form) and rrf
// at k 10, 30, 60 with dense weights 0.3 .. 0.7, each with kNN 0, 10 and 100, at the given depth.
func Grid(depth int) []Params {
	var out []Params
	for _, knn := range []int{0, 10, 100} {
		for i := 0; i <= 10; i++ {
			out = append(out, Params{Method: MethodLinear, DenseWeight: float64(i) / 10, RRFK: 60, Depth: depth, KNN: knn})
		}
		for _, w := range []float64{0.4, 0.5, 0.55, 0.6, 0.7} {
			out = append(out, Params{Method: MethodLinear, DenseWeight: w, DenseWeightSpread: 3, RRFK: 60, Depth: depth, KNN: knn})
		}
		for _, k := range []float64{10, 30, 60} {
			for _, w := range []float64{0.3, 0.4, 0.5, 0.6, 0.7} {
				out = append(out, Params{Method: MethodRRF, DenseWeight: w, RRFK: k, Depth: depth, KNN: knn})
			}
		}
	}
	return out
}

// FitResult is what Fit chose and how well it did.
type FitResult struct {
	// Params is the best setting on all samples, or the anchor where the best was not better by enough
	// (FitOptions.Anchor).
	Params Params `json:"params"`
	// Passed is the grid's best on these samples where the anchor was kept instead (FitOptions.Anchor),
	// with its in-sample score.
	Passed      *Params `json:"passed,omitempty"`
	PassedScore *Score  `json:"passed_score,omitempty"`
	// Score is Params' score on all samples (in-sample: optimistic).
	Score Score `json:"score"`
	// HeldOut is the score of k-fold cross-validation: each fold ranked by the setting that was best on
	// the other folds. This is the figure to expect on queries like these.
	HeldOut Score `json:"held_out"`
	// BM25 and Default are BM25's order and DefaultParams (with this depth) on all samples, for reference.
	BM25    Score `json:"bm25"`
	Default Score `json:"default"`
	// Current is the setting served before this fit (Compare sets it) on all samples.
	Current *Score `json:"current,omitempty"`
	// Gain is the held-out Hits@1 less Current's, with its 95% interval over the queries (Compare sets it).
	Gain  *Interval `json:"held_out_gain,omitempty"`
	Folds int       `json:"folds"`

	heldHits []float64 // per sample: 1 where its fold's setting ranked a relevant document first
}

// Interval is an estimate with its 95% interval.
type Interval struct {
	Estimate float64 `json:"estimate"`
	Low      float64 `json:"low"`
	High     float64 `json:"high"`
}

// pairedGain is the mean of a - b over paired per-query outcomes, with the normal approximation's 95% interval
// of that mean (1.96 standard errors of the paired differences).
func pairedGain(a, b []float64) Interval {
	n := float64(len(a))
	if n == 0 {
		return Interval{}
	}
	var sum, sq float64
	for i := range a {
		d := a[i] - b[i]
		sum += d
		sq += d * d
	}
	mean := sum / n
	se := 0.0
	if n > 1 {
		se = math.Sqrt(max(0, (sq-n*mean*mean)/(n-1)) / n)
	}
	return Interval{Estimate: mean, Low: mean - 1.96*se, High: mean + 1.96*se}
}

// ErrNoImprovement is Compare's error: a fit whose held-out score does not beat the current setting.
var ErrNoImprovement = errors.New("the fit is not better held out than the current setting")

// Compare scores current (the setting served now) on samples into r.Current, and the held-out Hits@1 less
// current's, query by query, into r.Gain; it returns an error wrapping ErrNoImprovement unless r's held-out
// score (Hits@1, then MRR@10) is better than current's. The held-out
// score is what the fitted setting can be expected to do on new queries; current's is measured on the same
// queries (optimistic only if current was itself fitted on them), so a fit that only matches it is noise
// from a small label set, not an improvement.
func (r *FitResult) Compare(samples []Sample, current Params) error {
	cur := make([]float64, len(samples))
	sc := evaluate(samples, current, cur)
	r.Current = &sc
	if len(r.heldHits) == len(samples) {
		g := pairedGain(r.heldHits, cur)
		r.Gain = &g
	}
	if r.HeldOut.better(sc) {
		return nil
	}
	return fmt.Errorf("%w: held out Hits@1 %.3f / MRR@10 %.3f (%d-fold) against the current %.3f / %.3f on the same %d queries",
		ErrNoImprovement, r.HeldOut.Hits1, r.HeldOut.MRR10, r.Folds, sc.Hits1, sc.MRR10, sc.N)
}

// FitOptions are Fit's: the folds of its cross-validation and the shrinkage toward the setting served now.
type FitOptions struct {
	// Folds is k of the k-fold cross-validation that estimates the fit's held-out score (at least 2).
	Folds int
	// Anchor, when set, is the setting served now. The grid's best replaces it only where it is better by
	// more than Z standard errors of the paired per-query Hits@1 difference on the queries it was chosen
	// on: with few labelled queries the best of many settings is mostly luck, and the anchor (tuned on far
	// more queries, or measured on the team's) is the safer choice. The same rule runs inside every fold,
	// so the held-out score is the rule's, not the unshrunk best's.
	Anchor *Params
	// Z is the shrinkage's threshold in standard errors (0: the grid's best whenever it scores higher).
	Z float64
}

// DefaultShrinkZ is the threshold `icicle calibrate -first-stage` uses (its -shrink flag).
const DefaultShrinkZ = 1.0

// Fit picks the setting of grid with the best score on samples (Hits@1, then MRR@10; among equals the
// earlier in grid, so the simpler), shrunk toward o.Anchor (FitOptions), and estimates how that choice
// generalises by o.Folds-fold cross-validation over the samples in their order (fold i holds samples i,
// i+folds, ...).
func Fit(samples []Sample, grid []Params, o FitOptions) (FitResult, error) {
	if len(samples) == 0 || len(grid) == 0 {
		return FitResult{}, fmt.Errorf("fit the first stage: %d samples, %d settings: need both", len(samples), len(grid))
	}
	folds := max(2, min(o.Folds, len(samples)))
	// choose returns the setting chosen on ss, its score there, and the grid's best where it was passed.
	choose := func(ss []Sample) (Params, Score, *Params, Score) {
		bp, bs := grid[0], Evaluate(ss, grid[0])
		for _, p := range grid[1:] {
			if sc := Evaluate(ss, p); sc.better(bs) {
				bp, bs = p, sc
			}
		}
		if o.Anchor == nil {
			return bp, bs, nil, Score{}
		}
		best, anchor := make([]float64, len(ss)), make([]float64, len(ss))
		evaluate(ss, bp, best)
		as := evaluate(ss, *o.Anchor, anchor)
		if g := pairedGain(best, anchor); g.Estimate > 0 && g.Estimate > o.Z*(g.High-g.Estimate)/1.96 {
			return bp, bs, nil, Score{}
		}
		if bp == *o.Anchor {
			return bp, bs, nil, Score{}
		}
		return *o.Anchor, as, &bp, bs
	}
	res := FitResult{Folds: folds, heldHits: make([]float64, len(samples))}
	var passed Score
	res.Params, res.Score, res.Passed, passed = choose(samples)
	if res.Passed != nil {
		res.PassedScore = &passed
	}
	var held Score
	for f := range folds {
		var train, test []Sample
		for i, s := range samples {
			if i%folds == f {
				test = append(test, s)
			} else {
				train = append(train, s)
			}
		}
		p, _, _, _ := choose(train)
		hits := make([]float64, len(test))
		sc := evaluate(test, p, hits)
		for j, h := range hits {
			res.heldHits[f+j*folds] = h // test[j] is samples[f+j*folds]
		}
		held.Hits1 += sc.Hits1 * float64(sc.N)
		held.MRR10 += sc.MRR10 * float64(sc.N)
		held.N += sc.N
	}
	held.Hits1 /= float64(held.N)
	held.MRR10 /= float64(held.N)
	res.HeldOut = held
	depth := cmp.Or(slices.MaxFunc(grid, func(a, b Params) int { return cmp.Compare(a.Depth, b.Depth) }).Depth, DefaultParams.Depth)
	res.BM25 = Evaluate(samples, Params{Method: MethodLinear, DenseWeight: 0, Depth: depth})
	def := DefaultParams
	def.Depth = depth
	res.Default = Evaluate(samples, def)
	return res, nil
}
