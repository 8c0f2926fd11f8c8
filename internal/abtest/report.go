package abtest

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// BadLines counts lines of a log that could not be read, with the first one's place and problem.
type BadLines struct {
	Count int    `json:"count"`
	First string `json:"first,omitempty"`
}

// ReadJSONL decodes each non-empty line of r as a T and passes it to add. A line that does not decode
// (a torn last line, a stray text line) is counted in bad, with name and line number, and skipped: a log
// with a bad line is still reported on. The error is for reading itself.
func ReadJSONL[T any](r io.Reader, name string, add func(T), bad *BadLines) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var v T
		if err := json.Unmarshal(line, &v); err != nil {
			if bad.Count == 0 {
				bad.First = fmt.Sprintf("%s:%d: %v", name, n, err)
			}
			bad.Count++
			continue
		}
		add(v)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return nil
}

// Options configure Analyse.
type Options struct {
	// Experiment keeps only impressions of this experiment; "" keeps them all.
	Experiment string
	// Alpha is the significance level that names a winner (default 0.05).
	Alpha float64
}

// JoinCounts says what became of every click.
type JoinCounts struct {
	// Clicks read from the click log.
	Clicks int `json:"clicks"`
	// Joined clicks credited to an impression: the result at the clicked position, or the clicked
	// docid found elsewhere in the impression (PositionMismatch).
	Joined int `json:"joined"`
	// Orphans name an impression (or request id) that is not in the impression log: a dropped or
	// rotated-away impression, or a client error. Counted, not credited.
	Orphans int `json:"orphans"`
	// Ambiguous name a request id that several impressions share (a reused request id) and no
	// impression id: they cannot be credited to one impression.
	Ambiguous int `json:"ambiguous"`
	// NotShown clicked a docid the impression did not show.
	NotShown int `json:"not_shown"`
	// PositionMismatch clicks named a position whose result is another docid; the docid's own position
	// is used.
	PositionMismatch int `json:"position_mismatch"`
	// Duplicates are further clicks on a result already clicked in the same impression (counted once).
	Duplicates int `json:"duplicates"`
	// OtherExperiment clicks belong to impressions filtered out by Options.Experiment.
	OtherExperiment int `json:"other_experiment"`
}

// Report is ab-report's answer.
type Report struct {
	Experiment  string   `json:"experiment,omitempty"`
	Experiments []string `json:"experiments_seen"`
	// Impressions read, by arm ("" is the experiment off).
	Impressions    map[Arm]int   `json:"impressions"`
	DuplicateIDs   int           `json:"duplicate_impression_ids"`
	Join           JoinCounts    `json:"join"`
	BadImpressions BadLines      `json:"bad_impression_lines"`
	BadClicks      BadLines      `json:"bad_click_lines"`
	Alpha          float64       `json:"alpha"`
	Interleaving   *Interleaving `json:"interleaving,omitempty"`
	Split          *Split        `json:"split,omitempty"`
	// Simulation is set when the clicks were drawn from qrels (SetSimulation).
	Simulation *Simulation `json:"simulation,omitempty"`
}

// Simulation describes clicks drawn from qrels, and whether the report's verdict names the arm the labels
// favour.
type Simulation struct {
	Qrels  string     `json:"qrels"`
	Model  ClickModel `json:"click_model"`
	Clicks int        `json:"clicks_drawn"`
	Oracle Oracle     `json:"oracle"`
	// Verdict is the report's winner (interleaving's, else split MRR's); Agrees says it is Oracle.Favoured.
	Verdict Arm  `json:"verdict"`
	Agrees  bool `json:"agrees"`
}

// SetSimulation records how the clicks were drawn and compares the verdict with the labels' favourite.
func (r *Report) SetSimulation(qrels string, m ClickModel, clicks int, o Oracle) {
	sim := &Simulation{Qrels: qrels, Model: m.withDefaults(), Clicks: clicks, Oracle: o}
	switch {
	case r.Interleaving != nil:
		sim.Verdict = r.Interleaving.Winner
	case r.Split != nil:
		sim.Verdict = r.Split.MRRWinner
	}
	sim.Agrees = sim.Verdict != "" && sim.Verdict == o.Favoured
	r.Simulation = sim
}

