// Package eval scores rankings against relevance labels (Hits@k, MRR@10, latency percentiles) and
// renders the side-by-side table that `icicle compare` prints. It is pure and knows nothing of HTTP or
// Elasticsearch.
package eval

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// Outcome is one query's ranking by one arm.
type Outcome struct {
	// Ranked holds docids best first.
	Ranked []string
	// Relevant holds the relevant docids.
	Relevant map[string]bool
	// Subset names the query's group, e.g. "seen" or "new".
	Subset string
	// Latency is the arm's time for the query.
	Latency time.Duration
	// Route is the top result's provenance ("copy", "parametric", "bm25"); Fallback is set when the
	// arm fell back to BM25.
	Route    string
	Fallback bool
}

// rank returns the 1-based rank of the first relevant docid, 0 if none.
func (o Outcome) rank() int {
	for i, d := range o.Ranked {
		if o.Relevant[d] {
			return i + 1
		}
	}
	return 0
}

// Summary aggregates outcomes.
type Summary struct {
	N                  int
	Hits1, Hits10, MRR float64
	P50, P95, P99      time.Duration
	CopyShare          float64
	FallbackRate       float64
}

// Summarise scores the outcomes whose Subset is subset ("" takes all).
func Summarise(outs []Outcome, subset string) Summary {
	var s Summary
	var lat []time.Duration
	var copies, fallbacks int
	for _, o := range outs {
		if subset != "" && o.Subset != subset {
			continue
		}
		s.N++
		r := o.rank()
		if r == 1 {
			s.Hits1++
		}
		if r >= 1 && r <= 10 {
			s.Hits10++
			s.MRR += 1 / float64(r)
		}
		if o.Route == "copy" {
			copies++
		}
		if o.Fallback {
			fallbacks++
		}
		lat = append(lat, o.Latency)
	}
	if s.N == 0 {
		return s
	}
	n := float64(s.N)
	s.Hits1, s.Hits10, s.MRR = s.Hits1/n, s.Hits10/n, s.MRR/n
	s.CopyShare, s.FallbackRate = float64(copies)/n, float64(fallbacks)/n
	slices.Sort(lat)
	s.P50, s.P95, s.P99 = Percentile(lat, 0.50), Percentile(lat, 0.95), Percentile(lat, 0.99)
	return s
}

// Percentile returns the nearest-rank percentile p (0..1] of sorted durations.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Arm is one named column group of the table.
type Arm struct {
	Name     string
	Outcomes []Outcome
}

// WriteTable writes a markdown table: one row per arm and subset.
func WriteTable(w io.Writer, arms []Arm, subsets []string) {
	fmt.Fprintln(w, "| arm | queries | subset | Hits@1 | Hits@10 | MRR@10 | copy top-1 | fallback | p50 ms | p95 ms |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, sub := range subsets {
		for _, a := range arms {
			s := Summarise(a.Outcomes, sub)
			name := sub
			if name == "" {
				name = "all"
			}
			fmt.Fprintf(w, "| %s | %d | %s | %.3f | %.3f | %.3f | %.2f | %.2f | %.1f | %.1f |\n", a.Name, s.N, name,
				s.Hits1, s.Hits10, s.MRR, s.CopyShare, s.FallbackRate, msf(s.P50), msf(s.P95))
		}
	}
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
