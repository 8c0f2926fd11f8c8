package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func rel(d string) map[string]bool { return map[string]bool{d: true} }

func ptr[T any](v T) *T { return &v }

func TestSummarise(t *testing.T) {
	outs := []Outcome{
		{Ranked: []string{"a", "b"}, Relevant: rel("a"), Subset: SubsetNew, Latency: 10 * time.Millisecond, Route: RouteCopy},
		{Ranked: []string{"x", "y", "b"}, Relevant: rel("b"), Subset: SubsetNew, Latency: 30 * time.Millisecond, Route: RouteParametric},
		{Ranked: []string{"x"}, Relevant: rel("z"), Subset: SubsetSeen, Latency: 20 * time.Millisecond, Fallback: true,
			FallbackReason: "overloaded", Route: RouteBM25},
	}
	s := Summarise(outs, SubsetNew, 10)
	require.Equal(t, 2, s.N)
	require.InDelta(t, 0.5, s.Hits1, 1e-12)
	require.InDelta(t, 1.0, s.Hits10, 1e-12)
	require.InDelta(t, (1+1.0/3)/2, s.MRR, 1e-12)
	require.Equal(t, map[string]int{RouteCopy: 1, RouteParametric: 1}, s.Routes)
	require.Equal(t, Ratio{K: 1, N: 1}, s.HitGivenCopy)
	require.Equal(t, 10.0, s.Latency.P50)
	require.Equal(t, 30.0, s.Latency.P95)
	require.Nil(t, s.RouteECE, "no router probability, no ECE")

	all := Summarise(outs, "", 10)
	require.Equal(t, 3, all.N)
	require.InDelta(t, 1.0/3, all.FallbackRate, 1e-12)
	require.Equal(t, map[string]int{"overloaded": 1}, all.Fallbacks)
	require.Zero(t, Summarise(outs, "none", 10).N)
}

func TestSummariseMRRCutsAt10(t *testing.T) {
	ranked := []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "gold"}
	s := Summarise([]Outcome{{Ranked: ranked, Relevant: rel("gold"), Subset: SubsetNew}}, "", 10)
	require.Zero(t, s.MRR, "rank 11 is outside MRR@10")
	require.Zero(t, s.Hits10)
}

func TestSummariseErrorsAreMisses(t *testing.T) {
	outs := []Outcome{
		{Ranked: []string{"a"}, Relevant: rel("a"), Subset: SubsetNew, Route: RouteCopy},
		{Relevant: rel("b"), Subset: SubsetNew, Err: "status 503"},
	}
	s := Summarise(outs, "", 10)
	require.Equal(t, 2, s.N)
	require.Equal(t, 1, s.Errors)
	require.InDelta(t, 0.5, s.Hits1, 1e-12)
	require.Equal(t, map[string]int{RouteCopy: 1}, s.Routes, "a failed request has no route")
}

// TestRoutingRecallUnderTheGate: a gated answer shows BM25's order (route bm25) while the model routed; routing
// recall reads the model's route, and the route mix still counts what was shown.
func TestRoutingRecallUnderTheGate(t *testing.T) {
	in, out := ptr(true), ptr(false)
	outs := []Outcome{
		{Subset: SubsetNew, InContext: in, Route: RouteBM25, ModelRoute: RouteCopy},
		{Subset: SubsetNew, InContext: in, Route: RouteBM25, ModelRoute: RouteParametric},
		{Subset: SubsetSeen, InContext: out, Route: RouteBM25, ModelRoute: RouteParametric},
	}
	for i := range outs {
		outs[i].Relevant = rel("g")
	}
	s := Summarise(outs, "", 10)
	require.Equal(t, Ratio{K: 1, N: 2}, s.CopyRecall)
	require.Equal(t, Ratio{K: 1, N: 1}, s.ParametricRecall)
	require.Equal(t, map[string]int{RouteBM25: 3}, s.Routes)
}

