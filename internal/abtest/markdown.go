package abtest

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// WriteMarkdown writes the report as Markdown: the verdict first, then the figures behind it.
func WriteMarkdown(w io.Writer, r Report) error {
	var b strings.Builder
	title := "# A/B report"
	if r.Experiment != "" {
		title += ": experiment " + r.Experiment
	}
	b.WriteString(title + "\n\n")
	b.WriteString("Arm A is BM25 over the whole index, as Elasticsearch ranks it: what a team runs today. Arm B is the sidecar's " +
		"answer: its first stage (BM25 fused with the dense encoder, or BM25 alone without one) and the model above it.\n\n")
	arms := slices.Sorted(maps.Keys(r.Impressions))
	var parts []string
	for _, a := range arms {
		parts = append(parts, fmt.Sprintf("%s %d", cmp.Or(a, "(experiment off)"), r.Impressions[a]))
	}
	fmt.Fprintf(&b, "Impressions: %s. Experiments in the log: %s.\n\n", cmp.Or(strings.Join(parts, ", "), "none"),
		cmp.Or(strings.Join(r.Experiments, ", "), "none"))
	j := r.Join
	fmt.Fprintf(&b, "Clicks: %d read, %d joined; %d without an impression in the log, %d on a reused request id, "+
		"%d on a result not shown, %d duplicates, %d of another experiment; %d at a position that did not match the docid (the docid's rank was used).\n\n",
		j.Clicks, j.Joined, j.Orphans, j.Ambiguous, j.NotShown, j.Duplicates, j.OtherExperiment, j.PositionMismatch)
	for _, bad := range []struct {
		what string
		l    BadLines
	}{{"impression", r.BadImpressions}, {"click", r.BadClicks}} {
		if bad.l.Count > 0 {
			fmt.Fprintf(&b, "Skipped %d unreadable %s lines (first: %s).\n\n", bad.l.Count, bad.what, bad.l.First)
		}
	}
	if r.DuplicateIDs > 0 {
		fmt.Fprintf(&b, "Skipped %d impressions whose impression_id an earlier line had.\n\n", r.DuplicateIDs)
	}
	if it := r.Interleaving; it != nil {
		fmt.Fprintf(&b, "## Team-draft interleaving\n\n**%s**\n\n", interleavingVerdict(it, r.Alpha))
		b.WriteString("| impressions | clicked | no click | wins A | wins B | ties | credited clicks A | credited clicks B | Δ (B) |\n|---|---|---|---|---|---|---|---|---|\n")
		fmt.Fprintf(&b, "| %d | %d | %d | %d | %d | %d | %d | %d | %+.3f |\n\n", it.Impressions, it.Clicked, it.NoClick,
			it.WinsA, it.WinsB, it.Ties, it.CreditA, it.CreditB, it.Preference)
		t := it.Test
		fmt.Fprintf(&b, "Sign test over the %d impressions with a winner (ties left out): B won %d, share %.3f "+
			"(Wilson 95%% CI %.3f–%.3f); exact two-sided binomial p = %.4g; normal approximation z = %+.2f.\n\n",
			t.N, t.K, t.ShareB.Value, t.ShareB.Low, t.ShareB.High, t.P, t.Z)
	}
	if s := r.Split; s != nil {
		b.WriteString("## Split\n\n")
		fmt.Fprintf(&b, "**%s**\n\n", splitVerdict(s, r.Alpha))
		b.WriteString("| arm | impressions | clicked | clicks | CTR | CTR 95% CI (Wilson) | MRR of clicks | MRR 95% CI (normal) |\n|---|---|---|---|---|---|---|---|\n")
		for _, row := range []struct {
			arm string
			st  ArmStats
		}{{"A (BM25)", s.A}, {"B (ICICLE)", s.B}} {
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %.4f | %.4f–%.4f | %.4f | %.4f–%.4f |\n", row.arm, row.st.Impressions,
				row.st.Clicked, row.st.Clicks, row.st.CTR.Value, row.st.CTR.Low, row.st.CTR.High,
				row.st.MRR.Value, row.st.MRR.Low, row.st.MRR.High)
		}
		fmt.Fprintf(&b, "\nB − A: CTR %+.4f (95%% CI %+.4f to %+.4f, two-proportion z = %+.2f, p = %.4g); "+
			"MRR %+.4f (95%% CI %+.4f to %+.4f, Welch z = %+.2f, p = %.4g).\n\n",
			s.CTRDiff.Value, s.CTRDiff.Low, s.CTRDiff.High, s.CTRDiff.Z, s.CTRDiff.P,
			s.MRRDiff.Value, s.MRRDiff.Low, s.MRRDiff.High, s.MRRDiff.Z, s.MRRDiff.P)
		b.WriteString("CTR counts impressions with at least one click; MRR is 1/rank of the highest-ranked click, 0 without one. " +
			"Impressions are treated as independent: with per-user keys, a heavy user's impressions are correlated and the intervals are too narrow.\n\n")
	}
	if sim := r.Simulation; sim != nil {
		o := sim.Oracle
		fmt.Fprintf(&b, "## Clicks simulated from qrels\n\n%d clicks drawn from %s: a result at rank r is examined with probability 1/r^%g "+
			"and clicked with probability %g when relevant, %g otherwise (seed %d). %d impressions answered a query without labels.\n\n",
			sim.Clicks, sim.Qrels, sim.Model.Decay, sim.Model.Relevant, sim.Model.Noise, sim.Model.Seed, o.Unlabelled)
		if o.FirstRelevantA+o.FirstRelevantB+o.FirstRelevantNone > 0 {
			fmt.Fprintf(&b, "Interleaved impressions whose highest-ranked relevant result team A placed: %d; team B: %d; none shown: %d.\n\n",
				o.FirstRelevantA, o.FirstRelevantB, o.FirstRelevantNone)
		}
		if o.MRRA.N+o.MRRB.N > 0 {
			fmt.Fprintf(&b, "Split impressions' MRR of the first relevant result: A %.4f (n %d), B %.4f (n %d).\n\n",
				o.MRRA.Value, o.MRRA.N, o.MRRB.Value, o.MRRB.N)
		}
		agree := "does not agree"
		if sim.Agrees {
			agree = "agrees"
		}
		fmt.Fprintf(&b, "**The qrels favour arm %s; the report names %s: it %s.**\n\n", cmp.Or(o.Favoured, "neither"),
			cmp.Or(sim.Verdict, "no winner"), agree)
	}
	if r.Interleaving == nil && r.Split == nil {
		b.WriteString("No impressions of an A/B arm: nothing to compare (is ab.enabled on, and the right -experiment chosen?).\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func interleavingVerdict(it *Interleaving, alpha float64) string {
	t := it.Test
	switch {
	case t.N == 0:
		return "No impression with a winner yet: no verdict."
	case it.Winner != "":
		return fmt.Sprintf("Arm %s wins: %d of %d non-tied impressions won by B (binomial sign test, two-sided p = %.4g < %.2g).",
			it.Winner, t.K, t.N, t.P, alpha)
	default:
		return fmt.Sprintf("No significant difference: %d of %d non-tied impressions won by B (binomial sign test, two-sided p = %.4g ≥ %.2g).",
			t.K, t.N, t.P, alpha)
	}
}

func splitVerdict(s *Split, alpha float64) string {
	say := func(metric string, w Arm, d Diff) string {
		if w == "" {
			return fmt.Sprintf("%s: no significant difference (p = %.4g ≥ %.2g)", metric, d.P, alpha)
		}
		return fmt.Sprintf("%s: arm %s is higher (p = %.4g)", metric, w, d.P)
	}
	return say("CTR", s.CTRWinner, s.CTRDiff) + "; " + say("MRR", s.MRRWinner, s.MRRDiff) + "."
}