// Interleaving is the team-draft result: a click credits the team that placed the clicked result, and
// per impression the team with more credited clicks wins.
type Interleaving struct {
	Impressions int `json:"impressions"`
	// Clicked impressions have at least one credited click; NoClick none.
	Clicked int `json:"clicked"`
	NoClick int `json:"no_click"`
	WinsA   int `json:"wins_a"`
	WinsB   int `json:"wins_b"`
	Ties    int `json:"ties"`
	// CreditA and CreditB are the credited clicks of each team.
	CreditA int `json:"credit_a"`
	CreditB int `json:"credit_b"`
	// Test is the exact two-sided sign test of WinsB among WinsA + WinsB under "no preference".
	Test SignTest `json:"sign_test"`
	// Preference is Δ = (WinsB + Ties/2) / Clicked - 1/2: > 0 favours B (Chapelle et al. 2012).
	Preference float64 `json:"preference_b"`
	// Winner is "A" or "B" when Test.P < Alpha, else "" (no significant difference).
	Winner Arm `json:"winner"`
}

// SignTest is a two-sided exact binomial test of K successes (B wins) in N non-tied trials.
type SignTest struct {
	N int `json:"n"`
	K int `json:"k_b_wins"`
	// P is the exact two-sided p-value; Z the normal approximation's statistic (k - n/2)/sqrt(n/4).
	P float64 `json:"p"`
	Z float64 `json:"z"`
	// ShareB is K/N with its Wilson 95% interval.
	ShareB Interval `json:"share_b"`
}

// Split is the split-mode result: each arm's impressions with their clicks.
type Split struct {
	A ArmStats `json:"a"`
	B ArmStats `json:"b"`
	// CTRDiff is CTR(B) - CTR(A): pooled two-proportion z test, Wald interval.
	CTRDiff Diff `json:"ctr_diff"`
	// MRRDiff is MRR(B) - MRR(A): Welch z test, normal interval.
	MRRDiff Diff `json:"mrr_diff"`
	// CTRWinner and MRRWinner are "A" or "B" when the difference's p < Alpha, else "".
	CTRWinner Arm `json:"ctr_winner"`
	MRRWinner Arm `json:"mrr_winner"`
}

// ArmStats are one arm's click figures in split mode.
type ArmStats struct {
	Impressions int `json:"impressions"`
	// Clicked impressions have at least one click; Clicks counts every (deduplicated) click.
	Clicked int `json:"clicked"`
	Clicks  int `json:"clicks"`
	// CTR is Clicked / Impressions with the Wilson 95% interval.
	CTR Interval `json:"ctr"`
	// MRR is the mean over impressions of 1/rank of the highest-ranked click (0 without a click), with the
	// normal 95% interval.
	MRR Interval `json:"mrr"`
}

// joined is an impression with the ranks (1-based) of its clicked results.
type joined struct {
	imp    Impression
	ranked map[int]bool
}

// Analyse joins clicks with impressions (by impression id; by request id when a click has none and the
// request id names one impression only) and computes the report.
func Analyse(imps []Impression, clicks []Click, opts Options) Report {
	opts.Alpha = cmp.Or(opts.Alpha, 0.05)
	r := Report{Experiment: opts.Experiment, Impressions: map[Arm]int{}, Alpha: opts.Alpha, Experiments: []string{}}
	seenExp := map[string]bool{}
	byID := make(map[string]*joined, len(imps))
	byRequest := make(map[string][]*joined, len(imps))
	var kept []*joined
	for _, imp := range imps {
		if imp.Experiment != "" && !seenExp[imp.Experiment] {
			seenExp[imp.Experiment] = true
			r.Experiments = append(r.Experiments, imp.Experiment)
		}
		j := &joined{imp: imp, ranked: map[int]bool{}}
		if imp.ImpressionID != "" {
			if _, dup := byID[imp.ImpressionID]; dup {
				r.DuplicateIDs++
				continue
			}
			byID[imp.ImpressionID] = j
		}
		if imp.RequestID != "" {
			byRequest[imp.RequestID] = append(byRequest[imp.RequestID], j)
		}
		if opts.Experiment != "" && imp.Experiment != opts.Experiment {
			continue
		}
		r.Impressions[imp.Arm]++
		kept = append(kept, j)
	}
	slices.Sort(r.Experiments)

	for _, c := range clicks {
		r.Join.Clicks++
		var j *joined
		switch {
		case c.ImpressionID != "":
			j = byID[c.ImpressionID]
		case len(byRequest[c.RequestID]) > 1:
			r.Join.Ambiguous++
			continue
		case len(byRequest[c.RequestID]) == 1:
			j = byRequest[c.RequestID][0]
		}
		if j == nil {
			r.Join.Orphans++
			continue
		}
		if opts.Experiment != "" && j.imp.Experiment != opts.Experiment {
			r.Join.OtherExperiment++
			continue
		}
		rank := rankOf(j.imp, c)
		switch {
		case rank == 0:
			r.Join.NotShown++
			continue
		case rank != c.Position:
			r.Join.PositionMismatch++
		}
		if j.ranked[rank] {
			r.Join.Duplicates++
			continue
		}
		j.ranked[rank] = true
		r.Join.Joined++
	}

	var inter, armA, armB []*joined
	for _, j := range kept {
		switch j.imp.Arm {
		case ArmInterleaved:
			inter = append(inter, j)
		case ArmA:
			armA = append(armA, j)
		case ArmB:
			armB = append(armB, j)
		}
	}
	if len(inter) > 0 {
		r.Interleaving = interleaving(inter, opts.Alpha)
	}
	if len(armA)+len(armB) > 0 {
		r.Split = split(armA, armB, opts.Alpha)
	}
	return r
}

