package inference

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func newTestEngine(t *testing.T, seen []string, fn func([]int64) []float32) (*Engine, *fakeModel) {
	t.Helper()
	m := &fakeModel{logitsFn: fn}
	e, err := NewEngine(fakeManifest(), fakeTokenizer{}, []Model{m}, seen, EngineOptions{PrefillChunk: 16})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	return e, m
}

// bruteScores scores every docid of a route by walking its trie with a full logits call per branching
// node (per node under vocab scoring): the definition the engine must meet exactly.
func bruteScores(t *testing.T, fn func([]int64) []float32, prefix []int64, docids []string, base float64, scoring string) map[string]float64 {
	t.Helper()
	seqs, err := docidSeqs(fakeTokenizer{}, docids, fakeEnd)
	require.NoError(t, err)
	tr, err := BuildTrie(seqs, fakeEnd)
	require.NoError(t, err)
	out := make(map[string]float64)
	for i, seq := range seqs {
		s, n := base, NodeID(0)
		for j, tok := range seq {
			toks, _ := tr.Children(n)
			if len(toks) > 1 || scoring == ScoringVocab {
				z := fn(append(slices.Clone(prefix), seq[:j]...))
				s += float64(z[tok]) - bruteNorm(z, toks, scoring)
			}
			n, _ = tr.Child(n, tok)
		}
		out[docids[i]] = s
	}
	return out
}

// bruteNorm is a step's log-normaliser: over the allowed tokens, or over every token of the vocabulary.
func bruteNorm(z []float32, toks []int32, scoring string) float64 {
	if scoring != ScoringVocab {
		return logSumExp(z, toks)
	}
	all := make([]int32, len(z))
	for i := range all {
		all[i] = int32(i)
	}
	return logSumExp(z, all)
}

func TestRankMatchesBruteForce(t *testing.T) {
	for _, scoring := range []string{ScoringTrie, ScoringVocab} {
		for _, prior := range []float64{0, -1.5, 2} {
			t.Run(fmt.Sprintf("%s/prior=%g", scoring, prior), func(t *testing.T) { testRankMatchesBruteForce(t, scoring, prior, 0) })
		}
		// The rank prior moves each copied title by its own candidate's place; with a copy prior beside it.
		for _, rank := range []float64{1.5, 20} {
			t.Run(fmt.Sprintf("%s/rank_prior=%g", scoring, rank), func(t *testing.T) { testRankMatchesBruteForce(t, scoring, -1.5, rank) })
		}
	}
}

