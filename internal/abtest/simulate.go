package abtest

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
)

// ClickModel draws synthetic clicks from relevance labels, a position-based model: the user examines the
// result at rank r with probability 1/r^Decay and clicks an examined result with probability Relevant
// when the qrels mark it relevant, Noise otherwise. Each result is drawn independently.
type ClickModel struct {
	// Decay is the examination decay (0 means the default 1: rank r is examined with probability 1/r).
	Decay float64 `json:"decay"`
	// Relevant is P(click | examined, relevant) (0 means the default 1).
	Relevant float64 `json:"relevant"`
	// Noise is P(click | examined, not relevant) (default 0: only relevant results are clicked).
	Noise float64 `json:"noise"`
	// Seed makes the draws reproducible; each impression draws from its own stream, seeded by Seed and its
	// impression id, so the clicks of one impression do not depend on the others.
	Seed uint64 `json:"seed"`
}

// Check validates the model's parameters, naming the flag of each bad one (zero values are defaults).
func (m ClickModel) Check() error {
	var errs []error
	if m.Decay < 0 || math.IsNaN(m.Decay) {
		errs = append(errs, fmt.Errorf("-click-decay: want > 0, got %v", m.Decay))
	}
	if !(m.Relevant >= 0 && m.Relevant <= 1) {
		errs = append(errs, fmt.Errorf("-click-relevant: want a probability in (0, 1], got %v", m.Relevant))
	}
	if !(m.Noise >= 0 && m.Noise <= 1) {
		errs = append(errs, fmt.Errorf("-click-noise: want a probability in [0, 1], got %v", m.Noise))
	}
	return errors.Join(errs...)
}

func (m ClickModel) withDefaults() ClickModel {
	m.Decay = cmp.Or(m.Decay, 1)
	m.Relevant = cmp.Or(m.Relevant, 1)
	return m
}

// Draw returns the 1-based positions clicked in shown (docids, best first) for a query whose relevant
// docids are relevant; key seeds the impression's stream (its impression id).
func (m ClickModel) Draw(key string, shown []string, relevant map[string]bool) []int {
	m = m.withDefaults()
	h := fnv.New64a()
	h.Write([]byte(key))
	rng := rand.New(rand.NewPCG(m.Seed, h.Sum64()))
	var out []int
	for i, d := range shown {
		p := m.Noise
		if relevant[d] {
			p = m.Relevant
		}
		examine := math.Pow(float64(i+1), -m.Decay)
		if rng.Float64() < examine*p {
			out = append(out, i+1)
		}
	}
	return out
}

// QueryID maps an impression to the query it answered, by its request id: the simulated traffic sends the
// query id as X-Request-ID, optionally followed by "#" and a repeat number ("q17#2"), which is cut off.
func QueryID(imp Impression) string {
	id, _, _ := strings.Cut(imp.RequestID, "#")
	return id
}

// Oracle says which arm the qrels favour, computed from the impressions and the labels alone (no
// clicks): for interleaving, per impression, the team that placed the highest-ranked relevant result;
// for split mode, each arm's mean reciprocal rank of the first relevant result. ab-report on clicks drawn
// from the same labels should name the same arm.
type Oracle struct {
	// Unlabelled impressions answer a query the qrels do not have; they get no clicks.
	Unlabelled int `json:"unlabelled"`
	// Interleaved impressions: the first relevant result was team A's, team B's, or absent.
	FirstRelevantA    int `json:"first_relevant_a"`
	FirstRelevantB    int `json:"first_relevant_b"`
	FirstRelevantNone int `json:"first_relevant_none"`
	// MRRA and MRRB are split mode's per-arm MRR of the first relevant result (over labelled impressions).
	MRRA Interval `json:"mrr_a"`
	MRRB Interval `json:"mrr_b"`
	// Favoured is the arm the labels favour ("A", "B" or "" for a tie), interleaving first, else split.
	Favoured Arm `json:"favoured"`
}

// Simulate draws clicks over imps from qrels (query id -> relevant docids) with m, and computes the
// oracle. Clicks name their impression by impression id (by request id for a legacy impression without
// one).
func Simulate(imps []Impression, qrels map[string]map[string]bool, m ClickModel) ([]Click, Oracle) {
	var clicks []Click
	var o Oracle
	var rrA, rrB []float64
	for _, imp := range imps {
		rel, ok := qrels[QueryID(imp)]
		if !ok || len(rel) == 0 {
			o.Unlabelled++
			continue
		}
		docids := make([]string, len(imp.Shown))
		first := 0
		for i, s := range imp.Shown {
			docids[i] = s.DocID
			if first == 0 && rel[s.DocID] {
				first = i + 1
			}
		}
		switch imp.Arm {
		case ArmInterleaved:
			switch {
			case first == 0:
				o.FirstRelevantNone++
			case imp.Shown[first-1].Team == TeamA:
				o.FirstRelevantA++
			case imp.Shown[first-1].Team == TeamB:
				o.FirstRelevantB++
			}
		case ArmA, ArmB:
			rr := 0.0
			if first > 0 {
				rr = 1 / float64(first)
			}
			if imp.Arm == ArmA {
				rrA = append(rrA, rr)
			} else {
				rrB = append(rrB, rr)
			}
		}
		key := cmp.Or(imp.ImpressionID, imp.RequestID)
		for _, pos := range m.Draw(key, docids, rel) {
			c := Click{Time: imp.Time, ImpressionID: imp.ImpressionID, DocID: docids[pos-1], Position: pos}
			if c.ImpressionID == "" {
				c.RequestID = imp.RequestID
			}
			clicks = append(clicks, c)
		}
	}
	o.MRRA, o.MRRB = MeanNormal(rrA, 0, 1), MeanNormal(rrB, 0, 1)
	switch {
	case o.FirstRelevantA+o.FirstRelevantB > 0:
		o.Favoured = favour(float64(o.FirstRelevantA), float64(o.FirstRelevantB))
	case len(rrA)+len(rrB) > 0:
		o.Favoured = favour(o.MRRA.Value, o.MRRB.Value)
	}
	return clicks, o
}

func favour(a, b float64) Arm {
	switch {
	case a > b:
		return ArmA
	case b > a:
		return ArmB
	}
	return ""
}
