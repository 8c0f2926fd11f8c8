//go:build ort && tokenizers

package inference_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/inference/loader"
	"github.com/icicle-search/sidecar/inference/ort"
)

// TestContextFullSharedWithPython runs testdata/context_full.jsonl, which training/tests/test_decode.py
// runs through the Python reference (prompt_for_decoding) too, on the committed model: a prompt whose
// header and query alone exceed the budget is ErrContextFull, before any Run; one that fits has the
// length and candidates the case states.
func TestContextFullSharedWithPython(t *testing.T) {
	initORT(t)
	lm, err := loader.Open(modelDir(), loader.Options{Runtime: ort.Options{Threads: 2}})
	require.NoError(t, err)
	defer lm.Close()

	f, err := os.Open(filepath.Join("testdata", "context_full.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		var c struct {
			Name            string                `json:"name"`
			Query           string                `json:"query"`
			Candidates      []inference.Candidate `json:"candidates"`
			MaxPromptTokens int                   `json:"max_prompt_tokens"`
			ContextFull     bool                  `json:"context_full"`
			PromptTokens    int                   `json:"prompt_tokens"`
			Included        int                   `json:"included"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &c))
		n++
		res, err := lm.Engine.Rank(t.Context(), c.Query, c.Candidates, inference.Options{MaxPromptTokens: c.MaxPromptTokens})
		if c.ContextFull {
			require.ErrorIs(t, err, inference.ErrContextFull, c.Name)
			continue
		}
		require.NoError(t, err, c.Name)
		require.LessOrEqual(t, res.PromptTokens, c.MaxPromptTokens, c.Name)
		require.Equal(t, c.Included, res.InContext, c.Name)
		if c.PromptTokens > 0 {
			require.Equal(t, c.PromptTokens, res.PromptTokens, c.Name)
		}
	}
	require.NoError(t, sc.Err())
	require.Positive(t, n)
}
