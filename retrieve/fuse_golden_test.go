package retrieve

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

var update = flag.Bool("update", false, "rewrite testdata/fusion_golden.json (its cases and Fuse's answers)")

// fusionGolden is testdata/fusion_golden.json: per case a first stage's two lists, the cosines and the
// params, and the ranking Fuse makes of them. training/tests/test_fusion.py holds the Python fusion that
// builds the reader's training lists (icicle.readerdata.fuse) to the same rankings.
type fusionGolden struct {
	Comment string       `json:"_comment"`
	Cases   []fusionCase `json:"cases"`
}

type fusionCase struct {
	Name   string `json:"name"`
	Params Params `json:"params"`
	// BM25 is BM25's list, best first; KNN the kNN's docids, nearest first.
	BM25 []scored `json:"bm25"`
	KNN  []string `json:"knn"`
	// Dense is the exact cosine of each document that has a vector.
	Dense map[string]float64 `json:"dense"`
	// Want is Fuse's ranking: docid and fused score, best first.
	Want []scored `json:"want"`
}

// scored is a docid and a score, written as a pair: ["doc042", 0.87].
type scored struct {
	DocID string
	Score float64
}

func (s scored) MarshalJSON() ([]byte, error) { return json.Marshal([]any{s.DocID, s.Score}) }

func (s *scored) UnmarshalJSON(b []byte) error {
	var pair []json.RawMessage
	if err := json.Unmarshal(b, &pair); err != nil || len(pair) != 2 {
		return fmt.Errorf("want [docid, score], got %s", b)
	}
	if err := json.Unmarshal(pair[0], &s.DocID); err != nil {
		return err
	}
	return json.Unmarshal(pair[1], &s.Score)
}

// marshal writes one case a line, so that a change to Fuse shows in a diff as the cases it moved.
func (g fusionGolden) marshal(t *testing.T) []byte {
	comment, err := json.Marshal(g.Comment)
	require.NoError(t, err)
	out := append([]byte(`{"_comment": `), comment...)
	out = append(out, `, "cases": [`...)
	for i, c := range g.Cases {
		line, err := json.Marshal(c)
		require.NoError(t, err)
		if i > 0 {
			out = append(out, ',')
		}
		out = append(append(out, "\n  "...), line...)
	}
	return append(out, "\n]}\n"...)
}

func (c fusionCase) fuse() []scored {
	bm := make([]adapter.Hit, len(c.BM25))
	for i, h := range c.BM25 {
		bm[i] = adapter.Hit{ID: h.DocID, DocID: h.DocID, Score: h.Score, Rank: i + 1, BM25: h.Score, BM25Rank: i + 1}
	}
	knn := make([]adapter.Hit, len(c.KNN))
	for i, d := range c.KNN {
		knn[i] = adapter.Hit{ID: d, DocID: d, Score: c.Dense[d], Rank: i + 1}
	}
	got := Fuse(bm, knn, c.Dense, c.Params)
	out := make([]scored, len(got))
	for i, h := range got {
		out[i] = scored{h.DocID, h.Score}
	}
	return out
}

// TestFuseGolden checks Fuse against testdata/fusion_golden.json, which Python's fusion is checked against
// too; -update rewrites the file from goldenCases.
func TestFuseGolden(t *testing.T) {
	path := filepath.Join("testdata", "fusion_golden.json")
	if *update {
		g := fusionGolden{Comment: "Written by `go test ./retrieve -run TestFuseGolden -update` (retrieve/fuse_golden_test.go): " +
			"the first stage's fusion (retrieve.Fuse) of fixed lists; training/tests/test_fusion.py checks Python's against it.",
			Cases: goldenCases()}
		for i := range g.Cases {
			g.Cases[i].Want = g.Cases[i].fuse()
		}
		require.NoError(t, os.WriteFile(path, g.marshal(t), 0o644))
	}
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var g fusionGolden
	require.NoError(t, json.Unmarshal(raw, &g))
	require.GreaterOrEqual(t, len(g.Cases), 10)
	methods := map[string]bool{}
	for _, c := range g.Cases {
		methods[c.Params.Method] = true
		t.Run(c.Name, func(t *testing.T) {
			require.NoError(t, c.Params.Validate())
			require.Equal(t, c.Want, c.fuse())
		})
	}
	require.Equal(t, map[string]bool{MethodBM25: true, MethodLinear: true, MethodRRF: true}, methods)
}

