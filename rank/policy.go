package rank

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/internal/gate"
)

// The policies by name: the values of policy.mode and of a request's "policy".
const (
	// PolicyFirstStage answers the first stage's order without running a reader.
	PolicyFirstStage = "first_stage"
	// PolicyGate keeps the first stage's order unless the reader's gate promotes its top.
	PolicyGate = "gate"
	// PolicyModel answers the reader's own ranking.
	PolicyModel = "model"
	// PolicyFusion merges the reader's ranking with the first stage's by reciprocal rank fusion.
	PolicyFusion = "fusion"
	// policyBM25 is the former name of PolicyFirstStage, accepted from requests and configurations.
	policyBM25 = "bm25"
)

// Policies lists the policies' names.
var Policies = []string{PolicyFirstStage, PolicyGate, PolicyModel, PolicyFusion}

// CanonicalPolicy is p with the former name of the first-stage policy replaced.
func CanonicalPolicy(p string) string {
	if p == policyBM25 {
		return PolicyFirstStage
	}
	return p
}

// Policy decides whether the reader runs for a request and what its reading changes in the first stage's
// order. Policies are pure: given the first stage's order and a reading they answer the same way.
type Policy interface {
	// Name is the policy's name (one of Policies).
	Name() string
	// Reads reports whether the policy needs the reader under the serving reader's gate g (nil: none).
	Reads(g *gate.Gate) bool
	// Skipped answers without a reading: Reads was false.
	Skipped(in Input) Answer
	// Answer answers from the reading in in.
	Answer(in Input) Answer
}

// Input is what a policy answers from.
type Input struct {
	// Base is the first stage's order (over the whole index, or the caller's hits re-scored); BaseKind its
	// retrieve.Baseline* kind.
	Base     []adapter.Hit
	BaseKind string
	// Candidates are the documents the reader was given (a prefix of the first stage's order over new
	// documents, or of Base).
	Candidates []adapter.Hit
	// Reading is the reader's answer (after the pipeline's transforms); empty for Skipped.
	Reading Reading
	// Size is how many results to answer.
	Size int
	// Gate is the serving reader's gate (never nil in Answer: gate.Default when the reader has none).
	Gate *gate.Gate
	// Results turns scored documents into results (candidates from their hits, others resolved from the
	// index), with their first-stage ranks and scores.
	Results func([]Scored) []Result
}

// Answer is a policy's answer.
type Answer struct {
	Mode    Mode
	Results []Result
	Gate    *GateReport
	// Skipped says why the reader was not run (a Skip* constant), for Policy.Skipped.
	Skipped string
}

// NewPolicy returns the policy named name; fusionK is FusionPolicy's k, runWhenNever GatePolicy's.
func NewPolicy(name string, fusionK int, runWhenNever bool) (Policy, error) {
	switch CanonicalPolicy(name) {
	case PolicyFirstStage:
		return FirstStagePolicy{}, nil
	case PolicyGate:
		return GatePolicy{RunWhenNever: runWhenNever}, nil
	case PolicyModel:
		return ModelPolicy{}, nil
	case PolicyFusion:
		return FusionPolicy{K: cmp.Or(fusionK, 60)}, nil
	}
	return nil, fmt.Errorf("policy %q: want one of %s", name, strings.Join(Policies, ", "))
}

// FirstStagePolicy never runs the reader: the first stage's order.
type FirstStagePolicy struct{}

// Name is PolicyFirstStage.
func (FirstStagePolicy) Name() string { return PolicyFirstStage }

// Reads is false: the first stage answers.
func (FirstStagePolicy) Reads(*gate.Gate) bool { return false }

// Skipped is the first stage's order, saying that the policy asked for it.
func (FirstStagePolicy) Skipped(in Input) Answer {
	return Answer{Mode: ModeFirstStage, Results: BaselineResults(in.Base, in.Size, in.BaseKind), Skipped: SkipPolicy}
}

// Answer is Skipped's (FirstStagePolicy never reads).
func (p FirstStagePolicy) Answer(in Input) Answer { return p.Skipped(in) }

// GatePolicy keeps the first stage's order unless the reader's gate promotes the reader's top to rank 1. A
// gate that never promotes (none, or its fit found no gain) could only keep the order, so the reader is not
// run at all, unless RunWhenNever (calibration needs the reader's answer and features).
type GatePolicy struct {
	RunWhenNever bool
}

// Name is PolicyGate.
func (GatePolicy) Name() string { return PolicyGate }

// Reads is whether the gate can promote (or RunWhenNever).
func (p GatePolicy) Reads(g *gate.Gate) bool { return p.RunWhenNever || g != nil && !g.Never }

// Skipped is the first stage's order with a gate report saying the reader was not run and why.
func (GatePolicy) Skipped(in Input) Answer {
	g := in.Gate
	if g == nil {
		g = gate.Default()
	}
	rep := &GateReport{Decision: GateKeep, Reason: ReasonGateIdle, Threshold: g.Threshold, Never: true}
	if len(in.Base) > 0 {
		rep.FirstStageTop = in.Base[0].DocID
	}
	return Answer{Mode: ModeGated, Results: BaselineResults(in.Base, in.Size, in.BaseKind), Gate: rep, Skipped: SkipGateNever}
}

