package eval

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSummarise(t *testing.T) {
	rel := func(d string) map[string]bool { return map[string]bool{d: true} }
	outs := []Outcome{
		{Ranked: []string{"a", "b"}, Relevant: rel("a"), Subset: "new", Latency: 10 * time.Millisecond, Route: "copy"},
		{Ranked: []string{"x", "y", "b"}, Relevant: rel("b"), Subset: "new", Latency: 30 * time.Millisecond, Route: "parametric"},
		{Ranked: []string{"x"}, Relevant: rel("z"), Subset: "seen", Latency: 20 * time.Millisecond, Fallback: true, Route: "bm25"},
	}
	s := Summarise(outs, "new")
	require.Equal(t, 2, s.N)
	require.InDelta(t, 0.5, s.Hits1, 1e-12)
	require.InDelta(t, 1.0, s.Hits10, 1e-12)
	require.InDelta(t, (1+1.0/3)/2, s.MRR, 1e-12)
	require.InDelta(t, 0.5, s.CopyShare, 1e-12)
	require.Equal(t, 10*time.Millisecond, s.P50)
	require.Equal(t, 30*time.Millisecond, s.P95)

	all := Summarise(outs, "")
	require.Equal(t, 3, all.N)
	require.InDelta(t, 1.0/3, all.FallbackRate, 1e-12)
	require.Zero(t, Summarise(outs, "none").N)

	var buf bytes.Buffer
	WriteTable(&buf, []Arm{{Name: "bm25", Outcomes: outs}}, []string{"new"})
	require.Contains(t, buf.String(), "| bm25 | 2 | new | 0.500 | 1.000 | 0.667 |")
}
