package inference

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSummaryCap(t *testing.T) {
	tests := []struct {
		lens        []int
		room, limit int
		want        int
	}{
		{[]int{10, 10}, 100, 256, 256},  // everything fits: the cap stays at the limit
		{[]int{10, 10}, 100, 4, 4},      // the configured cap binds
		{[]int{30, 5, 30}, 45, 256, 20}, // water-filling: 20+5+20 = 45
		{[]int{30, 5, 30}, 44, 256, 19}, // one less room, one less each for the long ones
		{[]int{7}, 0, 256, 0},
		{nil, 10, 256, 256},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, summaryCap(tc.lens, tc.room, tc.limit), "%+v", tc)
	}
}

func TestPromptBuild(t *testing.T) {
	b, err := NewPromptBuilder(fakeTokenizer{}, fakeManifest().Template)
	require.NoError(t, err)
	enc := func(s string) []int64 { ids, _ := fakeTokenizer{}.Encode(s); return ids }
	cands := []Candidate{{Title: "Alpha", Summary: strings.Repeat("a", 40)}, {Title: "Beta", Summary: "bb"}, {Title: "Gamma", Summary: strings.Repeat("g", 40)}}
	fixed := len(enc("H:\n")) + len(enc("Q: q\nA:\n"))
	over := func(i int, title string) int {
		return len(enc("["+string(rune('1'+i))+"] ")) + len(enc("\nT: "+title+"\n"))
	}
	overhead := over(0, "Alpha") + over(1, "Beta") + over(2, "Gamma")

	t.Run("all fit", func(t *testing.T) {
		p, err := b.Build("q", cands, PromptOptions{MaxTokens: 1000, MaxSummaryTokens: 256})
		require.NoError(t, err)
		require.Equal(t, 3, p.InContext)
		require.Equal(t, []int{40, 2, 40}, p.SummaryTokens)
		want := enc("H:\n[1] " + cands[0].Summary + "\nT: Alpha\n[2] bb\nT: Beta\n[3] " + cands[2].Summary + "\nT: Gamma\nQ: q\nA:\n")
		require.Equal(t, want, p.IDs)
	})
	t.Run("summaries share the room", func(t *testing.T) {
		p, err := b.Build("q", cands, PromptOptions{MaxTokens: fixed + overhead + 2 + 2*15, MaxSummaryTokens: 256})
		require.NoError(t, err)
		require.Equal(t, 3, p.InContext)
		require.Equal(t, []int{15, 2, 15}, p.SummaryTokens)
		require.Len(t, p.IDs, fixed+overhead+32)
	})
	t.Run("candidates that do not fit are dropped, never silently", func(t *testing.T) {
		p, err := b.Build("q", cands, PromptOptions{MaxTokens: fixed + over(0, "Alpha") + over(1, "Beta"), MaxSummaryTokens: 256})
		require.NoError(t, err)
		require.Equal(t, 2, p.InContext)
		require.Equal(t, []int{0, 0}, p.SummaryTokens)
	})
	t.Run("title only", func(t *testing.T) {
		p, err := b.Build("q", cands[:2], PromptOptions{MaxTokens: 1000, MaxSummaryTokens: 256, TitleOnly: true})
		require.NoError(t, err)
		require.Equal(t, enc("H:\n[1] T: Alpha\n[2] T: Beta\nQ: q\nA:\n"), p.IDs)
	})
	t.Run("missing summary uses the title", func(t *testing.T) {
		p, err := b.Build("q", []Candidate{{Title: "Alpha"}}, PromptOptions{MaxTokens: 1000, MaxSummaryTokens: 256})
		require.NoError(t, err)
		require.Equal(t, enc("H:\n[1] T: Alpha\nQ: q\nA:\n"), p.IDs)
	})
	t.Run("query over budget", func(t *testing.T) {
		_, err := b.Build(strings.Repeat("x", 100), cands, PromptOptions{MaxTokens: 50, MaxSummaryTokens: 256})
		require.ErrorIs(t, err, ErrContextFull)
	})
}

