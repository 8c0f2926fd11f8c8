package eval

import (
	"fmt"
	"io"
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

// writeChanges writes the top-1 changes of the sidecar's /v1/search against BM25 over all documents.
func writeChanges(w io.Writer, a, b Arm) {
	ch := TopChanges(a, b)
	fmt.Fprintf(w, "\n### Top-1 changes: %s against %s\n\n", b.Name, a.Name)
	fmt.Fprintln(w, "| subset | queries | top-1 changed | right (B relevant, A not) | wrong (A relevant, B not) | gain (right - wrong) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, sub := range []string{SubsetSeen, SubsetNew, SubsetAll} {
		c := ch[sub]
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %+d |\n", sub, c.Queries, c.Changed, c.Right, c.Wrong, c.Gain())
	}
}
