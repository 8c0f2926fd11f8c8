package abtest

import (
	"math"
)

// z95 is the standard normal quantile of 0.975: the half-width of a two-sided 95% interval in sd.
const z95 = 1.959963984540054

// Interval is an estimate with its 95% confidence interval, over N observations.
type Interval struct {
	Value float64 `json:"value"`
	Low   float64 `json:"low"`
	High  float64 `json:"high"`
	N     int     `json:"n"`
}

// SignTestTwoSided is the exact two-sided p-value of k successes in n trials under Binomial(n, 1/2): twice
// the probability of a result at least as far from n/2 as k, capped at 1; 1 when n is 0. It sums the
// binomial terms in log space, so it stays exact (to float64) for any n, not only small ones.
func SignTestTwoSided(k, n int) float64 {
	if n <= 0 || k < 0 || k > n {
		return 1
	}
	m := min(k, n-k)
	if 2*m == n {
		return 1
	}
	lgN, _ := math.Lgamma(float64(n + 1))
	var tail float64
	for i := 0; i <= m; i++ {
		a, _ := math.Lgamma(float64(i + 1))
		b, _ := math.Lgamma(float64(n - i + 1))
		tail += math.Exp(lgN - a - b - float64(n)*math.Ln2)
	}
	return min(1, 2*tail)
}

// SignZ is the normal approximation's statistic of k successes in n fair trials: (k - n/2) / sqrt(n/4);
// 0 when n is 0.
func SignZ(k, n int) float64 {
	if n <= 0 {
		return 0
	}
	return (float64(k) - float64(n)/2) / math.Sqrt(float64(n)/4)
}

// Wilson is the proportion k/n with its Wilson score 95% interval (good at small n and near 0 or 1,
// where the normal interval is not); for n = 0 the value is 0 and the interval [0, 1].
func Wilson(k, n int) Interval {
	if n <= 0 {
		return Interval{Low: 0, High: 1}
	}
	p, nf, z2 := float64(k)/float64(n), float64(n), z95*z95
	den := 1 + z2/nf
	center := (p + z2/(2*nf)) / den
	half := z95 * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf)) / den
	return Interval{Value: p, Low: max(0, center-half), High: min(1, center+half), N: n}
}

// MeanNormal is the mean of xs with the normal 95% interval mean ± 1.96·s/√n (s the sample standard
// deviation), clipped to [lo, hi]. With fewer than two values the interval is the mean itself.
func MeanNormal(xs []float64, lo, hi float64) Interval {
	n := len(xs)
	if n == 0 {
		return Interval{Low: lo, High: hi}
	}
	mean, v := meanVar(xs)
	iv := Interval{Value: mean, Low: mean, High: mean, N: n}
	if n > 1 {
		half := z95 * math.Sqrt(v/float64(n))
		iv.Low, iv.High = max(lo, mean-half), min(hi, mean+half)
	}
	return iv
}

// meanVar is the mean and the sample variance (n-1); the variance is 0 below two values.
func meanVar(xs []float64) (float64, float64) {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, ss / float64(len(xs)-1)
}

// Diff is a difference B - A with its 95% interval, a z statistic and its two-sided normal p-value.
type Diff struct {
	Value float64 `json:"value"`
	Low   float64 `json:"low"`
	High  float64 `json:"high"`
	Z     float64 `json:"z"`
	P     float64 `json:"p"`
}

// ProportionDiff compares kb/nb with ka/na: the two-proportion z test with the pooled variance (the
// statistic) and the unpooled (Wald) interval of the difference. An arm without observations gives
// z 0, p 1.
func ProportionDiff(ka, na, kb, nb int) Diff {
	if na == 0 || nb == 0 {
		return Diff{P: 1}
	}
	pa, pb := float64(ka)/float64(na), float64(kb)/float64(nb)
	d := Diff{Value: pb - pa, P: 1}
	pool := float64(ka+kb) / float64(na+nb)
	if se := math.Sqrt(pool * (1 - pool) * (1/float64(na) + 1/float64(nb))); se > 0 {
		d.Z = d.Value / se
		d.P = pValue(d.Z)
	}
	half := z95 * math.Sqrt(pa*(1-pa)/float64(na)+pb*(1-pb)/float64(nb))
	d.Low, d.High = d.Value-half, d.Value+half
	return d
}

// MeanDiff compares the means of b and a: Welch's z (unequal variances; the normal distribution stands
// in for Student's t, fine at the hundreds of impressions an experiment has) and its interval.
func MeanDiff(a, b []float64) Diff {
	if len(a) == 0 || len(b) == 0 {
		return Diff{P: 1}
	}
	ma, va := meanVar(a)
	mb, vb := meanVar(b)
	d := Diff{Value: mb - ma, P: 1, Low: mb - ma, High: mb - ma}
	if se := math.Sqrt(va/float64(len(a)) + vb/float64(len(b))); se > 0 {
		d.Z = d.Value / se
		d.P = pValue(d.Z)
		d.Low, d.High = d.Value-z95*se, d.Value+z95*se
	}
	return d
}

// pValue is the two-sided standard normal p-value of z.
func pValue(z float64) float64 { return math.Erfc(math.Abs(z) / math.Sqrt2) }
