package retrieve

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// lexicalAndSemantic returns two kinds of query: on "lexical" ones BM25's first is relevant and the cosine
// prefers another; on "semantic" ones the reverse. 8 semantic, 2 lexical (samples 0 and 5, one 5-fold fold).
func lexicalAndSemantic() []Sample {
	var ss []Sample
	for i := range 10 {
		semantic := i%5 != 0
		s := Sample{QueryID: string(rune('a' + i)), BM25: bm25Hits("x", "y"), Dense: map[string]float64{"x": 0.2, "y": 0.9}}
		s.Relevant = map[string]bool{"dx": !semantic, "dy": semantic}
		ss = append(ss, s)
	}
	return ss
}

func TestFit(t *testing.T) {
	// With more semantic queries, a dense-leaning setting must win, and its held-out score must be what the
	// folds give, not the in-sample one.
	ss := lexicalAndSemantic()
	res, err := Fit(ss, Grid(100), FitOptions{Folds: 5})
	require.NoError(t, err)
	require.InDelta(t, 0.8, res.Score.Hits1, 1e-9)
	require.InDelta(t, 0.2, res.BM25.Hits1, 1e-9)
	require.Positive(t, res.Params.DenseWeight, "the cosine decides: %+v", res.Params)
	require.Equal(t, 10, res.HeldOut.N)
	require.LessOrEqual(t, res.HeldOut.Hits1, res.Score.Hits1)
	require.Equal(t, 5, res.Folds)

	_, err = Fit(nil, Grid(100), FitOptions{Folds: 5})
	require.Error(t, err)
}

// TestFitCompare: a fit is accepted only when its held-out score beats the current setting on the same queries.
func TestFitCompare(t *testing.T) {
	ss := lexicalAndSemantic()
	bm25 := Params{Method: MethodLinear, DenseWeight: 0, Depth: 100}
	dense := Params{Method: MethodLinear, DenseWeight: 1, Depth: 100}

	res, err := Fit(ss, Grid(100), FitOptions{Folds: 5})
	require.NoError(t, err)
	require.NoError(t, res.Compare(ss, bm25), "held out %+v beats BM25's 0.2", res.HeldOut)
	require.InDelta(t, 0.2, res.Current.Hits1, 1e-9)
	// Per query, held out less BM25: -1 on the two lexical queries (their fold learnt the cosine), +1 on the
	// eight semantic ones: mean 0.6, standard error sqrt((10 - 10 x 0.36) / 9 / 10).
	require.InDelta(t, 0.6, res.Gain.Estimate, 1e-9)
	require.InDelta(t, 0.6-1.96*math.Sqrt(6.4/9/10), res.Gain.Low, 1e-9)
	require.InDelta(t, 0.6+1.96*math.Sqrt(6.4/9/10), res.Gain.High, 1e-9)

	res, err = Fit(ss, Grid(100), FitOptions{Folds: 5})
	require.NoError(t, err)
	err = res.Compare(ss, dense)
	require.ErrorIs(t, err, ErrNoImprovement, "the current setting already ranks every semantic query first")
	require.ErrorContains(t, err, "against the current 0.800")
	require.InDelta(t, 0.8, res.Current.Hits1, 1e-9)
	require.Equal(t, &Interval{}, res.Gain, "the same query by query: no gain, no spread")
}

func TestEvaluateCutsToTheSetting(t *testing.T) {
	s := Sample{Relevant: map[string]bool{"dk": true}, BM25: bm25Hits("a"),
		KNN: []adapter.Hit{{ID: "k", DocID: "dk", Dense: 0.9, HasDense: true}}, Dense: map[string]float64{"a": 0.1, "k": 0.9}}
	require.InDelta(t, 0.0, Evaluate([]Sample{s}, Params{Method: MethodLinear, DenseWeight: 1, Depth: 10, KNN: 0}).Hits1, 1e-9,
		"without the kNN the relevant document is not a candidate")
	require.InDelta(t, 1.0, Evaluate([]Sample{s}, Params{Method: MethodLinear, DenseWeight: 1, Depth: 10, KNN: 10}).Hits1, 1e-9)
}

// TestFitShrinks: the anchor is kept unless the grid's best beats it by more than Z standard errors of the
// per-query difference, and the cross-validation applies the same rule in every fold.
func TestFitShrinks(t *testing.T) {
	ss := lexicalAndSemantic()
	bm25 := Params{Method: MethodLinear, DenseWeight: 0, RRFK: 60, Depth: 100}
	// On all ten, the best (the cosine) gains +1 on eight queries and -1 on two: 0.6 over a standard error
	// of sqrt(6.4/9/10) = 0.267, so 2.25 standard errors.
	res, err := Fit(ss, Grid(100), FitOptions{Folds: 5, Anchor: &bm25, Z: 1})
	require.NoError(t, err)
	require.Positive(t, res.Params.DenseWeight, "2.25 standard errors clear 1")
	require.Nil(t, res.Passed)
	require.InDelta(t, 0.8, res.Score.Hits1, 1e-9)

	res, err = Fit(ss, Grid(100), FitOptions{Folds: 5, Anchor: &bm25, Z: 3})
	require.NoError(t, err)
	require.Equal(t, bm25, res.Params, "2.25 standard errors do not clear 3")
	require.NotNil(t, res.Passed)
	require.Positive(t, res.Passed.DenseWeight)
	require.InDelta(t, 0.8, res.PassedScore.Hits1, 1e-9)
	require.InDelta(t, 0.2, res.Score.Hits1, 1e-9, "the anchor's own score")

	// At 2 the whole set clears the bar, but no fold does where both lexical queries are in training (eight
	// queries: +0.5 over 0.327, 1.53 standard errors), and the fold without them learns the cosine and is
	// tested on the two lexical ones: the rule's held-out score is 0, not the unshrunk fit's.
	res, err = Fit(ss, Grid(100), FitOptions{Folds: 5, Anchor: &bm25, Z: 2})
	require.NoError(t, err)
	require.Positive(t, res.Params.DenseWeight)
	require.InDelta(t, 0.0, res.HeldOut.Hits1, 1e-9)
	require.ErrorIs(t, res.Compare(ss, bm25), ErrNoImprovement)

	// Without an anchor, the grid's best.
	res, err = Fit(ss, Grid(100), FitOptions{Folds: 5, Z: 3})
	require.NoError(t, err)
	require.Positive(t, res.Params.DenseWeight)
	require.Nil(t, res.Passed)
}