// goldenCases are the file's inputs: hand-made lists for each rule of Fuse (ties, a document without a
// vector, a document only the kNN found, cosines all alike), then lists shaped like nq_qed's (a hundred BM25
// hits, ten kNN hits, cosines of bge-small) under the served params and others.
func goldenCases() []fusionCase {
	served := Params{Method: MethodLinear, DenseWeight: 0.9, RRFK: 60, Depth: 100, KNN: 10} // data/nq_qed/first_stage.json
	with := func(m string, w, k float64) Params {                                           // a fixed weight
		return Params{Method: m, DenseWeight: w, RRFK: k, Depth: 100, KNN: 10}
	}
	spread := func(m string, w, s float64) Params { // w + s x the spread
		p := with(m, w, 60)
		p.DenseWeightSpread = s
		return p
	}
	bm := func(pairs ...any) []scored {
		out := make([]scored, 0, len(pairs)/2)
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, scored{pairs[i].(string), pairs[i+1].(float64)})
		}
		return out
	}
	abc := bm("a", 10.0, "b", 9.0, "c", 8.0)
	abcDense := map[string]float64{"a": 0.5, "b": 0.3, "c": 0.9, "k": 0.8}
	cases := []fusionCase{
		{Name: "linear, half", Params: with(MethodLinear, 0.5, 60), BM25: abc, KNN: []string{"c", "k"}, Dense: abcDense},
		{Name: "linear, dense alone", Params: with(MethodLinear, 1, 60), BM25: abc, KNN: []string{"c", "k"}, Dense: abcDense},
		{Name: "linear, BM25 alone", Params: with(MethodLinear, 0, 60), BM25: abc, KNN: []string{"c", "k"}, Dense: abcDense},
		{Name: "rrf, k 1", Params: with(MethodRRF, 0.5, 1), BM25: abc, KNN: []string{"c", "k"}, Dense: abcDense},
		{Name: "bm25", Params: with(MethodBM25, 0.5, 60), BM25: abc, KNN: []string{"c", "k"}, Dense: abcDense},
		// All four fuse to 0.5 (b 0.5 + 0, a 0.25 + 0.25, y and x 0 + 0.5): the better BM25 rank first, then
		// the kNN's own by docid.
		{Name: "ties: BM25 rank, then docid", Params: with(MethodLinear, 0.5, 60),
			BM25: bm("b", 10.0, "a", 5.0), KNN: []string{"y", "x"},
			Dense: map[string]float64{"b": 0.25, "a": 0.5, "y": 0.75, "x": 0.75}},
		{Name: "a hit without a vector", Params: with(MethodLinear, 0.6, 60), BM25: bm("a", 3.0, "b", 2.5), KNN: []string{},
			Dense: map[string]float64{"b": 0.9}},
		{Name: "cosines all alike", Params: served, BM25: bm("a", 7.0, "b", 7.0, "c", 1.5), KNN: []string{"c"},
			Dense: map[string]float64{"a": 0.61, "b": 0.61, "c": 0.61}},
		{Name: "kNN alone", Params: served, BM25: []scored{}, KNN: []string{"q", "p", "r"}, Dense: map[string]float64{"q": 0.8, "p": 0.7, "r": 0.2}},
		{Name: "rrf, a hit without a vector among negative cosines", Params: with(MethodRRF, 0.7, 2),
			BM25: bm("a", 4.0, "b", 3.0, "c", 2.0), KNN: []string{"d"},
			Dense: map[string]float64{"a": -0.2, "b": -0.1, "d": 0.3}},
		{Name: "empty", Params: served, BM25: []scored{}, KNN: []string{}, Dense: map[string]float64{}},
		// Four cosines: the spread is 0.9 - 0.3 (the lowest, fewer than ten), w = 0.2 + 0.5 x 0.6 = 0.5, as in
		// "linear, half"; at 0.55 + 3 x 0.6 it is clamped to 1, as in "linear, dense alone".
		{Name: "linear, weight from the spread", Params: spread(MethodLinear, 0.2, 0.5), BM25: abc, KNN: []string{"c", "k"}, Dense: abcDense},
		{Name: "linear, weight from the spread, clamped", Params: spread(MethodLinear, 0.55, 3), BM25: abc, KNN: []string{"c", "k"}, Dense: abcDense},
		{Name: "rrf, weight from the spread", Params: spread(MethodRRF, 0.1, 1), BM25: abc, KNN: []string{"c", "k"}, Dense: abcDense},
		{Name: "linear, one cosine: no spread", Params: spread(MethodLinear, 0.6, 3), BM25: bm("a", 3.0, "b", 2.5), KNN: []string{},
			Dense: map[string]float64{"b": 0.9}},
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for i, p := range []Params{served, served, served, with(MethodLinear, 0.8, 60), with(MethodLinear, 0.3, 60), with(MethodRRF, 0.5, 60),
		with(MethodBM25, 0.9, 60), DefaultParams, DefaultParams, spread(MethodLinear, 0.4, 6)} {
		c := nqLike(rng)
		c.Name, c.Params = fmt.Sprintf("nq_qed-like %d, %s %g", i+1, p.Method, p.DenseWeight), p
		if p.DenseWeightSpread != 0 {
			c.Name += fmt.Sprintf(" + %g x spread", p.DenseWeightSpread)
		}
		cases = append(cases, c)
	}
	return cases
}

// nqLike is one query's lists as the first stage sees them on nq_qed: BM25's top 100 of 400 documents
// (falling scores, some equal, as for near-duplicate passages), the kNN's top 10 by cosine over those and ten
// documents BM25 did not return, and each document's cosine (some equal too), rounded as float32 cosines print.
func nqLike(rng *rand.Rand) fusionCase {
	perm := rng.Perm(400)
	c := fusionCase{Dense: map[string]float64{}}
	score, cos := 14+16*rng.Float64(), 0.0
	var all []string
	for i, n := range perm[:110] {
		d := fmt.Sprintf("doc%03d", n)
		if i < 100 {
			if rng.IntN(8) > 0 {
				score -= 0.3 * rng.Float64()
			}
			c.BM25 = append(c.BM25, scored{d, math.Round(score*1e4) / 1e4})
		}
		if i == 0 || rng.IntN(10) > 0 {
			cos = math.Round((0.55+0.35*rng.Float64())*1e6) / 1e6
		}
		c.Dense[d] = cos
		all = append(all, d)
	}
	slices.SortStableFunc(all, func(a, b string) int { return cmp.Compare(c.Dense[b], c.Dense[a]) })
	c.KNN = all[:10]
	return c
}
