package gate

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Sample is one labelled query: the features of the model's answer and whether each side's top is
// relevant.
type Sample struct {
	Features Features
	// ModelRight: the model's top is relevant. BM25Right: BM25's top is relevant.
	ModelRight, BM25Right bool
}

// gain is what promoting the model's top does to Hits@1 on s: +1, -1 or 0.
func (s Sample) gain() int {
	switch {
	case s.Features.TopIsBM25Top == 1:
		return 0
	case s.ModelRight && !s.BM25Right:
		return 1
	case s.BM25Right && !s.ModelRight:
		return -1
	}
	return 0
}

// FitOptions tune Fit.
type FitOptions struct {
	// Folds is k of the k-fold cross-validation (default 5, at least 2).
	Folds int
	// L2 is the ridge penalty on the standardised weights (default 1).
	L2 float64
	// Info is copied into the gate's Fit record (N, Folds, the counts and Created are filled in).
	Info FitInfo
	// Now stamps Created (default time.Now).
	Now func() time.Time
}

// Fit learns a gate from labelled queries. Only queries where the model's top differs from BM25's are
// decisions; on them a logistic model predicts "promoting is right" (model right, BM25 wrong). Every
// query gets an out-of-fold probability from a model fitted on the other folds (sample i is in fold
// i mod k); the threshold is the one whose held-out promotions gain most (right minus wrong), among those
// that gain in total and lose in no fold; ties go to the higher threshold. That choice is then checked by
// nested cross-validation (the whole procedure on k-1 folds, applied to the held-out one): unless it gains
// in total and loses in no fold there too, the gate is Never: the model is not trusted. The weights served
// are refitted on all decisions.
func Fit(samples []Sample, o FitOptions) (*Gate, error) {
	k := cmp.Or(o.Folds, 5)
	if k < 2 {
		return nil, fmt.Errorf("folds: %d, want at least 2", k)
	}
	l2 := cmp.Or(o.L2, 1.0)
	if len(samples) < k {
		return nil, fmt.Errorf("%d labelled queries, want at least one per fold (%d)", len(samples), k)
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	info := o.Info
	info.N, info.Folds, info.Created = len(samples), k, now().UTC()
	info.Changes, info.Positives, info.Negatives = 0, 0, 0
	var dec []Sample
	var fold []int
	for i, s := range samples {
		if s.Features.TopIsBM25Top == 1 {
			continue
		}
		dec = append(dec, s)
		fold = append(fold, i%k)
		info.Changes++
		switch s.gain() {
		case 1:
			info.Positives++
		case -1:
			info.Negatives++
		}
	}
	g := &Gate{Version: Version, Features: FeatureNames, Never: true, Threshold: 1}
	if len(dec) == 0 {
		info.Note = "the model's top was BM25's top on every query: nothing to decide"
		g.Fit = &info
		return g, nil
	}
	g.Mean, g.Scale, g.Weights, g.Bias = fitLogistic(dec, nil, l2)
	if info.Positives == 0 {
		info.Note = "promoting the model's top was never right: the gate never fires"
		g.Fit = &info
		return g, nil
	}
	// The threshold served: chosen on out-of-fold probabilities of all decisions.
	all := make([]int, len(dec))
	for i := range all {
		all[i] = i
	}
	best, ok := chooseThreshold(dec, fold, all, k, l2)
	if !ok {
		info.Note = "no threshold gained on held-out folds without losing in one: the gate never fires"
		g.Fit = &info
		return g, nil
	}
	// Nested cross-validation: the whole procedure (weights and the threshold choice above) run on k-1
	// folds and applied to the held-out one. Picking the best of many thresholds on the same out-of-fold
	// probabilities overstates the gain; this is the honest estimate, and the gate fires only if it gains
	// in total and loses in no fold.
	nested := make([]int, k)
	right, wrong := 0, 0
	for f := range k {
		var train []int
		for i := range dec {
			if fold[i] != f {
				train = append(train, i)
			}
		}
		inner, ok := chooseThreshold(dec, innerFolds(fold, f), train, k, l2)
		if !ok {
			continue // this fold's procedure would never fire: no promotion on the held-out fold
		}
		m := &Gate{}
		m.Mean, m.Scale, m.Weights, m.Bias = fitLogistic(dec, func(i int) bool { return fold[i] != f }, l2)
		for i, s := range dec {
			if fold[i] == f && sigmoid(m.score(s.Features.Vector())) >= inner.t {
				nested[f] += s.gain()
				switch s.gain() {
				case 1:
					right++
				case -1:
					wrong++
				}
			}
		}
	}
	info.CVRight, info.CVWrong, info.CVGain, info.FoldGains = right, wrong, right-wrong, nested
	if right-wrong <= 0 || slices.Min(nested) < 0 {
		info.Note = fmt.Sprintf("nested cross-validation: the fitted threshold's held-out promotions were %d right, %d wrong (per fold %v): "+
			"no reliable gain, so the gate never fires (the out-of-fold best, threshold %.4f, looked like %d right, %d wrong)",
			right, wrong, nested, best.t, best.right, best.wrong)
		g.Fit = &info
		return g, nil
	}
	g.Never, g.Threshold = false, best.t
	g.Fit = &info
	return g, nil
}

// innerFolds renumbers the folds other than held so that the k-1 of them are the inner folds (held keeps
// its number and is never used).
func innerFolds(fold []int, held int) []int {
	out := make([]int, len(fold))
	for i, f := range fold {
		out[i] = f
		if f > held {
			out[i] = f - 1
		}
	}
	return out
}

// threshold is a chosen threshold with its out-of-fold promotions.
type threshold struct {
	t            float64
	right, wrong int
}

// chooseThreshold fits the logistic model on each fold of the samples in use (indices into dec) without
// it, scores that fold, and returns the threshold whose out-of-fold promotions gain most, among those that
// gain in total and lose in no fold (ties: the higher threshold); ok is false when none does.
func chooseThreshold(dec []Sample, fold, use []int, k int, l2 float64) (threshold, bool) {
	inUse := make(map[int]bool, len(use))
	folds := map[int]bool{}
	for _, i := range use {
		inUse[i] = true
		folds[fold[i]] = true
	}
	oof := make(map[int]float64, len(use))
	for f := range folds {
		m := &Gate{}
		m.Mean, m.Scale, m.Weights, m.Bias = fitLogistic(dec, func(i int) bool { return inUse[i] && fold[i] != f }, l2)
		for _, i := range use {
			if fold[i] == f {
				oof[i] = sigmoid(m.score(dec[i].Features.Vector()))
			}
		}
	}
	var cands []float64
	for _, p := range oof {
		cands = append(cands, p)
	}
	slices.Sort(cands)
	cands = slices.Compact(cands)
	best, found := threshold{t: math.NaN()}, false
	for _, t := range cands {
		perFold := make([]int, k)
		right, wrong := 0, 0
		for _, i := range use {
			if oof[i] >= t {
				perFold[fold[i]] += dec[i].gain()
				switch dec[i].gain() {
				case 1:
					right++
				case -1:
					wrong++
				}
			}
		}
		if slices.Min(perFold) < 0 || right-wrong <= 0 {
			continue
		}
		if gain := right - wrong; !found || gain > best.right-best.wrong || gain == best.right-best.wrong && t > best.t {
			best, found = threshold{t: t, right: right, wrong: wrong}, true
		}
	}
	return best, found
}

// fitLogistic fits a ridge-penalised logistic regression of "gain is +1" on the standardised features of
// the samples that use admits (all when nil), by Newton's method.
func fitLogistic(ss []Sample, use func(int) bool, l2 float64) (mean, scale, w []float64, bias float64) {
	d := len(FeatureNames)
	var xs [][]float64
	var ys []float64
	for i, s := range ss {
		if use != nil && !use(i) {
			continue
		}
		xs = append(xs, s.Features.Vector())
		y := 0.0
		if s.gain() == 1 {
			y = 1
		}
		ys = append(ys, y)
	}
	mean, scale = make([]float64, d), make([]float64, d)
	n := float64(len(xs))
	for j := range d {
		for _, x := range xs {
			mean[j] += x[j]
		}
		mean[j] /= max(n, 1)
		for _, x := range xs {
			scale[j] += (x[j] - mean[j]) * (x[j] - mean[j])
		}
		scale[j] = math.Sqrt(scale[j] / max(n, 1))
		if !(scale[j] > 1e-9) {
			scale[j] = 1
		}
	}
	// Design matrix with the intercept last.
	z := make([][]float64, len(xs))
	for i, x := range xs {
		z[i] = make([]float64, d+1)
		for j := range d {
			z[i][j] = (x[j] - mean[j]) / scale[j]
		}
		z[i][d] = 1
	}
	beta := make([]float64, d+1)
	for range 50 {
		grad := make([]float64, d+1)
		hess := make([][]float64, d+1)
		for j := range hess {
			hess[j] = make([]float64, d+1)
		}
		for i, zi := range z {
			p := sigmoid(dot(beta, zi))
			for a := range d + 1 {
				grad[a] += (ys[i] - p) * zi[a]
				for b := range d + 1 {
					hess[a][b] += p * (1 - p) * zi[a] * zi[b]
				}
			}
		}
		for j := range d { // the intercept is not penalised
			grad[j] -= l2 * beta[j]
			hess[j][j] += l2
		}
		hess[d][d] += 1e-9
		step, err := solve(hess, grad)
		if err != nil {
			break
		}
		moved := 0.0
		for j := range beta {
			beta[j] += step[j]
			moved = max(moved, math.Abs(step[j]))
		}
		if moved < 1e-8 {
			break
		}
	}
	return mean, scale, beta[:d], beta[d]
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// solve solves A x = b by Gaussian elimination with partial pivoting (A is small and positive definite).
func solve(a [][]float64, b []float64) ([]float64, error) {
	n := len(b)
	m := make([][]float64, n)
	for i := range a {
		m[i] = append(slices.Clone(a[i]), b[i])
	}
	for c := range n {
		p := c
		for r := c + 1; r < n; r++ {
			if math.Abs(m[r][c]) > math.Abs(m[p][c]) {
				p = r
			}
		}
		if math.Abs(m[p][c]) < 1e-12 {
			return nil, errors.New("singular system")
		}
		m[c], m[p] = m[p], m[c]
		for r := c + 1; r < n; r++ {
			f := m[r][c] / m[c][c]
			for j := c; j <= n; j++ {
				m[r][j] -= f * m[c][j]
			}
		}
	}
	x := make([]float64, n)
	for r := n - 1; r >= 0; r-- {
		s := m[r][n]
		for j := r + 1; j < n; j++ {
			s -= m[r][j] * x[j]
		}
		x[r] = s / m[r][r]
	}
	return x, nil
}
