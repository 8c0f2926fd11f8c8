package rank

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
)

// fakeEngine is the ICICLE engine's Rank as a function.
type fakeEngine func(ctx context.Context, query string, cands []inference.Candidate, opts inference.Options) (inference.Result, error)

func (f fakeEngine) Rank(ctx context.Context, query string, cands []inference.Candidate, opts inference.Options) (inference.Result, error) {
	return f(ctx, query, cands, opts)
}

// TestICICLEReader: the engine reads the candidates' docids as the titles it copies, gets the request's scope
// and admission with the reader's own options, and its beams become the reading, p([COPY]) its confidence;
// its request errors become the pipeline's.
func TestICICLEReader(t *testing.T) {
	var gotOpts inference.Options
	var gotCands []inference.Candidate
	engine := fakeEngine(func(_ context.Context, _ string, cands []inference.Candidate, o inference.Options) (inference.Result, error) {
		gotOpts, gotCands = o, cands
		if err := o.Admit(42); err != nil {
			return inference.Result{}, err
		}
		return inference.Result{PCopy: 0.7, InContext: 2, PromptTokens: 42, Beams: []inference.Beam{
			{DocID: "B", Route: inference.RouteCopy, Score: -0.2, Candidate: 1},
			{DocID: "S", Route: inference.RouteParametric, Score: -1, Candidate: -1}}}, nil
	})
	r := NewICICLE(engine, inference.Options{BeamWidth: 7, TitleOnly: true}, true)
	admitted := 0
	reading, err := r.Read(t.Context(), Query{Text: "q", Scope: []string{"S"},
		Candidates: []Candidate{{DocID: "A", Title: "Title A", Summary: "a"}, {DocID: "B", Summary: "b"}},
		Admit:      func(n int) error { admitted = n; return nil }})
	require.NoError(t, err)
	require.Equal(t, []inference.Candidate{{Title: "A", Summary: "a"}, {Title: "B", Summary: "b"}}, gotCands)
	require.Equal(t, 7, gotOpts.BeamWidth)
	require.True(t, gotOpts.EachRoute)
	require.Equal(t, []string{"S"}, gotOpts.MemoryScope)
	require.Equal(t, 42, admitted)
	require.Equal(t, Reading{InContext: 2, TitleOnly: 2, PromptTokens: 42, Confidence: map[string]float64{ConfidenceCopy: 0.7},
		Scored: []Scored{{DocID: "B", Route: RouteCopy, Score: -0.2, Candidate: 1}, {DocID: "S", Route: RouteParametric, Score: -1, Candidate: -1}}},
		reading)

	for err, want := range map[error]error{inference.ErrContextFull: ErrContextFull, inference.ErrEmptyAllowedSet: ErrNothingToRank} {
		r := NewICICLE(fakeEngine(func(context.Context, string, []inference.Candidate, inference.Options) (inference.Result, error) {
			return inference.Result{}, err
		}), inference.Options{}, false)
		_, got := r.Read(t.Context(), Query{Text: "q"})
		require.ErrorIs(t, got, want)
	}
}

// fakeEmbedder embeds by a table of unit vectors.
type fakeEmbedder map[string][]float32

func (f fakeEmbedder) Query(_ context.Context, q string) ([]float32, error) {
	v, ok := f[q]
	if !ok {
		return nil, errors.New("no vector for " + q)
	}
	return v, nil
}

func (f fakeEmbedder) Passages(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		v, err := f.Query(ctx, t)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// TestDenseReader: candidates ranked by their cosine with the query, ties in the first stage's order, the
// margin as its confidence; nothing named beyond them.
func TestDenseReader(t *testing.T) {
	emb := fakeEmbedder{"q": {1, 0}, "A\na": {0.6, 0.8}, "B": {1, 0}, "c": {0.6, 0.8}}
	r := NewDenseReader(emb, nil)
	reading, err := r.Read(t.Context(), Query{Text: "q", Candidates: []Candidate{{DocID: "A", Title: "A", Summary: "a"},
		{DocID: "B", Title: "B"}, {DocID: "C", Summary: "c"}}})
	require.NoError(t, err)
	require.Equal(t, []Scored{{DocID: "B", Score: 1, Route: RouteCopy, Candidate: 1},
		{DocID: "A", Score: 0.6000000238418579, Route: RouteCopy, Candidate: 0},
		{DocID: "C", Score: 0.6000000238418579, Route: RouteCopy, Candidate: 2}}, reading.Scored)
	require.InDelta(t, 0.4, reading.Confidence[ConfidenceMargin], 1e-6)
	require.Equal(t, 3, reading.InContext)

	_, err = r.Read(t.Context(), Query{Text: "q"})
	require.ErrorIs(t, err, ErrNothingToRank)
	_, err = r.Read(t.Context(), Query{Text: "unknown", Candidates: []Candidate{{DocID: "B", Title: "B"}}})
	require.ErrorContains(t, err, "dense reader")
}
