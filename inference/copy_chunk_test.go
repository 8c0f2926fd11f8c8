package inference

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// chunkTitles are context titles with shared prefixes at several depths, a title that is a prefix of
// another, forced tails and single-token subtrees: every shape the copy route's token tree can take.
func chunkTitles() []Candidate {
	titles := []string{"Super Bowl XV", "Super Bowl XL", "Super Bowl", "Lyon", "Lyonnais", "Bern", "Berlin",
		"Bergen", "Oslo", "X", "Y", "Zagreb", "List of lakes", "List of lakes of Norway", "List of rivers"}
	for i := range 40 {
		titles = append(titles, fmt.Sprintf("Doc %03d", i*7))
	}
	cands := make([]Candidate, len(titles))
	for i, t := range titles {
		cands[i] = Candidate{Title: t, Summary: fmt.Sprintf("summary %d of %s", i, t)}
	}
	return cands
}

// TestCopyRouteChunkedEqualsOneRun: whatever the mask budget, the copy route's scores are bit for bit
// those of one Run (the fake model rebuilds every row's visible sequence and position from the mask, so
// a token that lost sight of [COPY], an ancestor, or the prompt would change its logits or fail the call),
// and each Run's mask stays within the budget, or within the largest single subtree's if that is larger.
func TestCopyRouteChunkedEqualsOneRun(t *testing.T) {
	cands := chunkTitles()
	seen := []string{"Paris", "Parma", "Porto"}
	rank := func(budget int64) Result {
		m := &fakeModel{logitsFn: hashLogits}
		e, err := NewEngine(fakeManifest(), fakeTokenizer{}, []Model{m}, seen, EngineOptions{PrefillChunk: 64, CopyMaskBytes: budget})
		require.NoError(t, err)
		defer e.Close()
		res, err := e.Rank(t.Context(), "which city", cands, Options{BeamWidth: 200})
		require.NoError(t, err)
		res.Stats.Prefill, res.Stats.Decode = 0, 0
		return res
	}
	one := rank(-1)
	require.Equal(t, 1, one.Stats.CopyRuns)
	require.Equal(t, one, rank(0), "the default budget holds this tree in one Run")
	copyMask := one.Stats.CopyMaskBytes
	// With a budget of 1 byte every subtree of the root goes alone: the largest is the floor of any bound.
	largest := rank(1).Stats.CopyMaskBytes
	for _, budget := range []int64{copyMask / 2, copyMask / 5, 1} {
		t.Run(fmt.Sprintf("budget=%d", budget), func(t *testing.T) {
			got := rank(budget)
			require.Equal(t, one.Beams, got.Beams, "scores, routes and order are identical")
			require.Equal(t, one.PCopy, got.PCopy)
			require.Equal(t, one.Stats.TokensFed, got.Stats.TokensFed, "chunks never feed a token twice, [COPY] included")
			require.Greater(t, got.Stats.CopyRuns, 1)
			require.Equal(t, one.Stats.ForwardRuns+got.Stats.CopyRuns-1, got.Stats.ForwardRuns)
			require.LessOrEqual(t, got.Stats.CopyMaskBytes, max(budget, largest))
		})
	}
	// Every in-context title is scored (copy route) and matches the brute-force definition.
	e, _ := newTestEngine(t, seen, hashLogits)
	e.copyMaskBytes = 1
	prompt, err := e.prompts.Build("which city", cands, PromptOptions{MaxTokens: 4096, MaxSummaryTokens: 256})
	require.NoError(t, err)
	z0 := hashLogits(prompt.IDs)
	rootToks, _ := e.global.Children(0)
	lse0 := logSumExp(z0, append(rootToks, fakeCopy))
	var titles []string
	for _, c := range cands {
		titles = append(titles, c.Title)
	}
	for _, scoring := range []string{ScoringTrie, ScoringVocab} {
		res, err := e.Rank(t.Context(), "which city", cands, Options{BeamWidth: 200, Scoring: scoring})
		require.NoError(t, err)
		want := bruteScores(t, hashLogits, append(slices.Clone(prompt.IDs), fakeCopy), titles, float64(z0[fakeCopy])-lse0, scoring)
		copied := 0
		for _, b := range res.Beams {
			if b.Route == RouteCopy {
				copied++
				require.InDelta(t, want[b.DocID], b.Score, 1e-9, "%s %s", scoring, b.DocID)
			}
		}
		require.Equal(t, len(titles), copied, "no seen docid is among the titles, so every title is a copy beam")
	}
}

// TestCopyRouteFeedsOnlyUpToBranches: tokens below the last branching node of a path are forced, cost
// nothing and are not fed. "Berlin" and "Bern" branch after "Ber": [COPY] B e r are fed, "lin" and "n"
// are not.
func TestCopyRouteFeedsOnlyUpToBranches(t *testing.T) {
	e, _ := newTestEngine(t, nil, hashLogits)
	res, err := e.Rank(t.Context(), "q", []Candidate{{Title: "Berlin"}, {Title: "Bern"}}, Options{BeamWidth: 4})
	require.NoError(t, err)
	require.Equal(t, res.PromptTokens+4, res.Stats.TokensFed)
	require.Equal(t, 1, res.Stats.CopyRuns)
	require.InDelta(t, 1.0, sumExp(res.Beams), 1e-9, "the copy route's scores are a distribution")

	// Scored by the vocabulary, every token of both titles is paid for: [COPY] B e r l i n and the n of
	// Bern are fed (each title's end token is the last one scored, from its parent's row), and the two
	// scores no longer sum to 1.
	res, err = e.Rank(t.Context(), "q", []Candidate{{Title: "Berlin"}, {Title: "Bern"}}, Options{BeamWidth: 4, Scoring: ScoringVocab})
	require.NoError(t, err)
	require.Equal(t, res.PromptTokens+8, res.Stats.TokensFed)
	require.Less(t, sumExp(res.Beams), 1.0)
}

func sumExp(bs []Beam) float64 {
	s := 0.0
	for _, b := range bs {
		s += math.Exp(b.Score)
	}
	return s
}