// rankOf is the 1-based rank of the clicked result in imp: the click's position when the docid is there,
// else wherever the docid was shown; 0 when it was not shown.
func rankOf(imp Impression, c Click) int {
	if p := c.Position; p >= 1 && p <= len(imp.Shown) && imp.Shown[p-1].DocID == c.DocID {
		return p
	}
	for i, s := range imp.Shown {
		if s.DocID == c.DocID {
			return i + 1
		}
	}
	return 0
}

func interleaving(js []*joined, alpha float64) *Interleaving {
	it := &Interleaving{Impressions: len(js)}
	for _, j := range js {
		var a, b int
		for rank := range j.ranked {
			switch j.imp.Shown[rank-1].Team {
			case TeamA:
				a++
			case TeamB:
				b++
			}
		}
		it.CreditA += a
		it.CreditB += b
		switch {
		case a+b == 0:
			it.NoClick++
		case a > b:
			it.WinsA++
		case b > a:
			it.WinsB++
		default:
			it.Ties++
		}
	}
	it.Clicked = it.WinsA + it.WinsB + it.Ties
	n := it.WinsA + it.WinsB
	it.Test = SignTest{N: n, K: it.WinsB, P: SignTestTwoSided(it.WinsB, n), Z: SignZ(it.WinsB, n), ShareB: Wilson(it.WinsB, n)}
	if it.Clicked > 0 {
		it.Preference = (float64(it.WinsB)+float64(it.Ties)/2)/float64(it.Clicked) - 0.5
	}
	if it.Test.P < alpha {
		it.Winner = ArmA
		if it.WinsB > it.WinsA {
			it.Winner = ArmB
		}
	}
	return it
}

func split(a, b []*joined, alpha float64) *Split {
	sa, rra := armStats(a)
	sb, rrb := armStats(b)
	s := &Split{A: sa, B: sb, CTRDiff: ProportionDiff(sa.Clicked, sa.Impressions, sb.Clicked, sb.Impressions), MRRDiff: MeanDiff(rra, rrb)}
	s.CTRWinner, s.MRRWinner = winner(s.CTRDiff, alpha), winner(s.MRRDiff, alpha)
	return s
}

func winner(d Diff, alpha float64) Arm {
	switch {
	case d.P >= alpha || d.Value == 0:
		return ""
	case d.Value > 0:
		return ArmB
	default:
		return ArmA
	}
}

// armStats computes an arm's figures and returns the per-impression reciprocal ranks behind its MRR.
func armStats(js []*joined) (ArmStats, []float64) {
	st := ArmStats{Impressions: len(js)}
	rr := make([]float64, len(js))
	for i, j := range js {
		if len(j.ranked) == 0 {
			continue
		}
		st.Clicked++
		st.Clicks += len(j.ranked)
		top := 0
		for rank := range j.ranked {
			if top == 0 || rank < top {
				top = rank
			}
		}
		rr[i] = 1 / float64(top)
	}
	st.CTR = Wilson(st.Clicked, st.Impressions)
	st.MRR = MeanNormal(rr, 0, 1)
	return st, rr
}
