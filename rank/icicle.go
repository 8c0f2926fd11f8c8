package rank

import (
	"context"
	"errors"
	"fmt"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/inference"
)

// Ranker is the ICICLE engine's routed decode (*inference.Engine): the query and its candidates in one
// prompt, the [COPY] route over the candidates' titles and the memory route over the titles it was trained on.
type Ranker interface {
	Rank(ctx context.Context, query string, cands []inference.Candidate, opts inference.Options) (inference.Result, error)
}

// ICICLE reads with the ICICLE engine: its copy route picks candidates, its memory route names documents it
// was trained on (within Query.Scope when set), and its router's p([COPY]) is the reading's ConfidenceCopy.
type ICICLE struct {
	engine Ranker
	opts   inference.Options
}

// NewICICLE reads with engine under opts (the decode settings every request runs with: beam width, prompt
// budget, scoring and priors; eachRoute keeps each route's best answer in the reading, for a transform that
// weighs the two routes, RouteByFirstStage).
func NewICICLE(engine Ranker, opts inference.Options, eachRoute bool) *ICICLE {
	opts.EachRoute = eachRoute
	return &ICICLE{engine: engine, opts: opts}
}

// Read runs the engine's routed decode over q.
func (r *ICICLE) Read(ctx context.Context, q Query) (Reading, error) {
	cands := make([]inference.Candidate, len(q.Candidates))
	title := 0
	for i, c := range q.Candidates {
		cands[i] = icicleCandidate(c)
		if r.opts.ByTitle(i, cands[i]) {
			title++
		}
	}
	opts := r.opts
	opts.MemoryScope, opts.Admit = q.Scope, q.Admit
	res, err := r.engine.Rank(ctx, q.Text, cands, opts)
	switch {
	case errors.Is(err, inference.ErrContextFull):
		return Reading{}, fmt.Errorf("%w: %w", ErrContextFull, err)
	case errors.Is(err, inference.ErrEmptyAllowedSet):
		return Reading{}, fmt.Errorf("%w: %w", ErrNothingToRank, err)
	case err != nil:
		return Reading{}, err
	}
	out := Reading{Scored: make([]Scored, len(res.Beams)), Confidence: map[string]float64{ConfidenceCopy: res.PCopy},
		InContext: res.InContext, TitleOnly: title, PromptTokens: res.PromptTokens, Prefill: res.Stats.Prefill,
		Decode: res.Stats.Decode}
	for i, b := range res.Beams {
		out.Scored[i] = Scored{DocID: b.DocID, Score: b.Score, Route: Route(b.Route), Candidate: b.Candidate}
	}
	return out, nil
}

var _ Reader = (*ICICLE)(nil)

// icicleCandidate is a candidate as the ICICLE engine reads it: its docid is the title it reads and copies.
func icicleCandidate(c Candidate) inference.Candidate {
	return inference.Candidate{Title: c.DocID, Summary: c.Summary}
}

// ICICLECandidate is a first-stage hit as the ICICLE reader reads it: the block fill (cmd/icicle) builds its
// blocks with it, so that they are the blocks requests read.
func ICICLECandidate(h adapter.Hit) inference.Candidate { return icicleCandidate(CandidateOf(h)) }
