package abtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// interleaved is an impression of two results per team: A placed ranks 1 and 3, B ranks 2 and 4.
func interleaved(id string) Impression {
	return Impression{ImpressionID: id, RequestID: "req-" + id, Experiment: "exp", Arm: ArmInterleaved, Shown: []Shown{
		{Rank: 1, DocID: "a1", Team: TeamA}, {Rank: 2, DocID: "b1", Team: TeamB},
		{Rank: 3, DocID: "a2", Team: TeamA}, {Rank: 4, DocID: "b2", Team: TeamB}}}
}

func click(id, docid string, pos int) Click {
	return Click{ImpressionID: id, DocID: docid, Position: pos}
}

func TestAnalyseEmpty(t *testing.T) {
	r := Analyse(nil, nil, Options{})
	require.Nil(t, r.Interleaving)
	require.Nil(t, r.Split)
	require.Equal(t, JoinCounts{}, r.Join)
	var md bytes.Buffer
	require.NoError(t, WriteMarkdown(&md, r))
	require.Contains(t, md.String(), "nothing to compare")
	_, err := json.Marshal(r)
	require.NoError(t, err, "the empty report encodes (no NaN)")

	// Impressions without any click: a report with no verdict, not a crash.
	r = Analyse([]Impression{interleaved("i1"), interleaved("i2")}, nil, Options{})
	require.Equal(t, 2, r.Interleaving.NoClick)
	require.Equal(t, SignTest{P: 1, ShareB: Interval{Low: 0, High: 1}}, r.Interleaving.Test)
	require.Empty(t, r.Interleaving.Winner)
	md.Reset()
	require.NoError(t, WriteMarkdown(&md, r))
	require.Contains(t, md.String(), "No impression with a winner yet")
}

func TestAnalyseTies(t *testing.T) {
	imps := []Impression{interleaved("i1"), interleaved("i2"), interleaved("i3")}
	clicks := []Click{
		click("i1", "a1", 1), click("i1", "b1", 2), // one each: a tie
		click("i2", "a2", 3), click("i2", "b2", 4), click("i2", "a1", 1), click("i2", "b1", 2), // two each
		click("i3", "b1", 2), // B wins
	}
	it := Analyse(imps, clicks, Options{}).Interleaving
	require.InDelta(t, (1+2.0/2)/3-0.5, it.Preference, 1e-12)
	it.Preference = 0
	require.Equal(t, Interleaving{Impressions: 3, Clicked: 3, WinsB: 1, Ties: 2, CreditA: 3, CreditB: 4,
		Test: SignTest{N: 1, K: 1, P: 1, Z: 1, ShareB: Wilson(1, 1)},
	}, *it, "ties are left out of the sign test")
	require.Empty(t, it.Winner)
}

func TestAnalyseBClearlyWins(t *testing.T) {
	var imps []Impression
	var clicks []Click
	for i := range 40 {
		id := fmt.Sprintf("i%02d", i)
		imps = append(imps, interleaved(id))
		switch {
		case i < 30: // B's results clicked
			clicks = append(clicks, click(id, "b1", 2))
		case i < 34: // A's
			clicks = append(clicks, click(id, "a2", 3))
		case i < 36: // a tie
			clicks = append(clicks, click(id, "a1", 1), click(id, "b2", 4))
		}
	}
	r := Analyse(imps, clicks, Options{})
	it := r.Interleaving
	require.Equal(t, 30, it.WinsB)
	require.Equal(t, 4, it.WinsA)
	require.Equal(t, 2, it.Ties)
	require.Equal(t, 4, it.NoClick)
	require.Equal(t, SignTestTwoSided(30, 34), it.Test.P)
	require.Less(t, it.Test.P, 1e-5)
	require.Equal(t, ArmB, it.Winner)
	var md bytes.Buffer
	require.NoError(t, WriteMarkdown(&md, r))
	require.Contains(t, md.String(), "Arm B wins: 30 of 34")
}

