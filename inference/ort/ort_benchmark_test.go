//go:build ort

package ort

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/icicle-search/sidecar/inference"
)

// BenchmarkForward measures one Forward on the fixture model (ICICLE_MODEL_DIR, default models/tiny):
// prompt prefills of 256 and 1024 tokens (past = 0), and a decode step of 10 beams, each one new token
// attending to a 1024-token past and itself, with logits for all 10 (the routed beam search's step).
// ONNX Runtime uses its default intra-op thread count (one per physical core).
func BenchmarkForward(b *testing.B) {
	f := loadFixture(b)
	m := f.load(b, Options{})
	r := rand.New(rand.NewPCG(5, 6))

	for _, n := range []int{256, 1024} {
		b.Run(fmt.Sprintf("prefill=%d", n), func(b *testing.B) {
			step := causalStep(randomIDs(r, n, f.spec.VocabSize), 0)
			cache := inference.NewKVCache(f.spec, n)
			if _, err := m.Forward(b.Context(), step, cache); err != nil { // grow the model's buffers
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				cache.Reset()
				if _, err := m.Forward(b.Context(), step, cache); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}

	const past, beams = 1024, 10
	b.Run(fmt.Sprintf("step=%d/past=%d", beams, past), func(b *testing.B) {
		cache := inference.NewKVCache(f.spec, past+beams)
		if _, err := m.Forward(b.Context(), causalStep(randomIDs(r, past, f.spec.VocabSize), 0), cache); err != nil {
			b.Fatal(err)
		}
		step := inference.Step{
			IDs:         randomIDs(r, beams, f.spec.VocabSize),
			Positions:   make([]int64, beams),
			Mask:        make([]float32, beams*(past+beams)),
			LogitsIndex: make([]int64, beams),
		}
		for i := range beams {
			step.Positions[i] = past
			step.LogitsIndex[i] = int64(i)
			for j := range beams {
				if j != i {
					step.Mask[i*(past+beams)+past+j] = inference.MaskedValue
				}
			}
		}
		if _, err := m.Forward(b.Context(), step, cache); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			cache.Truncate(past)
			if _, err := m.Forward(b.Context(), step, cache); err != nil {
				b.Fatal(err)
			}
		}
	})
}