// TestRoutingRecall: copy is right when the gold is in context; parametric is right for a seen gold not in
// context; a new gold not in context has no right route and is left out; a fallback counts as a miss.
func TestRoutingRecall(t *testing.T) {
	in, out := ptr(true), ptr(false)
	outs := []Outcome{
		{Subset: SubsetNew, InContext: in, Route: RouteCopy},
		{Subset: SubsetNew, InContext: in, Route: RouteParametric},
		{Subset: SubsetNew, InContext: in, Route: RouteBM25, Fallback: true, FallbackReason: "low_confidence"},
		{Subset: SubsetNew, InContext: out, Route: RouteCopy},
		{Subset: SubsetSeen, InContext: out, Route: RouteParametric},
		{Subset: SubsetSeen, InContext: out, Route: RouteCopy},
		{Subset: SubsetSeen, InContext: out, Route: RouteParametric},
		{Subset: SubsetSeen, Route: RouteBM25}, // BM25 arm: unknown context
	}
	for i := range outs {
		outs[i].Relevant = rel("g")
	}
	s := Summarise(outs, "", 10)
	require.Equal(t, Ratio{K: 1, N: 3}, s.CopyRecall)
	require.Equal(t, Ratio{K: 2, N: 3}, s.ParametricRecall)
	require.Equal(t, Ratio{K: 3, N: 6}, s.RoutingRecall)
	require.Equal(t, Ratio{K: 3, N: 7}, s.InContext)
}

func TestPercentile(t *testing.T) {
	xs := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 5}, {0.95, 10}, {0.99, 10}, {0.1, 1}, {0.11, 2}, {1, 10}, {0, 1}} {
		require.Equal(t, c.want, Percentile(xs, c.p), "p=%v", c.p)
	}
	require.Zero(t, Percentile([]float64{}, 0.5))
	require.Equal(t, 7.0, Percentile([]float64{7}, 0.99))
}

func TestECE(t *testing.T) {
	// conf repeats c, n times with k correct.
	build := func(groups ...[3]float64) (conf []float64, ok []bool) {
		for _, g := range groups {
			for i := range int(g[1]) {
				conf = append(conf, g[0])
				ok = append(ok, i < int(g[2]))
			}
		}
		return conf, ok
	}
	for _, c := range []struct {
		name   string
		groups [][3]float64 // confidence, n, correct
		want   float64
	}{
		{"perfectly calibrated", [][3]float64{{0.8, 5, 4}, {0.35, 20, 7}, {1, 3, 3}, {0.05, 20, 1}}, 0},
		{"overconfident", [][3]float64{{0.9, 10, 6}}, 0.3},
		{"underconfident", [][3]float64{{0.55, 4, 4}}, 0.45},
		// bins [0.9,1.0): |0.6-0.9| weight 10/20; [0.5,0.6): |1-0.55| weight 10/20.
		{"weighted by bin size", [][3]float64{{0.9, 10, 6}, {0.55, 10, 10}}, 0.5*0.3 + 0.5*0.45},
	} {
		t.Run(c.name, func(t *testing.T) {
			conf, ok := build(c.groups...)
			require.InDelta(t, c.want, ECE(Reliability(conf, ok, 10)), 1e-12)
		})
	}
	require.True(t, math.IsNaN(ECE(Reliability(nil, nil, 10))))
}

func TestReliabilityBins(t *testing.T) {
	bins := Reliability([]float64{0, 0.3, 0.35, 0.999, 1, 1.2, -0.1}, []bool{true, false, true, true, false, true, true}, 10)
	require.Len(t, bins, 10)
	require.Equal(t, 2, bins[0].N, "0 and the clamped -0.1")
	require.Equal(t, 2, bins[3].N, "0.3 is the lower edge of [0.3, 0.4)")
	require.InDelta(t, 0.325, bins[3].Conf, 1e-12)
	require.InDelta(t, 0.5, bins[3].Acc, 1e-12)
	require.Equal(t, 3, bins[9].N, "0.999, 1 and the clamped 1.2")
	require.InDelta(t, 0.3, bins[3].Lo, 1e-12)
	require.InDelta(t, 0.4, bins[3].Hi, 1e-12)
}

