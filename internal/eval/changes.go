package eval

import (
	"fmt"
	"io"
	"math"
)

// Changes count, over the queries both arms answered, how often the second arm's top-1 differs from the
// first's and whether the change was right (its top relevant, the first's not) or wrong (the reverse).
// Against arm A (BM25 over all documents) this is the gate's value: Right - Wrong must not be negative.
type Changes struct {
	Queries int `json:"queries"`
	Changed int `json:"changed"`
	Right   int `json:"right"`
	Wrong   int `json:"wrong"`
}

// Gain is Right - Wrong: the change in Hits@1 counts.
func (c Changes) Gain() int { return c.Right - c.Wrong }

// SignP is the two-sided exact sign test's p-value of Right against Wrong (ties, the changes that were
// neither, left out): the chance of a split at least this uneven if a change were as likely right as
// wrong. 1 when nothing changed.
func (c Changes) SignP() float64 { return SignTest(c.Right, c.Wrong) }

// SignTest is the two-sided exact binomial test of k successes against n-k failures at p = 1/2, for
// wins and losses.
func SignTest(wins, losses int) float64 {
	n := wins + losses
	if n == 0 {
		return 1
	}
	k := min(wins, losses)
	// P(X <= k) for X ~ Binomial(n, 1/2), in logs to stay finite for large n.
	sum := 0.0
	for i := 0; i <= k; i++ {
		lg, _ := math.Lgamma(float64(n + 1))
		l1, _ := math.Lgamma(float64(i + 1))
		l2, _ := math.Lgamma(float64(n - i + 1))
		sum += math.Exp(lg - l1 - l2 - float64(n)*math.Ln2)
	}
	return min(1, 2*sum)
}

// TopChanges compares b's top-1 with a's per subset (SubsetSeen, SubsetNew, SubsetAll), matching queries
// by id; queries that failed in either arm are left out.
func TopChanges(a, b Arm) map[string]Changes {
	first := make(map[string]Outcome, len(a.Outcomes))
	for _, o := range a.Outcomes {
		first[o.QueryID] = o
	}
	out := map[string]Changes{}
	for _, ob := range b.Outcomes {
		oa, ok := first[ob.QueryID]
		if !ok || oa.Err != "" || ob.Err != "" {
			continue
		}
		for _, sub := range []string{ob.Subset, SubsetAll} {
			c := out[sub]
			c.Queries++
			topA, topB := top(oa), top(ob)
			if topA != topB {
				c.Changed++
				switch ra, rb := oa.Relevant[topA], ob.Relevant[topB]; {
				case rb && !ra:
					c.Right++
				case ra && !rb:
					c.Wrong++
				}
			}
			out[sub] = c
		}
	}
	return out
}

func top(o Outcome) string {
	if len(o.Ranked) == 0 {
		return ""
	}
	return o.Ranked[0]
}

// writeChanges writes the top-1 changes of arm b against arm a (the new ranking against the old).
func writeChanges(w io.Writer, a, b Arm) {
	ch := TopChanges(a, b)
	fmt.Fprintf(w, "\n### Top-1 changes: %s against %s\n\n", b.Name, a.Name)
	fmt.Fprintln(w, "| subset | queries | top-1 changed | right (new relevant, old not) | wrong (old relevant, new not) | gain (right - wrong) | sign test p |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, sub := range []string{SubsetSeen, SubsetNew, SubsetAll} {
		c := ch[sub]
		if c.Queries == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %+d | %.3f |\n", sub, c.Queries, c.Changed, c.Right, c.Wrong, c.Gain(), c.SignP())
	}
}
