//go:build ort && tokenizers

package inference_test

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/inference/loader"
)

// querySideTolerance bounds |Go - Python| on a golden logit: ONNX Runtime's fp32 graph against PyTorch's, the
// stored keys rotated in Go (icicle.graft checks a rebuilt graph at the same bound).
const querySideTolerance = 5e-3

// querySideCase is a line of golden/blocks.jsonl (`python -m icicle.queryside export`): a prompt read with the
// block model's blocks and the trained query side, and its top logits after the last token.
type querySideCase struct {
	Query      string `json:"query"`
	Candidates []struct {
		Title   string `json:"title"`
		Summary string `json:"summary"`
	} `json:"candidates"`
	InputIDs []int64      `json:"input_ids"`
	Segments []int        `json:"segments"`
	Top      [][2]float64 `json:"last_logits_top"`
}

func (c querySideCase) cands() []inference.Candidate {
	out := make([]inference.Candidate, len(c.Candidates))
	for i, x := range c.Candidates {
		out[i] = inference.Candidate{Title: x.Title, Summary: x.Summary}
	}
	return out
}

// querySideDir is the shipped query-side reader (its model.onnx and its block model's built by
// scripts/model.sh), and its golden cases.
func querySideDir(t *testing.T) (string, []querySideCase) {
	t.Helper()
	dir := filepath.Join("..", "models", "q1")
	for _, d := range []string{dir, filepath.Join("..", "models", "b7")} {
		if _, err := os.Stat(filepath.Join(d, "model.onnx")); err != nil {
			t.Fatalf("%s has no model.onnx yet: run scripts/model.sh %s (scripts/test.sh does)", d, d)
		}
	}
	f, err := os.Open(filepath.Join(dir, "golden", "blocks.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	var out []querySideCase
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var c querySideCase
		require.NoError(t, json.Unmarshal(sc.Bytes(), &c))
		out = append(out, c)
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, out)
	return dir, out
}

func requireGoldenTop(t *testing.T, got []float32, c querySideCase, what string) {
	t.Helper()
	worst := 0.0
	for _, p := range c.Top {
		worst = max(worst, math.Abs(float64(got[int(p[0])])-p[1]))
	}
	require.Less(t, worst, querySideTolerance, "%s: %q: largest difference from the golden top logits", what, c.Query)
}

// TestQuerySideReaderParity: the query-side reader served by blocks (its block model's graph computes the
// header and the blocks, its own graph the query) builds Python's prompt ids and gives Python's logits after
// them; read by the block model alone the same prompt gives other logits (the trained query side is in use).
func TestQuerySideReaderParity(t *testing.T) {
	initORT(t)
	dir, cases := querySideDir(t)
	m, err := loader.Open(dir, loader.Options{Blocks: inference.NewBlockStore(0, false), BlockLayout: inference.BlockShared})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	require.Equal(t, filepath.Join("..", "b7", "model.onnx"), m.BlockFile)
	frozen, err := loader.Open(filepath.Join("..", "models", "b7"), loader.Options{Blocks: inference.NewBlockStore(0, false), BlockLayout: inference.BlockShared})
	require.NoError(t, err)
	t.Cleanup(func() { _ = frozen.Close() })
	for _, c := range cases {
		ids, segs, err := m.Engine.PromptIDs(c.Query, c.cands(), inference.Options{})
		require.NoError(t, err)
		require.Equal(t, c.InputIDs, ids, "the prompt of %q", c.Query)
		require.Equal(t, c.Segments, segs)
		got, _, err := m.Engine.PrefillLogits(t.Context(), c.Query, c.cands(), inference.Options{})
		require.NoError(t, err)
		requireGoldenTop(t, got, c, "query side over frozen blocks")
		b7, _, err := frozen.Engine.PrefillLogits(t.Context(), c.Query, c.cands(), inference.Options{})
		require.NoError(t, err)
		require.Greater(t, maxAbsDiff(got, b7), 0.1, "the block model's own reading of %q", c.Query)
	}
}

// TestQuerySideSwapKeepsBlockStore: the block store file of the query-side reader is its block model's, so a
// store filled while the block model served (or an earlier query side) is read back whole after the swap and
// the query side computes no block; during a hot swap, when both are open in one process, they share the
// one open store. The logits read over the stored blocks are the golden ones.
func TestQuerySideSwapKeepsBlockStore(t *testing.T) {
	initORT(t)
	dir, cases := querySideDir(t)
	c := cases[len(cases)-1]
	cands := c.cands()
	b7Dir := filepath.Join("..", "models", "b7")
	blockDir := t.TempDir()
	path, spec, err := loader.BlockFile(blockDir, b7Dir, inference.BlockShared, "fp32")
	require.NoError(t, err)
	qPath, qSpec, err := loader.BlockFile(blockDir, dir, inference.BlockShared, "fp32")
	require.NoError(t, err)
	require.Equal(t, path, qPath, "one store file for the block model and every query side over it")
	require.Equal(t, spec, qSpec)

	store, err := inference.OpenBlockStore(path, 0, false, spec)
	require.NoError(t, err)
	b7, err := loader.Open(b7Dir, loader.Options{Blocks: store, BlockLayout: inference.BlockShared})
	require.NoError(t, err)
	computed, held, err := b7.Engine.FillBlocks(t.Context(), cands, inference.Options{})
	require.NoError(t, err)
	require.Equal(t, len(cands), computed)
	require.Equal(t, len(cands), held)

	// The hot swap: the new reader opens its store while the old one still serves.
	swapped, err := inference.OpenBlockStore(qPath, 0, false, qSpec)
	require.NoError(t, err)
	require.Same(t, store, swapped, "one open store, shared")
	require.NoError(t, b7.Close())
	require.NoError(t, store.Close())
	require.NoError(t, swapped.Close())

	// A restart: the file is read back.
	again, err := inference.OpenBlockStore(qPath, 0, false, qSpec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = again.Close() })
	require.Equal(t, 1+len(cands), again.Stats().Loaded, "the header and every block")
	q, err := loader.Open(dir, loader.Options{Blocks: again, BlockLayout: inference.BlockShared})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	res, err := q.Engine.Rank(t.Context(), c.Query, cands, inference.Options{})
	require.NoError(t, err)
	require.Equal(t, 0, res.Stats.BlockMisses, "no block computed again")
	require.Equal(t, 1+len(cands), res.Stats.BlockHits)
	got, _, err := q.Engine.PrefillLogits(t.Context(), c.Query, cands, inference.Options{})
	require.NoError(t, err)
	requireGoldenTop(t, got, c, "over the blocks the block model stored")
}

// TestQuerySideReadsOnlyByBlocks: without shared block reading the query-side reader is refused at load,
// naming the setting, before any session is made.
func TestQuerySideReadsOnlyByBlocks(t *testing.T) {
	initORT(t)
	dir, _ := querySideDir(t)
	for _, o := range []loader.Options{{}, {Blocks: inference.NewBlockStore(0, false), BlockLayout: inference.BlockContiguous}} {
		_, err := loader.Open(dir, o)
		require.ErrorContains(t, err, "reads only by them: serve it with experimental.block_reading: shared")
	}
}
