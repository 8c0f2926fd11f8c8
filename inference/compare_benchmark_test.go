//go:build ort && tokenizers

package inference_test

import (
	"bufio"
	"cmp"
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/inference/loader"
	"github.com/icicle-search/sidecar/inference/ort"
)

// compareCase is one line of the side-by-side benchmark's cases file (training/icicle/lab/hf_baseline.py cases).
type compareCase struct {
	ID string `json:"id"`
	decodeCase
}

// compareResult is one line of the engine's results file, read by lab/hf_baseline.py table.
type compareResult struct {
	ID           string    `json:"id"`
	Top1         string    `json:"top1"`
	Route        string    `json:"route"`
	Score        float64   `json:"score"`
	PCopy        float64   `json:"p_copy"`
	MS           float64   `json:"ms"`     // median wall time of Rank over the repeats
	RepeatsMS    []float64 `json:"ms_all"` // every repeat
	Runs         int       `json:"runs"`   // forward Runs per query
	TokensFed    int       `json:"tokens"` // tokens fed per query, prompt included
	PromptTokens int       `json:"prompt_tokens"`
	Included     int       `json:"included"`
}

// TestCompareHF runs the engine on the cases of the HF-generate comparison (scripts/bench-hf.sh): one
// engine session with 2 intra-op threads, each case ranked ICICLE_BENCH_REPEATS times (default 3) after one
// warm-up query; it writes per-case median latency, top-1 and work counters to ICICLE_BENCH_OUT.
//
//	eval "$(scripts/env.sh)"; ICICLE_BENCH_CASES=/tmp/b/cases.jsonl ICICLE_BENCH_OUT=/tmp/b/go.jsonl \
//	  go test -tags "ort tokenizers" -run '^TestCompareHF$' -v ./inference
func TestCompareHF(t *testing.T) {
	casesPath, outPath := os.Getenv("ICICLE_BENCH_CASES"), os.Getenv("ICICLE_BENCH_OUT")
	if casesPath == "" || outPath == "" {
		t.Skip("ICICLE_BENCH_CASES / ICICLE_BENCH_OUT not set (scripts/bench-hf.sh sets them)")
	}
	repeats := 3
	if s := os.Getenv("ICICLE_BENCH_REPEATS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "ICICLE_BENCH_REPEATS")
		repeats = max(1, n)
	}
	cases := readCompareCases(t, casesPath)
	require.NotEmpty(t, cases)

	initORT(t)
	lm, err := loader.Open(modelDir(), loader.Options{Runtime: ort.Options{Threads: 2, InterOpThreads: 1}})
	require.NoError(t, err)
	defer lm.Close()
	e := lm.Engine

	rank := func(c compareCase) (inference.Result, time.Duration) {
		cands := c.Candidates
		t0 := time.Now()
		res, err := e.Rank(t.Context(), c.Query, cands, c.options())
		d := time.Since(t0)
		require.NoError(t, err, "case %s", c.ID)
		require.NotEmpty(t, res.Beams, "case %s", c.ID)
		return res, d
	}
	rank(cases[len(cases)-1]) // warm-up

	f, err := os.Create(outPath)
	require.NoError(t, err)
	defer f.Close()
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	var all []float64
	for _, c := range cases {
		var res inference.Result
		ms := make([]float64, repeats)
		for i := range ms {
			var d time.Duration
			res, d = rank(c)
			ms[i] = float64(d.Microseconds()) / 1e3
		}
		med := median(ms)
		all = append(all, med)
		b := res.Beams[0]
		require.NoError(t, enc.Encode(compareResult{ID: c.ID, Top1: b.DocID, Route: string(b.Route), Score: b.Score,
			PCopy: res.PCopy, MS: med, RepeatsMS: ms, Runs: res.Stats.ForwardRuns, TokensFed: res.Stats.TokensFed,
			PromptTokens: res.PromptTokens, Included: res.InContext}))
	}
	require.NoError(t, w.Flush())
	t.Logf("%d cases, %d repeats each: median %.2f ms per query -> %s", len(cases), repeats, median(all), outPath)
}

func readCompareCases(t *testing.T, path string) []compareCase {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	var out []compareCase
	for line := 1; sc.Scan(); line++ {
		var c compareCase
		require.NoError(t, json.Unmarshal(sc.Bytes(), &c), "%s:%d", path, line)
		c.ID = cmp.Or(c.ID, strconv.Itoa(line))
		out = append(out, c)
	}
	require.NoError(t, sc.Err())
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
