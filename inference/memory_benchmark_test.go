package inference_test

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/internal/compress"
)

// benchQuery is the query of every engine benchmark.
const benchQuery = "who appoints the chair of the federal reserve system"

// peakHeapBytes runs fn once and returns the largest Go heap seen while it ran (runtime/metrics
// /memory/classes/heap/objects:bytes: live objects and garbage not yet swept), above the heap after a
// GC just before. A goroutine samples it every 50µs, and once more after fn; a peak shorter than that
// between two samples can be missed, which only matters when a GC runs inside fn.
func peakHeapBytes(fn func()) uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(s); return s[0].Value.Uint64() }
	runtime.GC()
	base := read()
	var peak atomic.Uint64
	note := func() {
		for v := read(); ; {
			p := peak.Load()
			if v <= p || peak.CompareAndSwap(p, v) {
				return
			}
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			note()
			time.Sleep(50 * time.Microsecond)
		}
	})
	fn()
	note()
	close(done)
	wg.Wait()
	return max(peak.Load(), base) - base
}

// coldRank runs the first Rank of a fresh engine with the heap sampled and returns its peak above the
// idle engine's heap: what one query needs, the worker's reusable KV cache and mask buffers included.
func coldRank(b *testing.B, e *inference.Engine, cands []inference.Candidate, opts inference.Options) float64 {
	b.Helper()
	var err error
	peak := peakHeapBytes(func() { _, err = e.Rank(b.Context(), benchQuery, cands, opts) })
	if err != nil {
		b.Fatal(err)
	}
	return float64(peak) / 1e6
}

// reportRank runs one more Rank outside the timed loop with the heap sampled, and reports the figures of
// a query: cold (coldRank's figure) and warm peak heap (a Rank on a worker whose buffers are already
// sized), forward Runs, tokens fed, KV bytes moved, copy-route Runs and the largest copy-route mask
// (sizes in MB, 1e6 bytes).
func reportRank(b *testing.B, e *inference.Engine, cands []inference.Candidate, opts inference.Options, cold float64) {
	b.Helper()
	var res inference.Result
	var err error
	peak := peakHeapBytes(func() { res, err = e.Rank(b.Context(), benchQuery, cands, opts) })
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(cold, "coldPeakHeapMB")
	b.ReportMetric(float64(peak)/1e6, "peakHeapMB")
	b.ReportMetric(float64(res.Stats.ForwardRuns), "runs/op")
	b.ReportMetric(float64(res.Stats.TokensFed), "tokens/op")
	b.ReportMetric(float64(res.Stats.KVBytesMoved)/1e6, "kvMB/op")
	b.ReportMetric(float64(res.Stats.CopyRuns), "copyRuns/op")
	b.ReportMetric(float64(res.Stats.CopyMaskBytes)/1e6, "copyMaskMB")
	b.ReportMetric(float64(res.PromptTokens), "prompt_tokens")
}

// BenchmarkRankFake measures the engine's own work and memory (prompt, tries, masks, beams; the model
// is the scripted fake of fake_test.go, so Go heap is all there is) on a ~10K-token prompt: byte-level
// tokens, nq_qed candidates 3..100 with extractive summaries, beams 1/4/10, the default copy-route mask
// budget. oneRunMaskMB is the mask of the copy route before it was bounded (every title token in one
// Run), copyMaskMB the largest it builds now.
//
//	go test -run '^$' -bench RankFake -benchtime 10x ./inference
func BenchmarkRankFake(b *testing.B) {
	cands := benchCandidates(b, 100)
	seen := make([]string, 0, 100)
	for _, c := range benchCandidates(b, 200)[100:] { // a seen corpus disjoint from the candidates
		seen = append(seen, c.Title)
	}
	for _, n := range []int{3, 10, 20, 50, 100} {
		for _, w := range []int{1, 4, 10} {
			b.Run(fmt.Sprintf("cands=%d/beam=%d", n, w), func(b *testing.B) {
				e, err := inference.NewFakeEngine(seen, 10240, inference.EngineOptions{})
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				opts := inference.Options{BeamWidth: w}
				cold := coldRank(b, e, cands[:n], opts)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := e.Rank(b.Context(), benchQuery, cands[:n], opts); err != nil {
						b.Fatal(err)
					}
				}
				reportRank(b, e, cands[:n], opts, cold)
				before, err := e.OneRunCopyMaskBytes(benchQuery, cands[:n], opts)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(before)/(1<<20), "oneRunMaskMB")
			})
		}
	}
}

// benchCandidates reads the first n nq_qed documents as candidates with extractive summaries.
func benchCandidates(b *testing.B, n int) []inference.Candidate {
	f, err := os.Open(filepath.Join("..", "data", "nq_qed", "corpus.jsonl.gz"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	var out []inference.Candidate
	for sc.Scan() && len(out) < n {
		var d struct{ Title, Text string }
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			b.Fatal(err)
		}
		out = append(out, inference.Candidate{Title: d.Title, Summary: compress.Extractive(d.Text)})
	}
	return out
}

// BenchmarkCopyMaskBudget ranks 100 nq_qed candidates on a ~10K-token prompt (fake model, beam 10) with
// the copy route's mask unbounded, at the default budget and at budgets that split its token tree into
// several Runs; the scores are the same in all (TestCopyRouteChunkedEqualsOneRun).
//
//	go test -run '^$' -bench CopyMaskBudget -benchtime 10x ./inference
func BenchmarkCopyMaskBudget(b *testing.B) {
	cands := benchCandidates(b, 100)
	for _, budget := range []int64{-1, 0, 1 << 20, 256 << 10} {
		b.Run(fmt.Sprintf("budget=%d", budget), func(b *testing.B) {
			e, err := inference.NewFakeEngine(nil, 10240, inference.EngineOptions{CopyMaskBytes: budget})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			opts := inference.Options{BeamWidth: 10}
			cold := coldRank(b, e, cands, opts)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Rank(b.Context(), benchQuery, cands, opts); err != nil {
					b.Fatal(err)
				}
			}
			reportRank(b, e, cands, opts, cold)
		})
	}
}
