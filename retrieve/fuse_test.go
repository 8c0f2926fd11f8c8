package retrieve

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

func bm25Hits(ids ...string) []adapter.Hit {
	out := make([]adapter.Hit, len(ids))
	for i, id := range ids {
		s := float64(10 - i)
		out[i] = adapter.Hit{ID: id, DocID: "d" + id, Score: s, Rank: i + 1, BM25: s, BM25Rank: i + 1}
	}
	return out
}

func order(hs []adapter.Hit) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.ID
	}
	return out
}

func TestFuse(t *testing.T) {
	// BM25 order a, b, c; the cosine prefers c, then the kNN-only k, then a, then b.
	dense := map[string]float64{"a": 0.5, "b": 0.3, "c": 0.9, "k": 0.8}
	knn := []adapter.Hit{{ID: "c", DocID: "dc", Dense: 0.9, HasDense: true}, {ID: "k", DocID: "dk", Dense: 0.8, HasDense: true}}
	tests := []struct {
		name string
		p    Params
		want []string
	}{
		{"bm25 is BM25's order", Params{Method: MethodBM25}, []string{"a", "b", "c"}},
		{"linear, all dense", Params{Method: MethodLinear, DenseWeight: 1}, []string{"c", "k", "a", "b"}},
		// w=0: BM25 alone; k has no BM25 score (0 = the minimum over the union), so last.
		{"linear, no dense", Params{Method: MethodLinear, DenseWeight: 0}, []string{"a", "b", "c", "k"}},
		// BM25 as a share of its top (10, 9, 8): a 1, b 0.9, c 0.8, k 0 (not returned by BM25); cosine
		// min-max over all: a 0.333, b 0, c 1, k 0.833. Half each: c 0.9, a 0.667, b 0.45, k 0.417.
		{"linear, half", Params{Method: MethodLinear, DenseWeight: 0.5}, []string{"c", "a", "b", "k"}},
		// RRF k=1, w=0.5: c = .5/4 + .5/2 = .375; a = .5/2 + .5/4 = .375 (tie: better BM25 rank first); k = .5/3; b = .5/3 + .5/5.
		{"rrf", Params{Method: MethodRRF, DenseWeight: 0.5, RRFK: 1}, []string{"a", "c", "b", "k"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Fuse(bm25Hits("a", "b", "c"), knn, dense, tt.p)
			require.Equal(t, tt.want, order(got))
			if tt.p.Method == MethodBM25 {
				return
			}
			for i, h := range got {
				require.Equal(t, i+1, h.Rank)
				require.Equal(t, h.ID != "k", h.BM25Rank > 0, "only BM25's hits keep a BM25 rank: %s", h.ID)
				require.True(t, h.HasDense)
			}
		})
	}
	t.Run("a hit without a vector ranks by BM25 alone", func(t *testing.T) {
		got := Fuse(bm25Hits("a", "b"), nil, map[string]float64{"b": 0.9}, Params{Method: MethodLinear, DenseWeight: 0.6})
		// a: 0.4 x 1 = 0.4 (no cosine); b: 0.4 x 0.9 + 0.6 x 1 = 0.96.
		require.Equal(t, []string{"b", "a"}, order(got))
		require.False(t, got[1].HasDense)
	})
	t.Run("empty", func(t *testing.T) {
		require.Empty(t, Fuse(nil, nil, nil, DefaultParams))
	})
}

func TestParamsValidate(t *testing.T) {
	require.NoError(t, DefaultParams.Validate())
	err := Params{Method: "sum", DenseWeight: 2, RRFK: 0, Depth: 0, KNN: -1}.Validate()
	for _, field := range []string{"method", "dense_weight", "depth", "knn"} {
		require.ErrorContains(t, err, field)
	}
	require.ErrorContains(t, Params{Method: MethodRRF, RRFK: 0, Depth: 1}.Validate(), "rrf_k")
}

func TestSpreadAndWeight(t *testing.T) {
	hits := func(cos ...float64) []adapter.Hit {
		out := []adapter.Hit{{ID: "none"}} // no vector: not counted
		for i, c := range cos {
			out = append(out, adapter.Hit{ID: string(rune('a' + i)), Dense: c, HasDense: true})
		}
		return out
	}
	require.Zero(t, Spread(hits()))
	require.Zero(t, Spread(hits(0.7)))
	require.InDelta(t, 0.4, Spread(hits(0.3, 0.7, 0.5)), 1e-12, "fewer than ten: the highest less the lowest")
	twelve := hits(0.90, 0.89, 0.88, 0.87, 0.86, 0.85, 0.84, 0.83, 0.82, 0.81, 0.10, 0.05)
	require.InDelta(t, 0.09, Spread(twelve), 1e-12, "the highest less the tenth, whatever lies below it")

	p := Params{Method: MethodLinear, DenseWeight: 0.55, DenseWeightSpread: 3}
	require.InDelta(t, 0.55, p.Weight(0), 1e-12)
	require.InDelta(t, 0.55+3*0.043, p.Weight(0.043), 1e-12)
	require.Equal(t, 1.0, p.Weight(0.2), "clamped above")
	require.Equal(t, 0.0, Params{DenseWeight: 0.1, DenseWeightSpread: -3}.Weight(0.1), "clamped below")
	require.Equal(t, 0.8, Params{DenseWeight: 0.8}.Weight(0.5), "no slope: the fixed weight")
	require.Equal(t, "0.55 + 3 x spread", p.WeightText())
	require.Equal(t, "0.1 - 3 x spread", Params{DenseWeight: 0.1, DenseWeightSpread: -3}.WeightText())
	require.Equal(t, "0.8", Params{DenseWeight: 0.8}.WeightText())

	// Fuse at the spread's weight ranks as Fuse at that weight fixed.
	dense := map[string]float64{"a": 0.5, "b": 0.3, "c": 0.9, "k": 0.8}
	knn := []adapter.Hit{{ID: "c", DocID: "dc", Dense: 0.9, HasDense: true}, {ID: "k", DocID: "dk", Dense: 0.8, HasDense: true}}
	bySpread := Fuse(bm25Hits("a", "b", "c"), knn, dense, Params{Method: MethodLinear, DenseWeight: 0.2, DenseWeightSpread: 0.5})
	fixed := Fuse(bm25Hits("a", "b", "c"), knn, dense, Params{Method: MethodLinear, DenseWeight: 0.5})
	require.Equal(t, order(fixed), order(bySpread))
	for i := range fixed {
		require.InDelta(t, fixed[i].Score, bySpread[i].Score, 1e-12)
	}

	require.ErrorContains(t, Params{Method: MethodLinear, DenseWeight: 0.5, DenseWeightSpread: 50, Depth: 10}.Validate(),
		"dense_weight_spread: 50, want -20..20")
}