// TestPromptBuildFormat2 holds the format-2 builder to MODEL_FORMAT.md on the one-token-per-byte fake:
// every title is a segment of its own (so its ids are exactly its docid's), the budget counts the
// title's pieces, and the pieces are the template around {summary} and {title}.
func TestPromptBuildFormat2(t *testing.T) {
	tmpl := Template{Header: "H:\n", Candidate: "[{i}] {summary}\nT:\n{title}\n", CandidateTitleOnly: "[{i}] T:\n{title}\n", Query: "Q: {query}\nA:\n", Format: PromptFormatV2}
	rec := &recordingTokenizer{}
	b, err := NewPromptBuilder(rec, tmpl)
	require.NoError(t, err)
	enc := func(s string) []int64 { ids, _ := fakeTokenizer{}.Encode(s); return ids }
	cands := []Candidate{{Title: "Alpha {i}", Summary: strings.Repeat("a", 40)}, {Title: "Beta"}}
	fixed := len(enc("H:\n")) + len(enc("Q: q\nA:\n"))
	over := len(enc("[1] \nT:\nAlpha {i}\n")) + len(enc("[2] T:\nBeta\n"))

	rec.calls = nil
	p, err := b.Build("q", cands, PromptOptions{MaxTokens: 1000, MaxSummaryTokens: 256})
	require.NoError(t, err)
	require.Equal(t, enc("H:\n[1] "+cands[0].Summary+"\nT:\nAlpha {i}\n[2] T:\nBeta\nQ: q\nA:\n"), p.IDs)
	require.Equal(t, []string{"Q: q\nA:\n", "[1] ", cands[0].Summary, "\nT:\n", "Alpha {i}", "\n", "[2] T:\n", "Beta", "\n"}, rec.calls,
		"each title is encoded alone, braces in it verbatim")

	p, err = b.Build("q", cands, PromptOptions{MaxTokens: fixed + over + 7, MaxSummaryTokens: 256})
	require.NoError(t, err)
	require.Equal(t, 2, p.InContext)
	require.Equal(t, []int{7, 0}, p.SummaryTokens)
	p, err = b.Build("q", cands, PromptOptions{MaxTokens: fixed + over - 1, MaxSummaryTokens: 256})
	require.NoError(t, err)
	require.Equal(t, 1, p.InContext, "the title's own tokens count in the block's overhead")

	p, err = b.Build("q", cands[:1], PromptOptions{MaxTokens: 1000, TitleOnly: true})
	require.NoError(t, err)
	require.Equal(t, enc("H:\n[1] T:\nAlpha {i}\nQ: q\nA:\n"), p.IDs)

	// SummaryCandidates: the first N with their summaries, the rest by title alone.
	three := []Candidate{{Title: "A", Summary: "aaa"}, {Title: "B", Summary: "bbb"}, {Title: "C", Summary: "ccc"}}
	p, err = b.Build("q", three, PromptOptions{MaxTokens: 1000, MaxSummaryTokens: 256, SummaryCandidates: 1})
	require.NoError(t, err)
	require.Equal(t, enc("H:\n[1] aaa\nT:\nA\n[2] T:\nB\n[3] T:\nC\nQ: q\nA:\n"), p.IDs)
	require.Equal(t, []int{3, 0, 0}, p.SummaryTokens)
	p, err = b.Build("q", three, PromptOptions{MaxTokens: 1000, MaxSummaryTokens: 256, SummaryCandidates: 3})
	require.NoError(t, err)
	require.Equal(t, []int{3, 3, 3}, p.SummaryTokens, "as many as the list: every summary")

	bad := tmpl
	bad.Candidate = "{title} {summary}"
	_, err = NewPromptBuilder(fakeTokenizer{}, bad)
	require.ErrorContains(t, err, "template.candidate")
	bad = tmpl
	bad.Format = 7
	_, err = NewPromptBuilder(fakeTokenizer{}, bad)
	require.ErrorContains(t, err, "format 7 unknown")
}

// recordingTokenizer is a fake tokenizer (one token per byte) that records every text it encodes.
type recordingTokenizer struct{ calls []string }

func (r *recordingTokenizer) Encode(s string) ([]int64, error) {
	r.calls = append(r.calls, s)
	return fakeTokenizer{}.Encode(s)
}

func (r *recordingTokenizer) Close() error { return nil }

func TestByTitle(t *testing.T) {
	with, without := Candidate{Title: "A", Summary: "a"}, Candidate{Title: "B"}
	require.False(t, Options{}.ByTitle(5, with))
	require.True(t, Options{}.ByTitle(0, without), "no summary")
	require.True(t, Options{TitleOnly: true}.ByTitle(0, with))
	require.False(t, Options{SummaryCandidates: 2}.ByTitle(1, with))
	require.True(t, Options{SummaryCandidates: 2}.ByTitle(2, with), "past the first 2")
}
