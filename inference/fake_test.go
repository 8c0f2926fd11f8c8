package inference

import (
	"context"
	"fmt"
	"strings"
)

// Fake token ids: 0 ends a docid, 1 is [COPY], bytes are 2..257.
const (
	fakeEnd   = 0
	fakeCopy  = 1
	fakeVocab = 258
)

// fakeTokenizer encodes one token per byte and recognises the literal "[COPY]".
type fakeTokenizer struct{}

func (fakeTokenizer) Encode(text string) ([]int64, error) {
	var ids []int64
	for i := 0; i < len(text); {
		if strings.HasPrefix(text[i:], "[COPY]") {
			ids = append(ids, fakeCopy)
			i += len("[COPY]")
			continue
		}
		ids = append(ids, int64(text[i])+2)
		i++
	}
	return ids, nil
}

func (fakeTokenizer) Close() error { return nil }

// fakeModel is a scripted decoder: the logits after a token are logitsFn of the token sequence that
// token can see, rebuilt from the attention mask. It checks that positions match the visible sequence,
// so a wrong mask or position in the engine changes the scores or fails the call.
type fakeModel struct {
	logitsFn func(seq []int64) []float32
	toks     []int64   // token at each cache position
	out      []float32 // reused like a native model's output buffer, so aliasing bugs show
	seq      []int64   // scratch: one row's visible sequence
	zeros    []float32 // scratch: the fake's keys and values
	calls    int
	failAt   int // fail the Nth call (1-based); 0 never
}

func (f *fakeModel) Spec() Spec {
	return Spec{VocabSize: fakeVocab, NumLayers: 1, NumKVHeads: 1, HeadDim: 1}
}
func (f *fakeModel) Close() error { return nil }

func (f *fakeModel) Forward(ctx context.Context, s Step, c *KVCache) ([]float32, error) {
	f.calls++
	if f.failAt == f.calls {
		return nil, fmt.Errorf("fake model: scripted failure at call %d", f.calls)
	}
	past := c.Len()
	f.toks = f.toks[:past]
	n := len(s.IDs)
	if len(s.Mask) != n*(past+n) || len(s.Positions) != n {
		return nil, fmt.Errorf("fake model: bad shapes ids %d pos %d mask %d past %d", n, len(s.Positions), len(s.Mask), past)
	}
	// The cache's tokens then the new ones; buffers are reused so that the fake adds little to the
	// engine's own allocations in benchmarks.
	f.toks = append(f.toks, s.IDs...)
	all := f.toks
	out := f.out[:0]
	for _, li := range s.LogitsIndex {
		row := s.Mask[int(li)*(past+n) : (int(li)+1)*(past+n)]
		seq := f.seq[:0]
		for j, m := range row {
			if m == 0 {
				seq = append(seq, all[j])
			}
		}
		if row[past+int(li)] != 0 {
			return nil, fmt.Errorf("fake model: token %d cannot see itself", li)
		}
		if got, want := s.Positions[li], int64(len(seq)-1); got != want {
			return nil, fmt.Errorf("fake model: token %d at position %d sees %d tokens", li, got, len(seq))
		}
		out = append(out, f.logitsFn(seq)...)
		f.seq = seq
	}
	if cap(f.zeros) < n {
		f.zeros = make([]float32, n)
	}
	zeros := f.zeros[:n]
	if err := c.Append(n, [][]float32{zeros}, [][]float32{zeros}); err != nil {
		f.toks = f.toks[:past]
		return nil, err
	}
	f.out = out
	return out, nil
}

// hashLogits gives every (sequence, token) pair a fixed pseudo-random logit in [-2, 2).
func hashLogits(seq []int64) []float32 {
	seed := uint64(14695981039346656037) // FNV-1a over the token ids
	for _, t := range seq {
		seed = (seed ^ uint64(t)) * 1099511628211
	}
	z := make([]float32, fakeVocab)
	for t := range z {
		x := seed ^ uint64(t)*0x9E3779B97F4A7C15
		x ^= x >> 31
		x *= 0xBF58476D1CE4E5B9
		x ^= x >> 29
		z[t] = float32(x%4000)/1000 - 2
	}
	return z
}

// fakeManifest returns a manifest for the fake vocabulary with a short template.
func fakeManifest() *Manifest {
	return &Manifest{
		FormatVersion: FormatVersion, VocabSize: fakeVocab, NumLayers: 1, NumKVHeads: 1, HeadDim: 1,
		KVDType: "float32", MaxContextTokens: 4096, CopyTokenID: fakeCopy, EndTokenID: fakeEnd,
		Template: Template{
			Header:             "H:\n",
			Candidate:          "[{i}] {summary}\nT: {title}\n",
			CandidateTitleOnly: "[{i}] T: {title}\n",
			Query:              "Q: {query}\nA:\n",
		},
	}
}
