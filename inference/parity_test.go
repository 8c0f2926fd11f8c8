//go:build ort && tokenizers

package inference_test

import (
	"bufio"
	"cmp"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/inference/loader"
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/inference/tok"
	"github.com/icicle-search/sidecar/internal/testenv"
)

// scoreTolerance is the largest |Go - Python| difference accepted for a beam's score: both sides run
// the same fp32 ONNX graph (Python through PyTorch), and sums of up to ~30 log-softmax terms differ by
// accumulated float32 rounding well below this.
const scoreTolerance = 1e-3

// int8Slack is how much further than train_report.json's int8_top1_score_max_abs (Python's int8 run
// against the fp32 golden beams) the Go engine's int8 top-1 score may land. Dynamically quantised
// MatMuls run different integer kernels by CPU (AVX2, AVX-512, VNNI) and ONNX Runtime version, so the
// int8 graph is not bit-reproducible across machines; measured here (ORT 1.30, this CPU) on
// models/small: 0.113 against the report's 0.106.
const int8Slack = 0.05

// decodeCase is one ranking problem as training/ writes it (golden decode vectors, benchmark cases).
// inference.Candidate's fields decode from "title" and "summary".
type decodeCase struct {
	Query            string                `json:"query"`
	Candidates       []inference.Candidate `json:"candidates"`
	BeamWidth        int                   `json:"beam_width"`
	MaxPromptTokens  int                   `json:"max_prompt_tokens"`
	MaxSummaryTokens int                   `json:"max_summary_tokens"`
}

func (c decodeCase) options() inference.Options {
	return inference.Options{BeamWidth: c.BeamWidth, MaxPromptTokens: c.MaxPromptTokens, MaxSummaryTokens: c.MaxSummaryTokens}
}

// goldenDecode is a decodeCase with the Python reference decoder's answer.
type goldenDecode struct {
	decodeCase
	PromptIDs     []int64      `json:"prompt_ids"`
	Included      int          `json:"included"`
	SummaryTokens []int        `json:"summary_tokens"`
	PCopy         float64      `json:"p_copy"`
	Beams         []goldenBeam `json:"beams"`
}

type goldenBeam struct {
	DocID string  `json:"docid"`
	Route string  `json:"route"`
	Score float64 `json:"score"`
}

func modelDir() string {
	return cmp.Or(os.Getenv("ICICLE_MODEL_DIR"), filepath.Join("..", "models", "tiny"))
}

// goldenModel is a model directory with golden vectors, and how its shipped ONNX file relates to them.
type goldenModel struct {
	dir string
	// exact: the golden vectors were written with the file the manifest loads (the fp32 graph), so
	// every beam must match within scoreTolerance. Otherwise the directory ships only the int8 file
	// while training/ wrote the vectors with the fp32 graph (golden.py), and its train_report.json
	// states how far the int8 file's decode departs: the Go engine must reproduce that, no worse.
	exact bool
	// int8Top1Agreement and int8Top1ScoreMaxAbs are train_report.json's golden.int8_* figures.
	int8Top1Agreement, int8Top1ScoreMaxAbs float64
}

// goldenModels lists every committed model directory with golden vectors (models/*/golden), the
// shipped default models/reader135 (model.onnx built by scripts/model.sh first) and models/small included, or
// only $ICICLE_MODEL_DIR when set.
func goldenModels(t *testing.T) []goldenModel {
	t.Helper()
	var dirs []string
	if d := os.Getenv("ICICLE_MODEL_DIR"); d != "" {
		dirs = []string{d}
	} else {
		found, err := filepath.Glob(filepath.Join("..", "models", "*", "golden", "decode.jsonl"))
		require.NoError(t, err)
		for _, f := range found {
			dirs = append(dirs, filepath.Dir(filepath.Dir(f)))
		}
		for _, want := range []string{"small", "reader135"} {
			if !slices.Contains(dirs, filepath.Join("..", "models", want)) {
				testenv.Missing(t, "no golden vectors in models/%s (training/ writes them with the model); found %v", want, dirs)
			}
		}
	}
	var out []goldenModel
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "golden", "decode.jsonl")); err != nil {
			testenv.Missing(t, "no golden vectors in %s (make model-tiny writes them): %v", dir, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "delta.safetensors")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "model.onnx")); err != nil {
				testenv.Missing(t, "%s ships as a delta and has no model.onnx yet: run scripts/model.sh %s (scripts/test.sh does)", dir, dir)
			}
		}
		man, err := inference.LoadManifest(dir)
		require.NoError(t, err, dir)
		g := goldenModel{dir: dir, exact: !strings.Contains(man.ONNX, "int8")}
		if !g.exact {
			raw, err := os.ReadFile(filepath.Join(dir, "train_report.json"))
			require.NoError(t, err, "%s ships only %s: its train_report.json must state the int8 decode agreement", dir, man.ONNX)
			var rep struct {
				Golden struct {
					Agreement *float64 `json:"int8_decode_top1_agreement"`
					ScoreMax  *float64 `json:"int8_top1_score_max_abs"`
				} `json:"golden"`
			}
			require.NoError(t, json.Unmarshal(raw, &rep), dir)
			require.NotNil(t, rep.Golden.Agreement, "%s: train_report.json golden.int8_decode_top1_agreement", dir)
			require.NotNil(t, rep.Golden.ScoreMax, "%s: train_report.json golden.int8_top1_score_max_abs", dir)
			g.int8Top1Agreement, g.int8Top1ScoreMaxAbs = *rep.Golden.Agreement, *rep.Golden.ScoreMax
		}
		out = append(out, g)
	}
	return out
}

