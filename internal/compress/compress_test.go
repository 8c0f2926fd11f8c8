package compress

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the summaries of testdata/extractive.golden.json from Go's Extractive")

func TestExtractive(t *testing.T) {
	require.Equal(t, "a b c", Extractive("  a\tb\n\nc  "))
	require.Equal(t, "", Extractive(" \n "))
	long := strings.Repeat("word ", 500)
	require.Len(t, strings.Fields(Extractive(long)), LeadWords)
	require.Equal(t, "Zürich – café", Extractive("Zürich\u00a0– café"), "non-breaking space splits like Python's str.split")
	require.Equal(t, "a b", Extractive("a\x1fb"), "U+001F splits like Python's str.split")
}

func TestLead(t *testing.T) {
	var c Compressor = Lead{}
	require.Equal(t, Name, c.ID())
	got, err := c.Compress(t.Context(), "ignored title", "  one two\tthree ")
	require.NoError(t, err)
	require.Equal(t, "one two three", got)
}

type extractiveGolden struct {
	Comment          string `json:"_comment"`
	PythonWhitespace []rune `json:"python_whitespace"`
	Cases            []struct {
		Name    string `json:"name"`
		Text    string `json:"text"`
		Summary string `json:"summary"`
	} `json:"cases"`
}

// TestExtractiveGolden checks Go's Extractive against the summaries that training/tests/test_compress.py
// checks Python's against: the same file, so the two agree.
func TestExtractiveGolden(t *testing.T) {
	path := filepath.Join("testdata", "extractive.golden.json")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var g extractiveGolden
	require.NoError(t, json.Unmarshal(raw, &g))
	require.NotEmpty(t, g.Cases)
	if *update {
		for i := range g.Cases {
			g.Cases[i].Summary = Extractive(g.Cases[i].Text)
		}
		out, err := json.MarshalIndent(g, "", " ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, append(out, '\n'), 0o644))
	}
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			require.Equal(t, c.Summary, Extractive(c.Text))
		})
	}
	// The separator set itself, over every code point.
	want := map[rune]bool{}
	for _, r := range g.PythonWhitespace {
		want[r] = true
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if isPySpace(r) != want[r] {
			t.Fatalf("U+%04X: isPySpace %v, Python str.isspace %v", r, isPySpace(r), want[r])
		}
	}
}
