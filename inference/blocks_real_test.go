//go:build ort && tokenizers

package inference_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/inference/loader"
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/internal/testenv"
	"github.com/icicle-search/sidecar/plugin"
	"github.com/icicle-search/sidecar/rank"
)

// blockTolerance bounds |block path - reference| on a logit: the same fp32 graph, the stored keys rotated in
// Go (float32, angles in float64) where the reference rotates inside the graph (measured: 4e-5).
const blockTolerance = 1e-3

func maxAbsDiff(a, b []float32) float64 {
	m := 0.0
	for i := range a {
		m = max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}

// blockModelDir is the shipped default (model.onnx built by scripts/model.sh) under a candidate template
// without {i}, so that a candidate's block is the same wherever it is listed, and max_prompt_tokens at
// max_context_tokens: a directory of links to models/reader135's files and a rewritten manifest (what
// scripts/block-model.sh writes).
func blockModelDir(t testing.TB) string {
	t.Helper()
	src, err := filepath.Abs(filepath.Join("..", "models", "reader135"))
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(src, "model.onnx")); err != nil {
		testenv.Missing(t, "%s has no model.onnx yet: run scripts/model.sh %s (scripts/test.sh does)", src, src)
	}
	return testenv.BlockModel(t, src)
}

// openReader135 opens the shipped default's weights under blockModelDir's template with block reading in
// layout on store when store is set.
func openReader135(t *testing.T, store *inference.BlockStore, layout string) *loader.Model {
	t.Helper()
	m, err := loader.Open(blockModelDir(t), loader.Options{Blocks: store, BlockLayout: layout})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// TestBlockReading, per layout: the block path (blocks computed once, stored, placed by rotating their keys
// in Go, then the query) gives the logits of one Run of the whole prompt under the layout's mask and
// positions; a second request over the same candidates in reverse order computes no block and still matches
// (contiguous: a different answer, the order is seen; shared: the same, it is not); Rank's warm answer is its
// cold one. With one candidate, shared block reading is causal reading.
func TestBlockReading(t *testing.T) {
	initORT(t)
	cases := readGoldenDecode(t, filepath.Join("..", "models", "reader135"))
	c := cases[3]
	require.Len(t, c.Candidates, 10)
	cands := c.Candidates
	rev := slices.Clone(cands)
	slices.Reverse(rev)
	for _, layout := range []string{inference.BlockContiguous, inference.BlockShared} {
		t.Run(layout, func(t *testing.T) {
			store := inference.NewBlockStore(0, false)
			m := openReader135(t, store, layout)
			got, ref, err := m.Engine.PrefillLogits(t.Context(), c.Query, cands, c.options())
			require.NoError(t, err)
			require.Less(t, maxAbsDiff(got, ref), blockTolerance, "cold store")
			st := store.Stats()
			require.Equal(t, int64(0), st.Hits)
			require.Equal(t, 1+len(cands), st.Blocks, "the header and every candidate's block are stored")

			got2, ref2, err := m.Engine.PrefillLogits(t.Context(), c.Query, rev, c.options())
			require.NoError(t, err)
			require.Equal(t, int64(1+len(cands)), store.Stats().Hits, "every block of the reversed list is a hit")
			require.Less(t, maxAbsDiff(got2, ref2), blockTolerance, "stored blocks placed anew")
			if layout == inference.BlockShared {
				require.Less(t, maxAbsDiff(got, got2), blockTolerance, "shared positions: the order is not seen")
			} else {
				require.Greater(t, maxAbsDiff(got, got2), 1e-2, "contiguous positions: the order is seen")
			}

			cold, err := openReader135(t, inference.NewBlockStore(0, false), layout).Engine.Rank(t.Context(), c.Query, cands, c.options())
			require.NoError(t, err)
			require.Equal(t, 1+len(cands), cold.Stats.BlockMisses)
			warm, err := m.Engine.Rank(t.Context(), c.Query, cands, c.options())
			require.NoError(t, err)
			require.Equal(t, 0, warm.Stats.BlockMisses)
			require.Equal(t, 1+len(cands), warm.Stats.BlockHits)
			require.Equal(t, len(cold.Beams), len(warm.Beams))
			for i := range cold.Beams {
				require.Equal(t, cold.Beams[i].DocID, warm.Beams[i].DocID)
				require.InDelta(t, cold.Beams[i].Score, warm.Beams[i].Score, 1e-5)
			}
		})
	}
	// Shared with one candidate is causal reading: the block sees the header and itself, the query everything,
	// at their own positions.
	one := cands[:1]
	b1, _, err := openReader135(t, inference.NewBlockStore(0, false), inference.BlockShared).Engine.PrefillLogits(t.Context(), c.Query, one, c.options())
	require.NoError(t, err)
	c1, _, err := openReader135(t, nil, "").Engine.PrefillLogits(t.Context(), c.Query, one, c.options())
	require.NoError(t, err)
	require.Less(t, maxAbsDiff(b1, c1), blockTolerance, "one candidate, shared: block reading is causal reading")
}

// TestBlockReadingInt8, per layout: blocks stored as int8 (a scale per position and head) give logits near the
// float32 ones (within int8Tolerance; measured 0.09 on both layouts) and the same answer, in
// under 30% of the bytes; a warm request reads the stored int8 blocks exactly as the cold one did.
func TestBlockReadingInt8(t *testing.T) {
	initORT(t)
	const int8Tolerance = 0.3
	c := readGoldenDecode(t, filepath.Join("..", "models", "reader135"))[3]
	for _, layout := range []string{inference.BlockContiguous, inference.BlockShared} {
		t.Run(layout, func(t *testing.T) {
			f32, i8 := inference.NewBlockStore(0, false), inference.NewBlockStore(0, true)
			mf, mq := openReader135(t, f32, layout), openReader135(t, i8, layout)
			got, ref, err := mq.Engine.PrefillLogits(t.Context(), c.Query, c.Candidates, c.options())
			require.NoError(t, err)
			d := maxAbsDiff(got, ref)
			t.Logf("%s: int8 blocks, max |logit - one Run's| = %.4f", layout, d)
			require.Less(t, d, int8Tolerance)
			require.Greater(t, d, blockTolerance, "int8 is not float32: the test would not see a float32 store")
			require.Equal(t, argmax(ref), argmax(got))

			want, err := mf.Engine.Rank(t.Context(), c.Query, c.Candidates, c.options())
			require.NoError(t, err)
			cold, err := mq.Engine.Rank(t.Context(), c.Query, c.Candidates, c.options())
			require.NoError(t, err)
			warm, err := mq.Engine.Rank(t.Context(), c.Query, c.Candidates, c.options())
			require.NoError(t, err)
			require.Equal(t, want.Beams[0].DocID, cold.Beams[0].DocID)
			require.Equal(t, cold.Beams, warm.Beams)
			sf, sq := f32.Stats(), i8.Stats()
			require.Equal(t, sf.Blocks, sq.Blocks)
			require.Equal(t, inference.BlockInt8, sq.Precision)
			require.Less(t, float64(sq.Bytes), 0.3*float64(sf.Bytes), "int8 bytes against float32's")
		})
	}
}

func argmax(z []float32) int {
	best := 0
	for i, v := range z {
		if v > z[best] {
			best = i
		}
	}
	return best
}

// TestFillBlocks: a fill ahead of requests (the sidecar's background fill from the index) stores exactly the
// blocks a request reads: a Rank over filled candidates computes no block and answers as a cold engine does; a
// second fill computes nothing; a prompt too small for every candidate holds the first ones and says how many;
// with every session serving, the fill gives way at once (ErrBusy) and computes nothing.
func TestFillBlocks(t *testing.T) {
	initORT(t)
	c := readGoldenDecode(t, filepath.Join("..", "models", "reader135"))[3]
	for _, layout := range []string{inference.BlockContiguous, inference.BlockShared} {
		t.Run(layout, func(t *testing.T) {
			store := inference.NewBlockStore(0, true)
			m := openReader135(t, store, layout)
			opts := c.options()
			computed, held, err := m.Engine.FillBlocks(t.Context(), c.Candidates[:4], opts)
			require.NoError(t, err)
			require.Equal(t, 4, computed)
			require.Equal(t, 4, held)
			computed, held, err = m.Engine.FillBlocks(t.Context(), c.Candidates, opts)
			require.NoError(t, err)
			require.Equal(t, len(c.Candidates)-4, computed, "the first 4 are stored")
			require.Equal(t, len(c.Candidates), held)
			computed, _, err = m.Engine.FillBlocks(t.Context(), c.Candidates, opts)
			require.NoError(t, err)
			require.Zero(t, computed)
			require.Equal(t, 1+len(c.Candidates), store.Stats().Blocks)

			warm, err := m.Engine.Rank(t.Context(), c.Query, c.Candidates, opts)
			require.NoError(t, err)
			require.Zero(t, warm.Stats.BlockMisses, "every block was filled")
			cold, err := openReader135(t, inference.NewBlockStore(0, true), layout).Engine.Rank(t.Context(), c.Query, c.Candidates, opts)
			require.NoError(t, err)
			require.Equal(t, len(cold.Beams), len(warm.Beams))
			for i := range cold.Beams {
				// Blocks computed in other groups than a cold request's are the same up to float rounding,
				// which an int8 step can turn into one step of difference.
				require.Equal(t, cold.Beams[i].DocID, warm.Beams[i].DocID)
				require.InDelta(t, cold.Beams[i].Score, warm.Beams[i].Score, 0.02)
			}

			small := opts
			small.MaxPromptTokens = 120
			_, held, err = openReader135(t, inference.NewBlockStore(0, true), layout).Engine.FillBlocks(t.Context(), c.Candidates, small)
			require.NoError(t, err)
			require.Greater(t, held, 0)
			require.Less(t, held, len(c.Candidates))

			release := m.Engine.HoldSessions()
			before := store.Stats()
			_, _, err = m.Engine.FillBlocks(t.Context(), c.Candidates, opts)
			release()
			require.ErrorIs(t, err, inference.ErrBusy)
			require.Equal(t, before.Misses, store.Stats().Misses, "a busy fill looks nothing up")
		})
	}
}

// TestBlockSwapServesWhileStoreFills: a hot swap (plugin.Swapper) to a model reading by blocks whose store is
// empty, under concurrent requests: every request before, across and after the swap answers without error; the
// new model's store fills from the requests (misses, then hits on the blocks that repeat) and its answers are
// those of a cold engine (the store's state never changes an answer).
func TestBlockSwapServesWhileStoreFills(t *testing.T) {
	initORT(t)
	dir := blockModelDir(t)
	cases := readGoldenDecode(t, filepath.Join("..", "models", "reader135"))
	var work []decodeCase
	for _, c := range cases {
		if len(c.Candidates) >= 3 && c.MaxPromptTokens >= 512 {
			work = append(work, c.decodeCase)
		}
	}
	require.GreaterOrEqual(t, len(work), 6)
	work = work[:6]
	open := func(store *inference.BlockStore, layout string) *loader.Model {
		m, err := loader.Open(dir, loader.Options{Sessions: 2, Blocks: store, BlockLayout: layout})
		require.NoError(t, err)
		return m
	}
	byQuery := map[string]decodeCase{}
	for _, c := range work {
		byQuery[c.Query] = c
	}
	first := open(inference.NewBlockStore(0, false), inference.BlockContiguous)
	next := inference.NewBlockStore(0, false)
	var swapped *loader.Model
	sw := plugin.NewSwapper(plugin.LoadedModel{Reader: caseReader{first.Engine, byQuery}, Close: first.Close},
		func(string) (plugin.LoadedModel, error) {
			swapped = open(next, inference.BlockShared)
			return plugin.LoadedModel{Reader: caseReader{swapped.Engine, byQuery}, Close: swapped.Close}, nil
		}, nil)
	t.Cleanup(func() { _ = sw.Close() })

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	swappedIn := make(chan struct{})
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				if i == 3 && g == 0 {
					<-swappedIn
				}
				c := work[(g+i)%len(work)]
				if _, err := sw.Read(t.Context(), rank.Query{Text: c.Query}); err != nil {
					errs <- fmt.Errorf("worker %d request %d: %w", g, i, err)
				}
			}
		}()
	}
	_, err := sw.Swap(dir)
	require.NoError(t, err)
	close(swappedIn)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	st := next.Stats()
	require.Positive(t, st.Misses, "the new model computed its blocks")
	require.Positive(t, st.Hits, "and reused those that repeat")
	c := work[0]
	warm, err := swapped.Engine.Rank(t.Context(), c.Query, c.Candidates, c.options())
	require.NoError(t, err)
	require.Zero(t, warm.Stats.BlockMisses)
	cold := open(inference.NewBlockStore(0, false), inference.BlockShared)
	t.Cleanup(func() { _ = cold.Close() })
	want, err := cold.Engine.Rank(t.Context(), c.Query, c.Candidates, c.options())
	require.NoError(t, err)
	require.Equal(t, len(want.Beams), len(warm.Beams))
	for i := range want.Beams {
		require.Equal(t, want.Beams[i].DocID, warm.Beams[i].DocID)
		require.InDelta(t, want.Beams[i].Score, warm.Beams[i].Score, 1e-4)
	}
}

