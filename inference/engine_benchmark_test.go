//go:build ort && tokenizers

package inference_test

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/inference/loader"
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/internal/compress"
)

// BenchmarkRank measures one query end to end in the engine (prompt, prefill, copy route, parametric
// route) on the committed model, over candidates 3/10/20/50/100 (nq_qed documents with extractive
// summaries) and beam widths 1/4/10. It reports forward Runs, tokens fed and KV bytes moved per query.
//
//	eval "$(scripts/env.sh)"; go test -tags "ort tokenizers" -run '^$' -bench Rank -count 6 ./inference | tee new.txt
func BenchmarkRank(b *testing.B) {
	lib := os.Getenv("ICICLE_ORT_LIB")
	if lib == "" {
		b.Skip("ICICLE_ORT_LIB not set")
	}
	if err := ort.Init(lib); err != nil {
		b.Fatal(err)
	}
	defer ort.Shutdown()
	cands := benchCandidates(b, 100)
	// The encode cache is measured off and on in the same run; with it on, every iteration after the first
	// reuses the same candidates' encodings (the steady state for popular documents).
	for _, cache := range []struct {
		name    string
		entries int
	}{{"off", -1}, {"on", 0}} {
		lm, err := loader.Open(modelDir(), loader.Options{EncodeCacheEntries: cache.entries, Runtime: ort.Options{Threads: 2, InterOpThreads: 1}})
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{3, 10, 20, 50, 100} {
			for _, w := range []int{1, 4, 10} {
				b.Run(fmt.Sprintf("cache=%s/cands=%d/beam=%d", cache.name, n, w), func(b *testing.B) {
					b.ReportAllocs()
					var st inference.Stats
					var prompt int
					for b.Loop() {
						res, err := lm.Engine.Rank(b.Context(), "who appoints the chair of the federal reserve system", cands[:n], inference.Options{BeamWidth: w})
						if err != nil {
							b.Fatal(err)
						}
						st, prompt = res.Stats, res.PromptTokens
					}
					b.ReportMetric(float64(st.ForwardRuns), "runs/op")
					b.ReportMetric(float64(st.TokensFed), "tokens/op")
					b.ReportMetric(float64(st.KVBytesMoved)/1e6, "kvMB/op")
					b.ReportMetric(float64(prompt), "prompt_tokens")
				})
			}
		}
		if err := lm.Close(); err != nil {
			b.Fatal(err)
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