// Answer applies the gate: the first stage's order, with the reader's top moved to rank 1 (the rest in the
// first stage's order without it) when the gate promotes it.
func (GatePolicy) Answer(in Input) Answer {
	g, r := in.Gate, in.Reading
	beams := make([]gate.Beam, len(r.Scored))
	for i, b := range r.Scored {
		beams[i] = gate.Beam{DocID: b.DocID, Copy: b.Route == RouteCopy, Score: b.Score}
	}
	ids, scores := make([]string, len(in.Base)), make([]float64, len(in.Base))
	for i, h := range in.Base {
		ids[i], scores[i] = h.DocID, h.Score
	}
	inContext := make([]string, min(r.InContext, len(in.Candidates)))
	for i := range inContext {
		inContext[i] = in.Candidates[i].DocID
	}
	f := gate.Compute(copyConfidence(r), beams, ids, scores, inContext)
	d := g.Decide(f)
	rep := &GateReport{Decision: GateKeep, Reason: d.Reason, P: d.P, Threshold: g.Threshold, Never: g.Never,
		ModelTop: r.Scored[0].DocID, Features: f}
	if len(in.Base) > 0 {
		rep.FirstStageTop = in.Base[0].DocID
	}
	if !d.Promote {
		return Answer{Mode: ModeGated, Results: BaselineResults(in.Base, in.Size, in.BaseKind), Gate: rep}
	}
	first := BaselineResults(in.Base, in.Size+1, in.BaseKind) // the reader's top may be among them
	rep.Decision = GatePromote
	top := in.Results(r.Scored[:1])[0]
	out := append(make([]Result, 0, in.Size), top)
	for _, res := range first {
		if len(out) == in.Size {
			break
		}
		if res.DocID != top.DocID {
			out = append(out, res)
		}
	}
	for i := range out {
		out[i].Rank = i + 1
	}
	return Answer{Mode: ModeGated, Results: out, Gate: rep}
}

// ModelPolicy answers the reader's own ranking.
type ModelPolicy struct{}

// Name is PolicyModel.
func (ModelPolicy) Name() string { return PolicyModel }

// Reads is true.
func (ModelPolicy) Reads(*gate.Gate) bool { return true }

// Skipped does not happen for ModelPolicy (it always reads); it is the first stage's order.
func (ModelPolicy) Skipped(in Input) Answer { return FirstStagePolicy{}.Skipped(in) }

// Answer is the reader's top Size.
func (ModelPolicy) Answer(in Input) Answer {
	return Answer{Mode: ModeReranked, Results: in.Results(in.Reading.Scored[:min(in.Size, len(in.Reading.Scored))])}
}

// FusionPolicy merges the reader's ranking with the first stage's by reciprocal rank fusion, constant K.
type FusionPolicy struct {
	K int
}

// Name is PolicyFusion.
func (FusionPolicy) Name() string { return PolicyFusion }

// Reads is true.
func (FusionPolicy) Reads(*gate.Gate) bool { return true }

// Skipped does not happen for FusionPolicy (it always reads); it is the first stage's order.
func (FusionPolicy) Skipped(in Input) Answer { return FirstStagePolicy{}.Skipped(in) }

// Answer fuses the reader's whole ranking with the first stage's whole order.
func (p FusionPolicy) Answer(in Input) Answer {
	return Answer{Mode: ModeFused, Results: fuse(in.Results(in.Reading.Scored), BaselineResults(in.Base, len(in.Base), in.BaseKind), p.K, in.Size)}
}

// copyConfidence is the reading's router probability, 1 for a reader without a router (all its answers are
// candidates).
func copyConfidence(r Reading) float64 {
	if p, ok := r.Confidence[ConfidenceCopy]; ok {
		return p
	}
	return 1
}

// fuse merges two rankings by reciprocal rank fusion: score(d) = sum over the lists that rank d of
// 1/(k + rank). A document keeps the reader's provenance when the reader ranked it. Ties go to the better
// first-stage rank, then the docid.
func fuse(model, first []Result, k, size int) []Result {
	byDoc := make(map[string]*Result, len(model)+len(first))
	var order []string
	add := func(list []Result) {
		for i, r := range list {
			rrf := 1 / float64(k+i+1)
			if cur, ok := byDoc[r.DocID]; ok {
				cur.Score += rrf
				if cur.FirstStageRank == nil {
					cur.FirstStageRank = r.FirstStageRank
				}
				continue
			}
			r.Score = rrf
			byDoc[r.DocID] = &r
			order = append(order, r.DocID)
		}
	}
	add(model)
	add(first)
	out := make([]Result, 0, len(order))
	for _, d := range order {
		out = append(out, *byDoc[d])
	}
	firstRank := func(r Result) int {
		if r.FirstStageRank == nil {
			return math.MaxInt
		}
		return *r.FirstStageRank
	}
	slices.SortStableFunc(out, func(a, b Result) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		if c := cmp.Compare(firstRank(a), firstRank(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.DocID, b.DocID)
	})
	out = out[:min(size, len(out))]
	for i := range out {
		out[i].Rank = i + 1
	}
	return out
}