// BenchmarkBlockRank: one query in the engine with its blocks stored (the steady state after the documents'
// first requests), against causal reading of the same candidates, at 10 and 100 candidates and beam 1 and 10;
// it reports the split prefill (causal: the prompt; blocks: placing the stored blocks and the query) and decode
// (the copy and parametric routes), Runs and tokens fed per query.
//
// ICICLE_BENCH_BLOCK_MODEL names another model directory with a block template (a block-trained reader such
// as scripts/block-model.sh writes) to measure instead of reader135's weights; ICICLE_BENCH_QUANTIZED=1 loads
// its int8 file (onnx_quantized, `python -m icicle.export int8`).
//
//	eval "$(scripts/env.sh)"; go test -tags "ort tokenizers" -run '^$' -bench BlockRank -count 3 ./inference
func BenchmarkBlockRank(b *testing.B) {
	benchORT(b)
	cands := benchCandidates(b, 100)
	dir := os.Getenv("ICICLE_BENCH_BLOCK_MODEL")
	if dir == "" {
		dir = blockModelDir(b)
	}
	for _, layout := range []string{"causal", inference.BlockContiguous, inference.BlockShared, "shared-int8"} {
		for _, n := range []int{10, 100} {
			for _, w := range []int{1, 10} {
				b.Run(fmt.Sprintf("%s/cands=%d/beam=%d", layout, n, w), func(b *testing.B) {
					var store *inference.BlockStore
					reading := strings.TrimSuffix(layout, "-int8") // not layout: the next sub-benchmarks' name
					if layout != "causal" {
						store = inference.NewBlockStore(0, strings.HasSuffix(layout, "-int8"))
					}
					lm, err := loader.Open(dir, loader.Options{Blocks: store, BlockLayout: reading, Quantized: os.Getenv("ICICLE_BENCH_QUANTIZED") == "1",
						Runtime: ort.Options{Threads: 2, InterOpThreads: 1}})
					if err != nil {
						b.Fatal(err)
					}
					defer lm.Close()
					opts := inference.Options{BeamWidth: w}
					if _, err := lm.Engine.Rank(b.Context(), benchQuery, cands[:n], opts); err != nil { // fills the store
						b.Fatal(err)
					}
					var pre, dec time.Duration
					var res inference.Result
					for b.Loop() {
						if res, err = lm.Engine.Rank(b.Context(), benchQuery, cands[:n], opts); err != nil {
							b.Fatal(err)
						}
						pre, dec = pre+res.Stats.Prefill, dec+res.Stats.Decode
					}
					b.ReportMetric(float64(pre.Milliseconds())/float64(b.N), "prefill-ms/op")
					b.ReportMetric(float64(dec.Milliseconds())/float64(b.N), "decode-ms/op")
					b.ReportMetric(float64(res.Stats.ForwardRuns), "runs/op")
					b.ReportMetric(float64(res.Stats.TokensFed), "fed/op")
					b.ReportMetric(float64(res.PromptTokens), "prompt/op")
				})
			}
		}
	}
}