func TestAnalyseJoin(t *testing.T) {
	reused := interleaved("i2")
	reused.RequestID = "req-i1" // the client reused i1's request id
	legacy := interleaved("")
	legacy.RequestID = "legacy" // an impression logged before impression ids
	other := interleaved("i3")
	other.Experiment = "old"
	imps := []Impression{interleaved("i1"), reused, legacy, other, interleaved("i1")}
	clicks := []Click{
		click("i1", "b1", 2),                            // joined
		click("i2", "a1", 1),                            // joined to the second impression of req-i1, by impression id
		{RequestID: "req-i1", DocID: "b1", Position: 2}, // ambiguous: two impressions answered req-i1
		{RequestID: "legacy", DocID: "b2", Position: 4}, // joined by request id
		click("nope", "b1", 2),                          // no such impression
		click("i1", "zz", 1),                            // not shown
		click("i1", "b2", 1),                            // wrong position: b2 is at 4
		click("i1", "b1", 2),                            // duplicate
		click("i3", "a1", 1),                            // other experiment
	}
	r := Analyse(imps, clicks, Options{Experiment: "exp"})
	require.Equal(t, JoinCounts{Clicks: 9, Joined: 4, Orphans: 1, Ambiguous: 1, NotShown: 1, PositionMismatch: 1,
		Duplicates: 1, OtherExperiment: 1}, r.Join)
	require.Equal(t, 1, r.DuplicateIDs)
	require.Equal(t, map[Arm]int{ArmInterleaved: 3}, r.Impressions)
	require.Equal(t, []string{"exp", "old"}, r.Experiments)
	it := r.Interleaving
	require.Equal(t, 2, it.WinsB, "i1 (b1, b2 at its own rank), legacy (b2)")
	require.Equal(t, 1, it.WinsA, "i2 (a1)")
}

func TestAnalyseSplit(t *testing.T) {
	var imps []Impression
	var clicks []Click
	for i := range 200 {
		arm := ArmA
		if i%2 == 1 {
			arm = ArmB
		}
		id := fmt.Sprintf("s%03d", i)
		imps = append(imps, Impression{ImpressionID: id, Arm: arm, Experiment: "exp",
			Shown: []Shown{{Rank: 1, DocID: "d1"}, {Rank: 2, DocID: "d2"}, {Rank: 3, DocID: "d3"}}})
		switch {
		case arm == ArmB && i%10 < 8: // B: 80% clicked, at rank 1
			clicks = append(clicks, click(id, "d1", 1), click(id, "d3", 3))
		case arm == ArmA && i%10 < 4: // A: 40% clicked, at rank 2
			clicks = append(clicks, click(id, "d2", 2))
		}
	}
	imps = append(imps, Impression{ImpressionID: "off", Shown: []Shown{{Rank: 1, DocID: "d1"}}}) // experiment off
	r := Analyse(imps, clicks, Options{})
	s := r.Split
	require.Equal(t, map[Arm]int{ArmA: 100, ArmB: 100, "": 1}, r.Impressions)
	require.Equal(t, ArmStats{Impressions: 100, Clicked: 40, Clicks: 40, CTR: Wilson(40, 100), MRR: s.A.MRR}, s.A)
	require.InDelta(t, 0.2, s.A.MRR.Value, 1e-12, "40% at rank 2")
	require.Equal(t, 80, s.B.Clicked)
	require.Equal(t, 160, s.B.Clicks)
	require.InDelta(t, 0.8, s.B.MRR.Value, 1e-12, "MRR takes the highest-ranked click")
	require.Less(t, s.B.MRR.Low, 0.8)
	require.Greater(t, s.B.MRR.High, 0.8)
	require.InDelta(t, 0.4, s.CTRDiff.Value, 1e-12)
	require.Equal(t, ArmB, s.CTRWinner)
	require.Equal(t, ArmB, s.MRRWinner)
	require.Nil(t, r.Interleaving)
	var md bytes.Buffer
	require.NoError(t, WriteMarkdown(&md, r))
	require.Contains(t, md.String(), "CTR: arm B is higher")
	require.Contains(t, md.String(), "| B (ICICLE) | 100 | 80 | 160 | 0.8000 |")
}

func TestReadJSONL(t *testing.T) {
	in := `{"impression_id":"i1","arm":"interleaved","shown":[{"rank":1,"docid":"a","team":"A"}]}
not json
{"impression_id":"i2","arm":"A","shown":[]}

{"impression_id":"i3","arm":"B","shown":[{"rank":1,"docid":"x"` // torn last line
	var got []Impression
	var bad BadLines
	require.NoError(t, ReadJSONL(strings.NewReader(in), "imp.jsonl", func(i Impression) { got = append(got, i) }, &bad))
	require.Len(t, got, 2)
	require.Equal(t, "a", got[0].Shown[0].DocID)
	require.Equal(t, 2, bad.Count)
	require.True(t, strings.HasPrefix(bad.First, "imp.jsonl:2: "), bad.First)
}

