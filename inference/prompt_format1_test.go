//go:build tokenizers

package inference_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/inference/tok"
)

// TestPromptFormat1Golden keeps format 1 served as it was trained: the Go builder, given the template of the
// last format-1 model (icicle-small 2026-11-22) and Format = PromptFormatV1, must give exactly the prompt ids,
// included count and summary lengths that the Python builder wrote into that model's golden vectors
// (testdata/prompt_format1.jsonl, copied from them when models/small was retrained in format 2). The
// tokenizer is models/tiny's, byte-identical to the one that model shipped.
func TestPromptFormat1Golden(t *testing.T) {
	tk, err := tok.Load(filepath.Join("..", "models", "tiny", "tokenizer.json"))
	require.NoError(t, err)
	defer tk.Close()
	f, err := os.Open(filepath.Join("testdata", "prompt_format1.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	require.True(t, sc.Scan(), "header line")
	var head struct {
		Template inference.Template `json:"template"`
	}
	require.NoError(t, json.Unmarshal(sc.Bytes(), &head))
	head.Template.Format = inference.PromptFormatV1
	pb, err := inference.NewPromptBuilder(tk, head.Template)
	require.NoError(t, err)
	n := 0
	for sc.Scan() {
		n++
		var g struct {
			Query            string                `json:"query"`
			Candidates       []inference.Candidate `json:"candidates"`
			MaxPromptTokens  int                   `json:"max_prompt_tokens"`
			MaxSummaryTokens int                   `json:"max_summary_tokens"`
			PromptIDs        []int64               `json:"prompt_ids"`
			Included         int                   `json:"included"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &g))
		p, err := pb.Build(g.Query, g.Candidates, inference.PromptOptions{MaxTokens: g.MaxPromptTokens, MaxSummaryTokens: g.MaxSummaryTokens})
		require.NoError(t, err, "case %d", n)
		require.Equal(t, g.PromptIDs, p.IDs, "case %d: prompt ids", n)
		require.Equal(t, g.Included, p.InContext, "case %d: candidates in context", n)
	}
	require.NoError(t, sc.Err())
	require.Equal(t, 21, n, "golden cases")
}
