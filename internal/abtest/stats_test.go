package abtest

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSignTestKnownValues checks the exact two-sided binomial p-value against values computed by hand:
// 2·Σ_{i≤min(k,n-k)} C(n,i)/2^n, capped at 1.
func TestSignTestKnownValues(t *testing.T) {
	tests := []struct {
		k, n int
		want float64
		how  string
	}{
		{9, 10, 22.0 / 1024, "2·(1+10)/2^10"},
		{1, 10, 22.0 / 1024, "symmetric"},
		{15, 20, 2 * 21700.0 / 1048576, "2·(1+20+190+1140+4845+15504)/2^20"},
		{5, 5, 2.0 / 32, "2·1/2^5"},
		{0, 5, 2.0 / 32, "symmetric"},
		{2, 6, 44.0 / 64, "2·(1+6+15)/2^6"},
		{3, 6, 1, "k = n/2"},
		{0, 1, 1, "2·1/2 = 1"},
		{0, 0, 1, "no trials"},
		{60, 100, 0.05688793364098079, "2·P(X≤40), Binomial(100, 1/2)"},
		{70, 100, 7.85013964559367e-05, "2·P(X≤30)"},
	}
	for _, tt := range tests {
		require.InDelta(t, tt.want, SignTestTwoSided(tt.k, tt.n), 1e-12*max(1, tt.want), "k=%d n=%d: %s", tt.k, tt.n, tt.how)
	}
	// Large n stays finite and close to the normal approximation (z = 4: p ≈ 6.3e-5).
	p := SignTestTwoSided(5200, 10000)
	require.InDelta(t, math.Erfc(4/math.Sqrt2), p, 1e-5)
	require.Greater(t, p, 0.0)
	require.InDelta(t, 4.0, SignZ(5200, 10000), 1e-12)
	require.Equal(t, 0.0, SignZ(0, 0))
}

func TestWilson(t *testing.T) {
	tests := []struct {
		k, n      int
		low, high float64
	}{
		{0, 10, 0, 0.2775327998628892},
		{5, 10, 0.236593090512564, 0.7634069094874361},
		{9, 10, 0.5958499732047615, 0.9821237869049271},
	}
	for _, tt := range tests {
		iv := Wilson(tt.k, tt.n)
		require.InDelta(t, float64(tt.k)/float64(tt.n), iv.Value, 1e-12)
		require.InDelta(t, tt.low, iv.Low, 1e-12, "%d/%d", tt.k, tt.n)
		require.InDelta(t, tt.high, iv.High, 1e-12, "%d/%d", tt.k, tt.n)
	}
	require.Equal(t, Interval{Low: 0, High: 1}, Wilson(0, 0), "no observations: anything is possible")
}

func TestMeanNormal(t *testing.T) {
	// Mean 0.5, sample sd sqrt(1/3) over 4 values: half-width 1.96·sqrt(1/3)/2.
	iv := MeanNormal([]float64{0, 1, 0, 1}, -1, 2)
	half := z95 * math.Sqrt(1.0/3) / 2
	require.InDelta(t, 0.5, iv.Value, 1e-12)
	require.InDelta(t, 0.5-half, iv.Low, 1e-12)
	require.InDelta(t, 0.5+half, iv.High, 1e-12)
	require.Equal(t, Interval{Value: 1, Low: 1, High: 1, N: 1}, MeanNormal([]float64{1}, 0, 1))
	require.Equal(t, 0.0, MeanNormal([]float64{0.01, 0.02, 0.9}, 0, 1).Low, "clipped to the range")
}

func TestDiffs(t *testing.T) {
	// 30/100 vs 50/100: pooled p 0.4, se sqrt(0.24·0.02) → z = 0.2/0.069282 = 2.8868.
	d := ProportionDiff(30, 100, 50, 100)
	require.InDelta(t, 0.2, d.Value, 1e-12)
	require.InDelta(t, 0.2/math.Sqrt(0.24*0.02), d.Z, 1e-9)
	require.InDelta(t, math.Erfc(d.Z/math.Sqrt2), d.P, 1e-12)
	require.Less(t, d.P, 0.01)
	require.Equal(t, Diff{P: 1}, ProportionDiff(0, 0, 3, 10), "an empty arm")
	require.Equal(t, 1.0, ProportionDiff(0, 10, 0, 10).P, "no clicks anywhere")

	m := MeanDiff([]float64{0, 0, 1, 1}, []float64{1, 1, 1, 0.5})
	require.InDelta(t, 0.875-0.5, m.Value, 1e-12)
	require.Greater(t, m.Z, 0.0)
	require.Equal(t, Diff{P: 1}, MeanDiff(nil, []float64{1}))
}