func testRankMatchesBruteForce(t *testing.T, scoring string, prior, rankPrior float64) {
	seen := []string{"Paris", "Parma", "Lyon", "Lyons", "Oslo", "Porto"}
	for _, tc := range []struct {
		name  string
		cands []Candidate
	}{
		{"copy and parametric", []Candidate{{Title: "Berlin", Summary: "capital of Germany"}, {Title: "Bern", Summary: "Swiss city"}, {Title: "Bergen", Summary: "Norway"}, {Title: "Rome"}}},
		{"duplicate hits", []Candidate{{Title: "Berlin", Summary: "a"}, {Title: "Berlin", Summary: "b"}, {Title: "Bonn", Summary: "c"}}},
		{"title is a prefix of another", []Candidate{{Title: "Lyon", Summary: "x"}, {Title: "Lyonnais", Summary: "y"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := newTestEngine(t, seen, hashLogits)
			opts := Options{BeamWidth: 20, Scoring: scoring, CopyLogPrior: prior, CopyShift: logPlaceShift(rankPrior)}
			res, err := e.Rank(t.Context(), "which city", tc.cands, opts)
			require.NoError(t, err)
			// Width 2: the copied docids' second score bounds the parametric route (it drops beams below it);
			// the answer is still the exact top 2.
			opts.BeamWidth = 2
			top2, err := e.Rank(t.Context(), "which city", tc.cands, opts)
			require.NoError(t, err)

			prompt, err := e.prompts.Build("which city", tc.cands, PromptOptions{MaxTokens: 4096, MaxSummaryTokens: 256})
			require.NoError(t, err)
			var ctxDocs []string
			for _, c := range tc.cands {
				if !slices.Contains(ctxDocs, c.Title) {
					ctxDocs = append(ctxDocs, c.Title)
				}
			}
			z0 := hashLogits(prompt.IDs)
			rootToks, _ := e.global.Children(0)
			lse0 := logSumExp(z0, append(slices.Clone(rootToks), fakeCopy))
			want := bruteScores(t, hashLogits, append(slices.Clone(prompt.IDs), fakeCopy), ctxDocs, float64(z0[fakeCopy])-lse0+prior, scoring)
			for _, d := range ctxDocs {
				// A title repeated among the hits is credited to its first candidate, and so takes its place.
				want[d] -= rankPrior * math.Log(float64(slices.IndexFunc(tc.cands, func(c Candidate) bool { return c.Title == d })+1))
			}
			// Parametric scores: the first token is scored against the step-0 set, the rest as scoring says.
			param := bruteScores(t, hashLogits, prompt.IDs, seen, 0, scoring)
			seqs, _ := docidSeqs(fakeTokenizer{}, seen, fakeEnd)
			for i, d := range seen {
				tok := seqs[i][0]
				firstWithinTrie := float64(z0[tok]) - bruteNorm(z0, rootToks, scoring)
				param[d] += float64(z0[tok]) - lse0 - firstWithinTrie*boolf(len(rootToks) > 1 || scoring == ScoringVocab)
				if s, ok := want[d]; !ok || param[d] > s {
					want[d] = param[d]
				}
			}
			require.Len(t, res.Beams, len(want))
			order := slices.Collect(maps.Keys(want))
			slices.SortFunc(order, func(a, b string) int {
				if c := cmp.Compare(want[b], want[a]); c != 0 {
					return c
				}
				return cmp.Compare(a, b)
			})
			require.Len(t, top2.Beams, 2)
			for i, b := range top2.Beams {
				// Beam search of width 2 is exact when forced tokens cost nothing here; scored by the
				// vocabulary, a title can fall behind after the beam dropped it, so only its scores are exact.
				if scoring == ScoringTrie {
					require.Equal(t, order[i], b.DocID, "width 2, beam %d", i)
				}
				require.InDelta(t, want[b.DocID], b.Score, 1e-9)
			}
			require.InDelta(t, math.Exp(float64(z0[fakeCopy])-lse0), res.PCopy, 1e-9)
			for i, b := range res.Beams {
				require.InDelta(t, want[b.DocID], b.Score, 1e-9, "beam %d %s", i, b.DocID)
				if i > 0 {
					require.GreaterOrEqual(t, res.Beams[i-1].Score, b.Score)
				}
				wantRoute := RouteParametric
				if slices.Contains(ctxDocs, b.DocID) && (!slices.Contains(seen, b.DocID) || b.Route == RouteCopy) {
					wantRoute = RouteCopy
				}
				require.Equal(t, wantRoute, b.Route, b.DocID)
				if b.Route == RouteCopy {
					require.Equal(t, b.DocID, tc.cands[b.Candidate].Title)
					require.Equal(t, slices.IndexFunc(tc.cands, func(c Candidate) bool { return c.Title == b.DocID }), b.Candidate, "first hit is credited")
				} else {
					require.Equal(t, -1, b.Candidate)
				}
			}
		})
	}
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// biased returns logits that favour the token sequence of answer after the prompt ends with "A:\n".
func biased(answer []int64) func([]int64) []float32 {
	return func(seq []int64) []float32 {
		z := make([]float32, fakeVocab)
		anchor := slices.Index(seq, int64('A')+2)
		done := len(seq) - anchor - 3 // tokens after "A:\n"
		for i := len(seq) - 1; i >= 0; i-- {
			if seq[i] == int64('A')+2 && i+2 < len(seq) && seq[i+1] == int64(':')+2 {
				done = len(seq) - i - 3
				break
			}
		}
		if done >= 0 && done < len(answer) {
			z[answer[done]] = 10
		}
		return z
	}
}

func TestRankRoutes(t *testing.T) {
	seen := []string{"Paris", "Lyon", "Oslo"}
	cands := []Candidate{{Title: "Berlin", Summary: "s"}, {Title: "Bern", Summary: "s"}}
	enc := func(s string) []int64 { ids, _ := fakeTokenizer{}.Encode(s); return append(ids, fakeEnd) }

	t.Run("copy route", func(t *testing.T) {
		e, _ := newTestEngine(t, seen, biased(append([]int64{fakeCopy}, enc("Bern")...)))
		res, err := e.Rank(t.Context(), "q", cands, Options{BeamWidth: 3})
		require.NoError(t, err)
		require.Equal(t, "Bern", res.Beams[0].DocID)
		require.Equal(t, RouteCopy, res.Beams[0].Route)
		require.Equal(t, 1, res.Beams[0].Candidate)
		require.Greater(t, res.PCopy, 0.99)
		require.Len(t, res.Beams, 3)
	})
	t.Run("parametric route", func(t *testing.T) {
		e, _ := newTestEngine(t, seen, biased(enc("Oslo")))
		res, err := e.Rank(t.Context(), "q", cands, Options{BeamWidth: 3})
		require.NoError(t, err)
		require.Equal(t, Beam{DocID: "Oslo", Route: RouteParametric, Score: res.Beams[0].Score, Candidate: -1}, res.Beams[0])
		require.Less(t, res.PCopy, 0.01)
	})
	t.Run("empty context is parametric only", func(t *testing.T) {
		e, _ := newTestEngine(t, seen, hashLogits)
		res, err := e.Rank(t.Context(), "q", nil, Options{BeamWidth: 10})
		require.NoError(t, err)
		require.Len(t, res.Beams, 3)
		require.Zero(t, res.PCopy)
		for _, b := range res.Beams {
			require.Equal(t, RouteParametric, b.Route)
		}
	})
	t.Run("no seen corpus is copy only", func(t *testing.T) {
		e, _ := newTestEngine(t, nil, hashLogits)
		res, err := e.Rank(t.Context(), "q", cands, Options{BeamWidth: 10})
		require.NoError(t, err)
		require.Equal(t, 1.0, res.PCopy)
		require.Len(t, res.Beams, 2)
	})
	t.Run("empty allowed set is an error", func(t *testing.T) {
		e, _ := newTestEngine(t, nil, hashLogits)
		_, err := e.Rank(t.Context(), "q", nil, Options{})
		require.ErrorIs(t, err, ErrEmptyAllowedSet)
	})
}

func TestRankForcedPathsSkipRuns(t *testing.T) {
	// One candidate and one seen docid: both routes are forced after step 0, so the only Run is the
	// prefill (one chunk).
	e, m := newTestEngine(t, []string{"Oslo"}, hashLogits)
	res, err := e.Rank(t.Context(), "q", []Candidate{{Title: "Bern"}}, Options{BeamWidth: 4})
	require.NoError(t, err)
	require.Len(t, res.Beams, 2)
	chunks := (res.PromptTokens + 15) / 16
	require.Equal(t, chunks, res.Stats.ForwardRuns)
	require.Equal(t, chunks, m.calls)
	require.InDelta(t, 1.0, math.Exp(res.Beams[0].Score)+math.Exp(res.Beams[1].Score), 1e-9, "the two routes split the step-0 mass")
}

// TestRankTrainedRoutes: a model trained for one route is offered only that route at step 0. Copy only: every beam
// is a copy, its scores a distribution over the titles alone (p([COPY]) = 1), and the one Run is the prompt's
// with the copy tree (no parametric Run). Parametric only: no copy beam, and the candidates stay in the prompt.
func TestRankTrainedRoutes(t *testing.T) {
	seen := []string{"Oslo", "Ottawa", "Rome"}
	cands := []Candidate{{Title: "Berlin", Summary: "a city"}, {Title: "Bern", Summary: "another"}, {Title: "Paris", Summary: "a third"}}
	rank := func(routes ...Route) Result {
		man := fakeManifest()
		man.Routes = routes
		e, err := NewEngine(man, fakeTokenizer{}, []Model{&fakeModel{logitsFn: hashLogits}}, seen, EngineOptions{})
		require.NoError(t, err)
		defer e.Close()
		res, err := e.Rank(t.Context(), "capital", cands, Options{BeamWidth: 10})
		require.NoError(t, err)
		return res
	}
	both := rank()
	routes := map[Route]int{}
	for _, b := range both.Beams {
		routes[b.Route]++
	}
	require.Equal(t, map[Route]int{RouteCopy: 3, RouteParametric: 3}, routes)
	require.Less(t, both.PCopy, 1.0)

	copyOnly := rank(RouteCopy)
	require.Len(t, copyOnly.Beams, 3)
	for _, b := range copyOnly.Beams {
		require.Equal(t, RouteCopy, b.Route)
	}
	require.Equal(t, 1.0, copyOnly.PCopy)
	require.InDelta(t, 1.0, sumExp(copyOnly.Beams), 1e-9)
	require.Equal(t, 1, copyOnly.Stats.ForwardRuns, "the prompt and the copy tree in one Run, no parametric Run")
	require.Equal(t, 1, copyOnly.Stats.CopyRuns)

	param := rank(RouteParametric)
	require.Len(t, param.Beams, 3)
	for _, b := range param.Beams {
		require.Equal(t, RouteParametric, b.Route)
	}
	require.Equal(t, 0, param.Stats.CopyRuns)
	require.Equal(t, both.PromptTokens, param.PromptTokens, "the candidates are read, only not copied")
}

func TestRankTiesAreOrderedByDocID(t *testing.T) {
	flat := func([]int64) []float32 { return make([]float32, fakeVocab) }
	e, _ := newTestEngine(t, []string{"b", "a", "c"}, flat)
	res, err := e.Rank(t.Context(), "q", []Candidate{{Title: "e"}, {Title: "d"}}, Options{BeamWidth: 10})
	require.NoError(t, err)
	var got []string
	for _, b := range res.Beams {
		got = append(got, b.DocID)
	}
	require.Equal(t, []string{"a", "b", "c", "d", "e"}, got)
}

func TestRankHundredCandidatesAndBudget(t *testing.T) {
	var cands []Candidate
	for i := range 100 {
		cands = append(cands, Candidate{Title: fmt.Sprintf("Doc %03d", i), Summary: fmt.Sprintf("summary of document number %d", i)})
	}
	e, _ := newTestEngine(t, []string{"Seen one", "Seen two"}, hashLogits)
	res, err := e.Rank(t.Context(), "q", cands, Options{BeamWidth: 10})
	require.NoError(t, err)
	require.Equal(t, 100, res.InContext)
	require.Len(t, res.Beams, 10)
	// Prefill chunks, the last of which also feeds the copy route's tree for all 100 titles, and one
	// parametric Run: "Seen one" and "Seen two" share the chain "Seen " and then branch, after which each is
	// forced to its end.
	require.Equal(t, (res.PromptTokens+15)/16+1, res.Stats.ForwardRuns)
	require.Equal(t, 1, res.Stats.CopyRuns)

	small, err := e.Rank(t.Context(), "q", cands, Options{BeamWidth: 10, MaxPromptTokens: 400})
	require.NoError(t, err)
	require.Less(t, small.InContext, 100)
	require.LessOrEqual(t, small.PromptTokens, 400)
	for _, b := range small.Beams {
		if b.Route == RouteCopy {
			require.Less(t, b.Candidate, small.InContext, "only in-context candidates can be copied")
		}
	}
}

func TestRankContextErrors(t *testing.T) {
	e, m := newTestEngine(t, []string{"Oslo", "Orlando"}, hashLogits)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := e.Rank(ctx, "q", nil, Options{})
	require.ErrorIs(t, err, context.Canceled)

	m.failAt = m.calls + 1
	_, err = e.Rank(t.Context(), "q", nil, Options{})
	require.ErrorContains(t, err, "scripted failure")
	// The engine recovers for the next request.
	_, err = e.Rank(t.Context(), "q", nil, Options{})
	require.NoError(t, err)
}

// TestRankContextFull: header and query alone over the budget is no prompt at all, with or without
// candidates: ErrContextFull before any Run, never a decode of a longer prompt (MODEL_FORMAT.md, "Prompt
// budget"; the Python reference raises ContextFullError on the same cases).
func TestRankContextFull(t *testing.T) {
	e, m := newTestEngine(t, []string{"Oslo"}, hashLogits)
	fixed := len("H:\n") + len("Q: q\nA:\n") // the fake template, one token per byte
	for _, cands := range [][]Candidate{nil, {{Title: "Bern", Summary: "s"}}} {
		_, err := e.Rank(t.Context(), "q", cands, Options{MaxPromptTokens: fixed - 1})
		require.ErrorIs(t, err, ErrContextFull)
		require.Zero(t, m.calls, "no Run for a prompt that cannot be built")
		res, err := e.Rank(t.Context(), "q", cands, Options{MaxPromptTokens: fixed})
		require.NoError(t, err, "exactly the budget: a prompt without candidates, parametric only")
		require.Zero(t, res.InContext)
		require.Equal(t, fixed, res.PromptTokens)
		m.calls = 0
	}
}

// TestRankManifestSummaryCap: a manifest's max_summary_tokens caps every summary below the request's own
// cap (the model never sees longer summaries than training gave it); a smaller request cap still wins.
func TestRankManifestSummaryCap(t *testing.T) {
	man := fakeManifest()
	man.MaxSummaryTokens = 3
	e, err := NewEngine(man, fakeTokenizer{}, []Model{&fakeModel{logitsFn: hashLogits}}, []string{"Seen one"}, EngineOptions{PrefillChunk: 16})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	cands := []Candidate{
		{Title: "Alpha", Summary: "one two three four five six seven eight"},
		{Title: "Beta", Summary: "ab"}, // one token per byte
	}
	res, err := e.Rank(t.Context(), "q", cands, Options{BeamWidth: 2})
	require.NoError(t, err)
	require.Equal(t, []int{3, 2}, res.SummaryTokens)

	res, err = e.Rank(t.Context(), "q", cands, Options{BeamWidth: 2, MaxSummaryTokens: 1})
	require.NoError(t, err)
	require.Equal(t, []int{1, 1}, res.SummaryTokens)
}

// TestRankManifestPromptCap: a manifest's max_prompt_tokens bounds the prompt when the request asks for more
// or for nothing; a smaller request budget still wins.
func TestRankManifestPromptCap(t *testing.T) {
	cands := make([]Candidate, 20)
	for i := range cands {
		cands[i] = Candidate{Title: fmt.Sprintf("Title %d", i), Summary: "some words of summary"}
	}
	rank := func(manCap, reqCap int) Result {
		man := fakeManifest()
		man.MaxPromptTokens = manCap
		e, err := NewEngine(man, fakeTokenizer{}, []Model{&fakeModel{logitsFn: hashLogits}}, []string{"Seen one"}, EngineOptions{PrefillChunk: 16})
		require.NoError(t, err)
		t.Cleanup(func() { _ = e.Close() })
		res, err := e.Rank(t.Context(), "q", cands, Options{BeamWidth: 2, MaxPromptTokens: reqCap})
		require.NoError(t, err)
		return res
	}
	free := rank(0, 0)
	require.Greater(t, free.PromptTokens, 400, "without a cap every candidate fits the fake context")
	capped := rank(400, 0)
	require.LessOrEqual(t, capped.PromptTokens, 400)
	sum := func(xs []int) (n int) {
		for _, x := range xs {
			n += x
		}
		return n
	}
	require.Less(t, sum(capped.SummaryTokens), sum(free.SummaryTokens), "summaries shrink to fit the cap")
	require.Equal(t, capped.PromptTokens, rank(400, 4096).PromptTokens, "a larger request budget cannot exceed the manifest's")
	require.LessOrEqual(t, rank(400, 200).PromptTokens, 200, "a smaller request budget wins")
}

// TestRankAdmit: the admission hook sees the built prompt's length before any Run, and its refusal ends
// the call without running the model.
func TestRankAdmit(t *testing.T) {
	e, m := newTestEngine(t, []string{"Oslo"}, hashLogits)
	refused := errors.New("no budget")
	var seen int
	cands := []Candidate{{Title: "Bern", Summary: "capital"}}
	_, err := e.Rank(t.Context(), "q", cands, Options{Admit: func(n int) error { seen = n; return refused }})
	require.ErrorIs(t, err, refused)
	require.Zero(t, m.calls, "a refused run never reaches the model")
	res, err := e.Rank(t.Context(), "q", cands, Options{Admit: func(n int) error { seen = n; return nil }})
	require.NoError(t, err)
	require.Equal(t, res.PromptTokens, seen)
	require.Positive(t, m.calls)
}

func TestWarmUp(t *testing.T) {
	e, m := newTestEngine(t, []string{"Oslo"}, hashLogits)
	tokens, took, err := e.WarmUp(t.Context(), Options{MaxPromptTokens: 300})
	require.NoError(t, err)
	require.Greater(t, tokens, 250, "the synthetic candidates fill the prompt budget")
	require.LessOrEqual(t, tokens, 300)
	require.Positive(t, took)
	require.Positive(t, m.calls)
	require.Equal(t, 1, e.Sessions())
}

func TestExpNonPositiveMatchesMathExp(t *testing.T) {
	for i := 0; i <= 200000; i++ {
		y := -float64(i) * 700 / 200000
		want := math.Exp(y)
		require.InEpsilon(t, want, expNonPositive(y), 1e-11, "y=%g", y)
	}
	require.Equal(t, 1.0, expNonPositive(0))
	require.Zero(t, expNonPositive(-750))
}

// TestRankMemoryScope: recalling within Options.MemoryScope answers exactly as an engine whose seen corpus is
// the scope's seen docids (duplicates and unseen docids ignored), on both routes and both scorings; an empty
// scope leaves the memory route out, and a remembered title outside the scope is not answered.
func TestRankMemoryScope(t *testing.T) {
	seen := []string{"Paris", "Parma", "Lyon", "Lyons", "Oslo", "Porto"}
	cands := []Candidate{{Title: "Berlin", Summary: "capital of Germany"}, {Title: "Bern", Summary: "Swiss city"}, {Title: "Lyon", Summary: "x"}}
	for _, scoring := range []string{ScoringTrie, ScoringVocab} {
		for _, tc := range []struct {
			name         string
			scope, alone []string
		}{
			{"part", []string{"Berlin", "Lyons", "Parma", "Lyons", "Oslo"}, []string{"Oslo", "Parma", "Lyons"}},
			{"one", []string{"Porto"}, []string{"Porto"}},
			{"all", seen, seen},
			{"none", []string{}, nil},
			{"none seen", []string{"Berlin", "Bern"}, nil},
		} {
			t.Run(scoring+"/"+tc.name, func(t *testing.T) {
				full, _ := newTestEngine(t, seen, hashLogits)
				got, err := full.Rank(t.Context(), "which city", cands, Options{BeamWidth: 20, Scoring: scoring, CopyLogPrior: -1, MemoryScope: tc.scope})
				require.NoError(t, err)
				small, _ := newTestEngine(t, tc.alone, hashLogits)
				want, err := small.Rank(t.Context(), "which city", cands, Options{BeamWidth: 20, Scoring: scoring, CopyLogPrior: -1})
				require.NoError(t, err)
				require.Equal(t, len(want.Beams), len(got.Beams))
				for i := range want.Beams {
					require.Equal(t, want.Beams[i].DocID, got.Beams[i].DocID, "beam %d", i)
					require.Equal(t, want.Beams[i].Route, got.Beams[i].Route, "beam %d", i)
					require.InDelta(t, want.Beams[i].Score, got.Beams[i].Score, 1e-9, "beam %d", i)
				}
				require.InDelta(t, want.PCopy, got.PCopy, 1e-12)
				for _, b := range got.Beams {
					if b.Route == RouteParametric {
						require.Contains(t, tc.alone, b.DocID)
					}
				}
			})
		}
	}
	t.Run("the remembered title outside the scope", func(t *testing.T) {
		enc := func(s string) []int64 { ids, _ := fakeTokenizer{}.Encode(s); return append(ids, fakeEnd) }
		e, _ := newTestEngine(t, seen, biased(enc("Oslo")))
		res, err := e.Rank(t.Context(), "q", cands, Options{BeamWidth: 3})
		require.NoError(t, err)
		require.Equal(t, "Oslo", res.Beams[0].DocID)
		res, err = e.Rank(t.Context(), "q", cands, Options{BeamWidth: 10, MemoryScope: []string{"Paris", "Lyon"}})
		require.NoError(t, err)
		for _, b := range res.Beams {
			require.NotEqual(t, "Oslo", b.DocID)
			if b.Route == RouteParametric {
				require.Contains(t, []string{"Paris", "Lyon"}, b.DocID)
			}
		}
	})
}

// TestRankEachRoute: with a narrow answer the copy route fills it and the memory's best is cut; EachRoute
// adds it after the top (its score what the full search gives that title), and adds nothing when both routes
// are in.
func TestRankEachRoute(t *testing.T) {
	seen := []string{"Paris", "Parma", "Lyon", "Lyons", "Oslo", "Porto"}
	cands := []Candidate{{Title: "Berlin", Summary: "a"}, {Title: "Bern", Summary: "b"}, {Title: "Bergen", Summary: "c"}}
	enc := func(s string) []int64 { ids, _ := fakeTokenizer{}.Encode(s); return append(ids, fakeEnd) }
	for _, scoring := range []string{ScoringTrie, ScoringVocab} {
		t.Run(scoring, func(t *testing.T) {
			e, _ := newTestEngine(t, seen, biased(append([]int64{fakeCopy}, enc("Bern")...)))
			full, err := e.Rank(t.Context(), "q", cands, Options{BeamWidth: 20, Scoring: scoring})
			require.NoError(t, err)
			remembered := make(map[string]float64)
			for _, b := range full.Beams {
				if b.Route == RouteParametric {
					remembered[b.DocID] = b.Score
				}
			}

			cut, err := e.Rank(t.Context(), "q", cands, Options{BeamWidth: 1, Scoring: scoring})
			require.NoError(t, err)
			require.Len(t, cut.Beams, 1)
			for _, b := range cut.Beams {
				require.Equal(t, RouteCopy, b.Route)
			}
			each, err := e.Rank(t.Context(), "q", cands, Options{BeamWidth: 1, Scoring: scoring, EachRoute: true})
			require.NoError(t, err)
			require.Equal(t, cut.Beams, each.Beams[:1])
			require.Len(t, each.Beams, 2)
			// The memory's best at the route's own width (BeamWidth: a beam search, not every title).
			require.Equal(t, RouteParametric, each.Beams[1].Route)
			require.Contains(t, remembered, each.Beams[1].DocID)
			require.InDelta(t, remembered[each.Beams[1].DocID], each.Beams[1].Score, 1e-9)

			wide, err := e.Rank(t.Context(), "q", cands, Options{BeamWidth: 20, Scoring: scoring, EachRoute: true})
			require.NoError(t, err)
			require.Equal(t, full.Beams, wide.Beams)
		})
	}
}

// logPlaceShift is a place shift of w x ln(place) down (rank.RankPrior's form, which this package cannot import);
// nil for 0.
func logPlaceShift(w float64) func(int) float64 {
	if w == 0 {
		return nil
	}
	return func(k int) float64 { return -w * math.Log(float64(k)) }
}

// TestRankMemoryShift: each remembered title's score moves by MemoryShift(its place in the scope), and the
// memory's pick is the exact best after it even at width 1 (the route follows every title of the scope).
func TestRankMemoryShift(t *testing.T) {
	seen := []string{"Paris", "Parma", "Lyon", "Lyons", "Oslo", "Porto"}
	scope := []string{"Berlin", "Lyons", "Parma", "Oslo", "Porto"} // places 2, 3, 4, 5
	place := map[string]float64{"Lyons": 2, "Parma": 3, "Oslo": 4, "Porto": 5}
	cands := []Candidate{{Title: "Berlin", Summary: "a"}, {Title: "Bern", Summary: "b"}}
	for _, scoring := range []string{ScoringTrie, ScoringVocab} {
		for _, w := range []float64{0.5, 3} {
			t.Run(fmt.Sprintf("%s/%g", scoring, w), func(t *testing.T) {
				e, _ := newTestEngine(t, seen, hashLogits)
				plain, err := e.Rank(t.Context(), "which city", cands, Options{BeamWidth: 20, Scoring: scoring, MemoryScope: scope})
				require.NoError(t, err)
				want := make(map[string]float64)
				for _, b := range plain.Beams {
					if b.Route == RouteParametric {
						want[b.DocID] = b.Score - w*math.Log(place[b.DocID])
					}
				}
				require.Len(t, want, 4)
				res, err := e.Rank(t.Context(), "which city", cands, Options{BeamWidth: 20, Scoring: scoring, MemoryScope: scope, MemoryShift: logPlaceShift(w)})
				require.NoError(t, err)
				got := 0
				for _, b := range res.Beams {
					if b.Route == RouteParametric {
						require.InDelta(t, want[b.DocID], b.Score, 1e-9, b.DocID)
						got++
					}
				}
				require.Equal(t, 4, got)
				best := ""
				for d, s := range want {
					if best == "" || s > want[best] || s == want[best] && d < best {
						best = d
					}
				}
				one, err := e.Rank(t.Context(), "which city", cands, Options{BeamWidth: 1, Scoring: scoring, MemoryScope: scope, MemoryShift: logPlaceShift(w), EachRoute: true})
				require.NoError(t, err)
				i := slices.IndexFunc(one.Beams, func(b Beam) bool { return b.Route == RouteParametric })
				require.GreaterOrEqual(t, i, 0)
				require.Equal(t, best, one.Beams[i].DocID)
				require.InDelta(t, want[best], one.Beams[i].Score, 1e-9)
			})
		}
	}
}
