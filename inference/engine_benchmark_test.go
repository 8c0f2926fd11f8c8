//go:build ort && tokenizers

package inference_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/inference/loader"
	"github.com/icicle-search/sidecar/inference/ort"
)

// BenchmarkRank measures one query end to end in the engine (prompt, prefill, copy route, parametric
// route) on the committed model, over candidates 3/10/20/50/100 (nq_qed documents with extractive
// summaries) and beam widths 1/4/10. Besides time and allocations it reports, from one more Rank outside
// the timed loop (reportRank), the Go heap's peak above the warm engine's idle heap, forward Runs, tokens
// fed, KV bytes moved and the copy route's Runs and largest mask per query. ONNX Runtime's own memory
// (activations, its arena) is C memory and not in peakHeapMB.
//
//	eval "$(scripts/env.sh)"; go test -tags "ort tokenizers" -run '^$' -bench Rank -count 6 ./inference | tee new.txt
func BenchmarkRank(b *testing.B) {
	benchORT(b)
	cands := benchCandidates(b, 100)
	// The encode cache is measured off and on in the same run; with it on, every iteration after the first
	// reuses the same candidates' encodings (the steady state for popular documents).
	for _, cache := range []struct {
		name    string
		entries int
	}{{"off", -1}, {"on", 0}} {
		for _, n := range []int{3, 10, 20, 50, 100} {
			for _, w := range []int{1, 4, 10} {
				b.Run(fmt.Sprintf("cache=%s/cands=%d/beam=%d", cache.name, n, w), func(b *testing.B) {
					// A fresh engine each, so the first Rank shows what a query needs from a cold worker.
					lm, err := loader.Open(modelDir(), loader.Options{EncodeCacheEntries: cache.entries, Runtime: ort.Options{Threads: 2, InterOpThreads: 1}})
					if err != nil {
						b.Fatal(err)
					}
					defer lm.Close()
					opts := inference.Options{BeamWidth: w}
					cold := coldRank(b, lm.Engine, cands[:n], opts)
					b.ReportAllocs()
					for b.Loop() {
						if _, err := lm.Engine.Rank(b.Context(), benchQuery, cands[:n], opts); err != nil {
							b.Fatal(err)
						}
					}
					reportRank(b, lm.Engine, cands[:n], opts, cold)
				})
			}
		}
	}
}

// benchORT starts ONNX Runtime for a benchmark (skipped without ICICLE_ORT_LIB) and shuts it down after.
func benchORT(b *testing.B) {
	b.Helper()
	lib := os.Getenv("ICICLE_ORT_LIB")
	if lib == "" {
		b.Skip("ICICLE_ORT_LIB not set")
	}
	if err := ort.Init(lib); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ort.Shutdown() })
}
