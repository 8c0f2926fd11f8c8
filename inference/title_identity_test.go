//go:build tokenizers

package inference_test

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/inference/tok"
)

// TestTitleTokenIdentityEveryCorpusTitle builds a format-2 prompt for EVERY nq_qed title with the real
// SmolLM2 tokenizer (models/tiny's) and requires the title's ids inside the candidate block, with a summary
// and title-only, to be exactly its docid's ids (encode(title), without [end]) right after "Title:\n":
// the copy route can copy the tokens it reads. It also counts how many titles format 1 spells
// differently (the issue: nearly all). The corpus and tokenizer are committed; missing ones fail.
func TestTitleTokenIdentityEveryCorpusTitle(t *testing.T) {
	man, err := inference.LoadManifest(filepath.Join("..", "models", "tiny"))
	require.NoError(t, err)
	tk, err := tok.Load(man.Path(man.Tokenizer))
	require.NoError(t, err)
	defer tk.Close()

	f, err := os.Open(filepath.Join("..", "data", "nq_qed", "corpus.jsonl.gz"))
	require.NoError(t, err)
	defer f.Close()
	gz, err := gzip.NewReader(f)
	require.NoError(t, err)
	var titles []string
	sc := bufio.NewScanner(gz)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var d struct {
			Title string `json:"title"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &d))
		titles = append(titles, d.Title)
	}
	require.NoError(t, sc.Err())
	require.Greater(t, len(titles), 7000)

	v2 := inference.Template{Header: man.Template.Header, Candidate: "[{i}] {summary}\nTitle:\n{title}\n",
		CandidateTitleOnly: "[{i}] Title:\n{title}\n", Query: man.Template.Query, Format: inference.PromptFormatV2}
	b2, err := inference.NewPromptBuilder(tk, v2)
	require.NoError(t, err)
	_, after, _ := strings.Cut("[{i}] {summary}\n    Title: {title}\n", "{summary}") // format 1's template
	lead, err := tk.Encode("\nTitle:\n")
	require.NoError(t, err)
	nl, err := tk.Encode("\n")
	require.NoError(t, err)
	query, err := tk.Encode("Query: q\nOutput:\n")
	require.NoError(t, err)
	opts := inference.PromptOptions{MaxTokens: 1 << 20, MaxSummaryTokens: 256}
	v1Same := 0
	for _, title := range titles {
		doc, err := tk.Encode(title)
		require.NoError(t, err)
		require.NotEmpty(t, doc, title)
		p, err := b2.Build("q", []inference.Candidate{{Title: title, Summary: "Some summary text."}}, opts)
		require.NoError(t, err)
		tail := slices.Concat(lead, doc, nl)
		end := len(p.IDs) - len(query) // the block ends where the query block starts
		require.Equal(t, tail, p.IDs[end-len(tail):end], "title %q: in-prompt ids are not its docid ids", title)

		p, err = b2.Build("q", []inference.Candidate{{Title: title}}, opts)
		require.NoError(t, err)
		end = len(p.IDs) - len(query)
		require.Equal(t, slices.Concat(doc, nl), p.IDs[end-len(doc)-len(nl):end], "title-only block of %q", title)

		v1Block, err := tk.Encode(strings.ReplaceAll(after, "{title}", title)) // format 1's segment after the summary
		require.NoError(t, err)
		if containsRun(v1Block, doc) {
			v1Same++
		}
	}
	t.Logf("%d titles: format 2 holds every docid's ids verbatim; format 1 holds them for %d", len(titles), v1Same)
	require.Less(t, v1Same, len(titles)/10, "format 1 was expected to spell nearly every title differently")
}

func containsRun(seq, run []int64) bool {
	for i := 0; i+len(run) <= len(seq); i++ {
		if slices.Equal(seq[i:i+len(run)], run) {
			return true
		}
	}
	return false
}