// tinyBlockModel is models/tiny (which ships model.onnx and its int8 file) under a block template, with the
// rope_theta its config trained with (10000, training/icicle/model.py; the shared layout rotates nothing).
func tinyBlockModel(t *testing.T) string {
	t.Helper()
	src, err := filepath.Abs(filepath.Join("..", "models", "tiny"))
	require.NoError(t, err)
	dir := testenv.BlockModel(t, src)
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	require.NoError(t, err)
	var man map[string]any
	require.NoError(t, json.Unmarshal(raw, &man))
	require.Equal(t, "model.int8.onnx", man["onnx_quantized"], "models/tiny ships an int8 file")
	man["rope_theta"] = 10000.0
	raw, err = json.Marshal(man)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "manifest.json"), raw, 0o644))
	return dir
}

// TestBlocksExactUnderInt8Sessions: with int8 sessions (loader.Options.Quantized) the header's and the
// candidates' blocks are computed by the fp32 graph. Dynamic int8 quantises each Run's activations with one
// scale, so a block computed by it would depend on the blocks computed beside it (a fill's group, a request's
// misses) and would not be the block a float32 reader expects. The int8 engine's stored blocks, placed by an
// fp32 engine, give the logits of one fp32 Run of the whole prompt; a store filled one candidate at a time
// and one filled by a request in one Run give the int8 engine the same answer.
func TestBlocksExactUnderInt8Sessions(t *testing.T) {
	initORT(t)
	dir := tinyBlockModel(t)
	c := readGoldenDecode(t, filepath.Join("..", "models", "tiny"))[3]
	cands, opts := c.Candidates, c.options()
	open := func(quantized bool, store *inference.BlockStore) *loader.Model {
		m, err := loader.Open(dir, loader.Options{Quantized: quantized, Blocks: store, BlockLayout: inference.BlockShared})
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	store := inference.NewBlockStore(0, false)
	byRequest, err := open(true, store).Engine.Rank(t.Context(), c.Query, cands, opts)
	require.NoError(t, err)
	require.Equal(t, 1+len(cands), byRequest.Stats.BlockMisses)

	got, ref, err := open(false, store).Engine.PrefillLogits(t.Context(), c.Query, cands, opts)
	require.NoError(t, err)
	require.Equal(t, int64(1+len(cands)), store.Stats().Hits, "the fp32 engine reads the int8 engine's blocks")
	require.Less(t, maxAbsDiff(got, ref), blockTolerance, "the int8 engine's blocks are the fp32 graph's")

	q := open(true, inference.NewBlockStore(0, false))
	for _, one := range cands {
		_, _, err := q.Engine.FillBlocks(t.Context(), []inference.Candidate{one}, opts)
		require.NoError(t, err)
	}
	byOne, err := q.Engine.Rank(t.Context(), c.Query, cands, opts)
	require.NoError(t, err)
	require.Equal(t, 0, byOne.Stats.BlockMisses)
	require.Equal(t, len(byRequest.Beams), len(byOne.Beams))
	for i := range byRequest.Beams {
		require.Equal(t, byRequest.Beams[i].DocID, byOne.Beams[i].DocID)
		require.InDelta(t, byRequest.Beams[i].Score, byOne.Beams[i].Score, 1e-5)
	}
}

// caseReader reads with an engine the decode case its query names (the case's own candidates and options), as
// the sidecar's reader reads a request.
type caseReader struct {
	engine *inference.Engine
	cases  map[string]decodeCase
}

func (r caseReader) Read(ctx context.Context, q rank.Query) (rank.Reading, error) {
	c := r.cases[q.Text]
	res, err := r.engine.Rank(ctx, c.Query, c.Candidates, c.options())
	if err != nil {
		return rank.Reading{}, err
	}
	return rank.Reading{InContext: res.InContext, PromptTokens: res.PromptTokens}, nil
}