func readGoldenDecode(t *testing.T, dir string) []goldenDecode {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "golden", "decode.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	var out []goldenDecode
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var g goldenDecode
		require.NoError(t, json.Unmarshal(sc.Bytes(), &g))
		out = append(out, g)
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, out, dir)
	return out
}

// initORT starts the ONNX Runtime environment for t (failing under ICICLE_REQUIRE_REAL, else skipping,
// without ICICLE_ORT_LIB) and shuts it down after.
func initORT(t testing.TB) {
	t.Helper()
	lib := os.Getenv("ICICLE_ORT_LIB")
	if lib == "" {
		testenv.Missing(t, "ICICLE_ORT_LIB not set (eval \"$(scripts/env.sh)\")")
	}
	require.NoError(t, ort.Init(lib))
	t.Cleanup(func() { _ = ort.Shutdown() })
}

// TestDecodeParityWithPython runs the Go engine on the Python reference decoder's golden cases
// (training/icicle/decode.py via golden.py) of every committed model directory and requires identical
// prompts, identical top-1 and every beam's docid, route and score within scoreTolerance; for a
// directory that ships only its int8 file, identical prompts and the int8 agreement its report states.
func TestDecodeParityWithPython(t *testing.T) {
	models := goldenModels(t)
	initORT(t)
	for _, gm := range models {
		t.Run(filepath.Base(gm.dir), func(t *testing.T) { decodeParity(t, gm) })
	}
}

func decodeParity(t *testing.T, gm goldenModel) {
	dir := gm.dir
	lm, err := loader.Open(dir, loader.Options{Runtime: ort.Options{Threads: 2}})
	require.NoError(t, err)
	defer lm.Close()
	e, man := lm.Engine, lm.Manifest
	tk, err := tok.Load(man.Path(man.Tokenizer))
	require.NoError(t, err)
	defer tk.Close()
	pb, err := inference.NewPromptBuilder(tk, man.Template)
	require.NoError(t, err)

	golden := readGoldenDecode(t, dir)
	maxDiff, agree, nearTies := 0.0, 0, 0
	for i, g := range golden {
		line := i + 1
		cands := g.Candidates
		p, err := pb.Build(g.Query, cands, inference.PromptOptions{MaxTokens: g.MaxPromptTokens, MaxSummaryTokens: g.MaxSummaryTokens})
		require.NoError(t, err, "line %d", line)
		require.Equal(t, g.PromptIDs, p.IDs, "line %d: prompt ids", line)
		require.Equal(t, g.Included, p.InContext, "line %d: candidates in context", line)

		res, err := e.Rank(t.Context(), g.Query, cands, g.options())
		require.NoError(t, err, "line %d", line)
		require.Len(t, res.Beams, len(g.Beams), "line %d", line)
		if !gm.exact {
			if res.Beams[0].DocID == g.Beams[0].DocID {
				agree++
				maxDiff = max(maxDiff, math.Abs(g.Beams[0].Score-res.Beams[0].Score))
			} else if i := slices.IndexFunc(g.Beams, func(b goldenBeam) bool { return b.DocID == res.Beams[0].DocID }); i >= 0 &&
				g.Beams[0].Score-g.Beams[i].Score <= gm.int8Top1ScoreMaxAbs+int8Slack {
				// A near-tie at int8 precision: Go's int8 pick is the fp32 reference's beam i, whose fp32 score is
				// within the int8 error bound of the top. Go's and Python's ONNX Runtime builds quantise
				// activations with different kernels, so such a case may flip in one and not the other.
				nearTies++
				t.Logf("line %d: int8 top-1 %s is fp32 beam %d, %.3f below %s (a near-tie at int8 precision)", line, res.Beams[0].DocID, i, g.Beams[0].Score-g.Beams[i].Score, g.Beams[0].DocID)
			}
			continue
		}
		require.InDelta(t, g.PCopy, res.PCopy, scoreTolerance, "line %d: p_copy", line)
		require.Equal(t, g.Beams[0].DocID, res.Beams[0].DocID, "line %d: top-1", line)
		for i, b := range g.Beams {
			got := res.Beams[i]
			require.InDelta(t, b.Score, got.Score, scoreTolerance, "line %d beam %d (%s)", line, i, b.DocID)
			maxDiff = max(maxDiff, math.Abs(b.Score-got.Score))
			// Below the tolerance two beams may swap; compare docid and route only when scores are apart.
			if i+1 < len(g.Beams) && g.Beams[i+1].Score < b.Score-scoreTolerance && (i == 0 || g.Beams[i-1].Score > b.Score+scoreTolerance) {
				require.Equal(t, b.DocID, got.DocID, "line %d beam %d", line, i)
				require.Equal(t, b.Route, string(got.Route), "line %d beam %d", line, i)
			}
		}
	}
	if gm.exact {
		t.Logf("%s: %d golden decode cases match the Python reference; largest score difference %.2e", dir, len(golden), maxDiff)
		return
	}
	got := float64(agree) / float64(len(golden))
	require.GreaterOrEqual(t, float64(agree+nearTies)/float64(len(golden)), gm.int8Top1Agreement-1e-9,
		"%s: int8 top-1 agreement with the fp32 golden beams, Go %d/%d (+%d near-ties), train_report.json %.4f", dir, agree, len(golden), nearTies, gm.int8Top1Agreement)
	require.LessOrEqual(t, maxDiff, gm.int8Top1ScoreMaxAbs+int8Slack, "%s: int8 top-1 score difference", dir)
	t.Logf("%s (int8 file, fp32 golden): %d cases, prompts identical, top-1 agreement %.4f (report %.4f), largest top-1 score difference %.3f (report %.3f)",
		dir, len(golden), got, gm.int8Top1Agreement, maxDiff, gm.int8Top1ScoreMaxAbs)
}

