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
// that gain in total and lose in no fold; ties go to the higher threshold. Without such a threshold the
// gate is Never: the model is not trusted. The weights served are refitted on all decisions.
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
	// Out-of-fold probabilities.
	oof := make([]float64, len(dec))
	for f := range k {
		train := func(i int) bool { return fold[i] != f }
		m := &Gate{}
		m.Mean, m.Scale, m.Weights, m.Bias = fitLogistic(dec, train, l2)
		for i, s := range dec {
			if fold[i] == f {
				oof[i] = sigmoid(m.score(s.Features.Vector()))
			}
		}
	}
	cands := slices.Clone(oof)
	slices.Sort(cands)
	cands = slices.Compact(cands)
	best, bestT := 0, math.NaN()
	var bestFolds []int
	var bestRight, bestWrong int
	for _, t := range cands {
		folds := make([]int, k)
		right, wrong := 0, 0
		for i, s := range dec {
			if oof[i] >= t {
				folds[fold[i]] += s.gain()
				switch s.gain() {
				case 1:
					right++
				case -1:
					wrong++
				}
			}
		}
		if slices.Min(folds) < 0 {
			continue
		}
		if gain := right - wrong; gain > best || gain == best && gain > 0 && t > bestT {
			best, bestT, bestFolds, bestRight, bestWrong = gain, t, folds, right, wrong
		}
	}
	if best <= 0 {
		info.Note = "no threshold gained on held-out folds without losing in one: the gate never fires"
		g.Fit = &info
		return g, nil
	}
	g.Never, g.Threshold = false, bestT
	info.CVRight, info.CVWrong, info.CVGain, info.FoldGains = bestRight, bestWrong, best, bestFolds
	g.Fit = &info
	return g, nil
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