// TestRouteECEPaper follows Appendix H by hand: z = gold in context, ẑ = p_copy >= 0.5,
// confidence max(p, 1-p).
func TestRouteECEPaper(t *testing.T) {
	type inst struct {
		p  float64
		in bool
	}
	set := []inst{
		{0.95, true}, {0.95, true}, // bin 9: conf 0.95, both right
		{0.05, false}, {0.05, true}, // ẑ = parametric, conf 0.95, one right
		{0.6, true}, {0.4, true}, // conf 0.6 each (bin 6), first right, second wrong
	}
	var conf []float64
	var ok []bool
	for _, s := range set {
		c, k := RouteConfidence(s.p, s.in)
		conf, ok = append(conf, c), append(ok, k)
	}
	// bin 9: 4 instances, conf 0.95, acc 3/4 -> |0.75-0.95| = 0.2, weight 4/6
	// bin 6: 2 instances, conf 0.6, acc 1/2 -> 0.1, weight 2/6
	require.InDelta(t, 4.0/6*0.2+2.0/6*0.1, ECE(Reliability(conf, ok, 10)), 1e-12)

	outs := make([]Outcome, len(set))
	for i, s := range set {
		outs[i] = Outcome{Subset: SubsetNew, Relevant: rel("g"), RouterProb: ptr(s.p), InContext: ptr(s.in)}
	}
	sum := Summarise(outs, "", 10)
	require.NotNil(t, sum.RouteECE)
	require.InDelta(t, 4.0/6*0.2+2.0/6*0.1, *sum.RouteECE, 1e-12)
	require.Nil(t, sum.TopECE, "no routed top-1, no top-1 ECE")
}

func TestTopECE(t *testing.T) {
	outs := []Outcome{
		{Subset: SubsetNew, Relevant: rel("g"), Ranked: []string{"g"}, Route: RouteCopy, RouterProb: ptr(0.8)},
		{Subset: SubsetNew, Relevant: rel("g"), Ranked: []string{"x"}, Route: RouteCopy, RouterProb: ptr(0.8)},
		{Subset: SubsetSeen, Relevant: rel("g"), Ranked: []string{"g"}, Route: RouteParametric, RouterProb: ptr(0.15)},
		{Subset: SubsetSeen, Relevant: rel("g"), Ranked: []string{"x"}, Route: RouteBM25, RouterProb: ptr(0.5), Fallback: true},
	}
	s := Summarise(outs, "", 10)
	// The routed three share bin [0.8, 0.9): confidences 0.8 (hit), 0.8 (miss), 1-0.15 = 0.85 (hit); the
	// fallback is left out.
	want := math.Abs(2.0/3 - (0.8+0.8+0.85)/3)
	require.NotNil(t, s.TopECE)
	require.InDelta(t, want, *s.TopECE, 1e-12)
}

func TestRatioJSON(t *testing.T) {
	b, err := json.Marshal(Ratio{K: 1, N: 4})
	require.NoError(t, err)
	require.JSONEq(t, `{"k":1,"n":4,"value":0.25}`, string(b))
	b, err = json.Marshal(Ratio{})
	require.NoError(t, err)
	require.JSONEq(t, `{"k":0,"n":0,"value":null}`, string(b))
	require.Equal(t, "– (0/0)", Ratio{}.String())
}