// TestCopyChunkingParity ranks the golden cases twice on the committed model: with the copy route's
// token tree in one Run, and chunked into one Run per subtree of the context trie's root (CopyMaskBytes
// 1 byte). The two must agree within chunkTolerance (the same fp32 graph over the same visible tokens,
// with attention sums over differently shaped masks), and both with the Python reference.
func TestCopyChunkingParity(t *testing.T) {
	const chunkTolerance = 1e-4
	dir := modelDir()
	f, err := os.Open(filepath.Join(dir, "golden", "decode.jsonl"))
	if os.IsNotExist(err) {
		testenv.Missing(t, "no golden vectors in %s (make model-tiny writes them)", dir)
	}
	require.NoError(t, err)
	defer f.Close()
	initORT(t)
	open := func(budget int64) *loader.Model {
		lm, err := loader.Open(dir, loader.Options{CopyMaskBytes: budget, Runtime: ort.Options{Threads: 2}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = lm.Close() })
		return lm
	}
	one, chunked := open(-1).Engine, open(1).Engine

	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	cases, multi, maxDiff := 0, 0, 0.0
	for line := 1; sc.Scan(); line++ {
		var g goldenDecode
		require.NoError(t, json.Unmarshal(sc.Bytes(), &g))
		cases++
		a, err := one.Rank(t.Context(), g.Query, g.Candidates, g.options())
		require.NoError(t, err, "line %d", line)
		b, err := chunked.Rank(t.Context(), g.Query, g.Candidates, g.options())
		require.NoError(t, err, "line %d", line)
		require.LessOrEqual(t, a.Stats.CopyRuns, 1, "line %d", line)
		if b.Stats.CopyRuns > 1 {
			multi++
		}
		require.Equal(t, a.Stats.TokensFed, b.Stats.TokensFed, "line %d", line)
		require.Equal(t, a.PCopy, b.PCopy, "line %d: step 0 is the same Run", line)
		require.Len(t, b.Beams, len(a.Beams), "line %d", line)
		require.Equal(t, g.Beams[0].DocID, b.Beams[0].DocID, "line %d: top-1", line)
		// Beams within chunkTolerance of each other may swap: compare scores by docid, and by position.
		byDoc := make(map[string]float64, len(a.Beams))
		for _, x := range a.Beams {
			byDoc[x.DocID] = x.Score
		}
		for i, x := range b.Beams {
			require.InDelta(t, a.Beams[i].Score, x.Score, chunkTolerance, "line %d beam %d", line, i)
			require.InDelta(t, g.Beams[i].Score, x.Score, scoreTolerance, "line %d beam %d", line, i)
			if s, ok := byDoc[x.DocID]; ok {
				require.InDelta(t, s, x.Score, chunkTolerance, "line %d %s", line, x.DocID)
				maxDiff = max(maxDiff, math.Abs(s-x.Score))
			}
		}
	}
	require.NoError(t, sc.Err())
	require.Positive(t, multi, "some golden case has a copy route of several subtrees")
	t.Logf("%d golden cases (%d chunked into several Runs): largest score difference chunked vs one Run %.2e", cases, multi, maxDiff)
}