// TestSimulateNamesTheFavouredArm: clicks drawn from qrels over a crafted interleaved log, where team A
// places the relevant document first in 70% of queries, make the report name A, as the oracle does.
func TestSimulateNamesTheFavouredArm(t *testing.T) {
	qrels := map[string]map[string]bool{}
	var imps []Impression
	for q := range 300 {
		qid := fmt.Sprintf("q%d", q)
		qrels[qid] = map[string]bool{"rel": true}
		imp := Impression{ImpressionID: fmt.Sprintf("%032x", q), RequestID: qid + "#1", Arm: ArmInterleaved}
		relTeam, otherTeam := TeamA, TeamB
		if q%10 >= 7 {
			relTeam, otherTeam = TeamB, TeamA
		}
		imp.Shown = []Shown{{Rank: 1, DocID: "rel", Team: relTeam}, {Rank: 2, DocID: "x", Team: otherTeam}, {Rank: 3, DocID: "y", Team: relTeam}}
		imps = append(imps, imp)
	}
	imps = append(imps, Impression{ImpressionID: "u", RequestID: "unknown-query", Arm: ArmInterleaved})
	m := ClickModel{Seed: 7, Noise: 0.1}
	clicks, oracle := Simulate(imps, qrels, m)
	again, _ := Simulate(imps, qrels, m)
	require.Equal(t, clicks, again, "seeded")
	require.Equal(t, Oracle{Unlabelled: 1, FirstRelevantA: 210, FirstRelevantB: 90, MRRA: Interval{Low: 0, High: 1},
		MRRB: Interval{Low: 0, High: 1}, Favoured: ArmA}, oracle)
	r := Analyse(imps, clicks, Options{})
	require.Equal(t, ArmA, r.Interleaving.Winner)
	require.Less(t, r.Interleaving.Test.P, 1e-6)
	require.Zero(t, r.Join.Orphans+r.Join.NotShown+r.Join.PositionMismatch)

	r.SetSimulation("qrels.tsv", m, len(clicks), oracle)
	require.Equal(t, &Simulation{Qrels: "qrels.tsv", Model: ClickModel{Decay: 1, Relevant: 1, Noise: 0.1, Seed: 7}, Clicks: len(clicks),
		Oracle: oracle, Verdict: ArmA, Agrees: true}, r.Simulation)
	var md bytes.Buffer
	require.NoError(t, WriteMarkdown(&md, r))
	require.Contains(t, md.String(), "The qrels favour arm A; the report names A: it agrees.")

	other, _ := Simulate(imps, qrels, ClickModel{Seed: 8, Noise: 0.1})
	require.NotEqual(t, clicks, other, "another seed, other clicks")
}

// TestClickModelPositionBias: with Decay 1 and only relevant results clicked, a relevant result at rank r
// is clicked with probability 1/r.
func TestClickModelPositionBias(t *testing.T) {
	m := ClickModel{Seed: 1}
	counts := make([]int, 4)
	const n = 20000
	shown := []string{"r1", "r2", "n3", "r4"}
	rel := map[string]bool{"r1": true, "r2": true, "r4": true}
	for i := range n {
		for _, p := range m.Draw(fmt.Sprint(i), shown, rel) {
			counts[p-1]++
		}
	}
	require.Equal(t, n, counts[0], "rank 1 is always examined")
	require.InDelta(t, 0.5, float64(counts[1])/n, 0.02)
	require.Zero(t, counts[2], "not relevant, no noise")
	require.InDelta(t, 0.25, float64(counts[3])/n, 0.02)
}

// TestSimulateSplit: in split mode the labels favour the arm whose first relevant result ranks higher
// (MRR), and the clicks drawn from them make the report's MRR verdict agree.
func TestSimulateSplit(t *testing.T) {
	qrels := map[string]map[string]bool{}
	var imps []Impression
	for q := range 400 {
		qid := fmt.Sprintf("q%d", q)
		qrels[qid] = map[string]bool{"rel": true}
		imp := Impression{ImpressionID: fmt.Sprintf("%032x", q), RequestID: qid, Arm: ArmA,
			Shown: []Shown{{Rank: 1, DocID: "x"}, {Rank: 2, DocID: "y"}, {Rank: 3, DocID: "rel"}}}
		if q%2 == 1 {
			imp.Arm = ArmB
			imp.Shown = []Shown{{Rank: 1, DocID: "rel"}, {Rank: 2, DocID: "x"}}
		}
		imps = append(imps, imp)
	}
	clicks, oracle := Simulate(imps, qrels, ClickModel{Seed: 1})
	require.Equal(t, ArmB, oracle.Favoured)
	require.InDelta(t, 1.0/3, oracle.MRRA.Value, 1e-12)
	require.InDelta(t, 1.0, oracle.MRRB.Value, 1e-12)
	r := Analyse(imps, clicks, Options{})
	r.SetSimulation("qrels.tsv", ClickModel{Seed: 1}, len(clicks), oracle)
	require.Equal(t, ArmB, r.Split.MRRWinner)
	require.Equal(t, ArmB, r.Split.CTRWinner)
	require.True(t, r.Simulation.Agrees)
}