func testReport() Report {
	var arms []Arm
	lat := func(i int) time.Duration { return time.Duration(5+i) * time.Millisecond }
	var a, b []Outcome
	for i := range 20 {
		sub := SubsetNew
		if i%4 == 0 {
			sub = SubsetSeen
		}
		a = append(a, Outcome{Ranked: []string{"g", "x"}, Relevant: rel("g"), Subset: sub, Latency: lat(i), Route: RouteBM25})
		b = append(b, Outcome{Ranked: []string{"x", "g"}, Relevant: rel("g"), Subset: sub, Latency: 3 * lat(i), Route: RouteCopy,
			RouterProb: ptr(float64(i) / 20), InContext: ptr(i%2 == 0)})
	}
	arms = append(arms, NewArm("A: BM25", ProtocolBM25All, 0, a, 10), NewArm("B: sidecar", ProtocolSearch, 0, b, 10))
	for _, n := range []int{3, 10, 100} {
		arms = append(arms, NewArm(fmt.Sprintf("top N=%d", n), ProtocolTopN, n, b, 10))
	}
	arms = append(arms, NewArm("paper N=100", ProtocolPaper, 100, b, 10))
	return Report{Meta: Meta{Queries: map[string]int{SubsetSeen: 5, SubsetNew: 15}, Split: "dev", Bins: 10}, Arms: arms}
}

func TestWriteMarkdown(t *testing.T) {
	var buf bytes.Buffer
	testReport().WriteMarkdown(&buf)
	out := buf.String()
	require.Contains(t, out, "| A: BM25 | new | 15 | 0 | 1.000 | 1.000 | 1.000 | 0.00 / 0.00 / 0.00 / 1.00 | – (0/0) |")
	require.Contains(t, out, "| B: sidecar | all | 20 | 0 | 0.000 | 1.000 | 0.500 | 1.00 / 0.00 / 0.00 / 0.00 | 0.500 (10/20) |")
	require.Contains(t, out, "### N-shot sweep")
	require.Contains(t, out, "| D_new, gold in context (ctx) | 100 | 15 | 0.000 | 0.649 | 1.000 | 0.772 |")
}

func TestWritePlots(t *testing.T) {
	dir := t.TempDir()
	paths, err := WritePlots(dir, testReport())
	require.NoError(t, err)
	require.Len(t, paths, 3)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Equal(t, "\x89PNG", string(b[:4]), filepath.Base(p))
	}
	paths, err = WritePlots(t.TempDir(), Report{})
	require.NoError(t, err)
	require.Empty(t, paths, "nothing to draw")
}

func TestPaperContext(t *testing.T) {
	const pool = 1000
	exclude := func(i int) bool { return i == 7 || i == 8 }
	a := PaperContext("q1", 1, 100, pool, 7, exclude)
	require.Len(t, a, 100)
	require.Equal(t, a, PaperContext("q1", 1, 100, pool, 7, exclude), "deterministic")
	require.NotEqual(t, a, PaperContext("q2", 1, 100, pool, 7, exclude), "per query")
	require.NotEqual(t, a, PaperContext("q1", 2, 100, pool, 7, exclude), "per seed")
	require.Equal(t, 1, count(a, 7), "the gold once")
	require.Zero(t, count(a, 8), "excluded documents are never noise")
	distinct := map[int]bool{}
	for _, i := range a {
		require.True(t, i >= 0 && i < pool)
		distinct[i] = true
	}
	require.Len(t, distinct, 100)

	small := PaperContext("q1", 1, 10, pool, 7, exclude)
	require.Equal(t, withoutGold(a)[:9], withoutGold(small), "the noise of N=10 is a prefix of N=100's")

	noise := PaperContext("q1", 1, 100, pool, -1, exclude)
	require.Len(t, noise, 100)
	require.Zero(t, count(noise, 7)+count(noise, 8))

	require.Len(t, PaperContext("q1", 1, 100, 50, -1, nil), 50, "a small pool runs out")

	// The gold's position is uniform: over many queries each decile of 100 positions gets about a tenth.
	var deciles [10]int
	for q := range 2000 {
		deciles[slices.Index(PaperContext(fmt.Sprint("q", q), 1, 100, pool, 3, nil), 3)/10]++
	}
	for d, c := range deciles {
		require.InDelta(t, 200, c, 60, "decile %d", d) // binomial sd ~13.4: 60 is ~4.5 sd
	}
}

func count(xs []int, v int) int {
	n := 0
	for _, x := range xs {
		if x == v {
			n++
		}
	}
	return n
}

func withoutGold(xs []int) []int {
	return slices.DeleteFunc(slices.Clone(xs), func(x int) bool { return x == 7 })
}
