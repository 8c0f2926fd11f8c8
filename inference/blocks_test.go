package inference

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRotateKeys: rotations by a then b are one by a+b, by d then -d none, and a rotation keeps each pair's
// length (it is the rotary embedding's relative property that block reading relies on).
func TestRotateKeys(t *testing.T) {
	const headDim = 8
	freqs := ropeFreqs(10000, headDim)
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]float32, 3*2*headDim) // 3 positions x 2 heads
	for i := range keys {
		keys[i] = rng.Float32()*2 - 1
	}
	ab, oneStep := append([]float32(nil), keys...), append([]float32(nil), keys...)
	newRotation(freqs, 17).rotate(ab)
	newRotation(freqs, 25).rotate(ab)
	newRotation(freqs, 42).rotate(oneStep)
	require.InDeltaSlice(t, oneStep, ab, 1e-5)
	back := append([]float32(nil), keys...)
	newRotation(freqs, 300).rotate(back)
	require.NotEqual(t, keys, back)
	newRotation(freqs, -300).rotate(back)
	require.InDeltaSlice(t, keys, back, 1e-5)
	for h := 0; h < len(keys); h += headDim {
		for j := range headDim / 2 {
			a, b := keys[h+j], keys[h+j+headDim/2]
			x, y := oneStep[h+j], oneStep[h+j+headDim/2]
			require.InDelta(t, a*a+b*b, x*x+y*y, 1e-5)
		}
	}
	same := append([]float32(nil), keys...)
	newRotation(freqs, 0).rotate(same)
	require.Equal(t, keys, same)
}

func testBlock(key byte, positions int) *blockKV {
	b := &blockKV{n: positions, keys: [][]float32{make([]float32, positions*4)}, values: [][]float32{make([]float32, positions*4)}}
	b.key[0] = key
	return b
}

// TestBlockStoreLRU: the store keeps at most its bytes, drops the least recently used first, counts hits,
// misses and evictions, and never keeps a block larger than itself.
func TestBlockStoreLRU(t *testing.T) {
	s := NewBlockStore(3*32, false) // three blocks of one position, 4 floats of keys and of values
	for k := byte(1); k <= 3; k++ {
		s.put(testBlock(k, 1))
	}
	require.NotNil(t, s.get(blockKey{1})) // 1 is now the most recent; 2 the least
	s.put(testBlock(4, 1))
	require.Nil(t, s.get(blockKey{2}))
	for _, k := range []byte{1, 3, 4} {
		require.NotNil(t, s.get(blockKey{k}), "block %d", k)
	}
	s.put(testBlock(5, 4)) // larger than the whole store: not kept, nothing evicted
	require.Nil(t, s.get(blockKey{5}))
	st := s.Stats()
	require.Equal(t, BlockStoreStats{Precision: BlockFloat32, Blocks: 3, Bytes: 96, MaxBytes: 96, Hits: 4, Misses: 2, Evicted: 1}, st)
	require.NotEqual(t, keyOf(BlockContiguous, 0, []int64{1, 2}), keyOf(BlockShared, 0, []int64{1, 2}))
	require.NotEqual(t, keyOf(BlockContiguous, 0, []int64{1, 2}), keyOf(BlockContiguous, 5, []int64{1, 2}))
	require.NotEqual(t, keyOf(BlockContiguous, 0, []int64{1, 2}), keyOf(BlockContiguous, 0, []int64{2, 1}))
}

// TestPromptSegmentsFixedCap: Segments end the header and each block; with FixedSummaryCap every summary is
// cut to MaxSummaryTokens whatever the room, a candidate goes in only whole, and a candidate's block is the
// same ids in any list (with a template without {i}).
func TestPromptSegmentsFixedCap(t *testing.T) {
	tmpl := fakeManifest().Template
	tmpl.Candidate = strings.ReplaceAll(tmpl.Candidate, "[{i}] ", "- ")
	b, err := NewPromptBuilder(fakeTokenizer{}, tmpl)
	require.NoError(t, err)
	long := Candidate{Title: "Alpha", Summary: strings.Repeat("a", 40)}
	short := Candidate{Title: "Beta", Summary: "bb"}
	p, err := b.Build("q", []Candidate{long, short}, PromptOptions{MaxTokens: 1000, MaxSummaryTokens: 10, FixedSummaryCap: true})
	require.NoError(t, err)
	require.Equal(t, []int{10, 2}, p.SummaryTokens)
	require.Len(t, p.Segments, 3)
	block := func(p Prompt, i int) []int64 { return p.IDs[p.Segments[i]:p.Segments[i+1]] }
	q, err := b.Build("q", []Candidate{short, long}, PromptOptions{MaxTokens: 1000, MaxSummaryTokens: 10, FixedSummaryCap: true})
	require.NoError(t, err)
	require.Equal(t, block(p, 0), block(q, 1), "the long candidate's block is the same at place 1 and 2")
	require.Equal(t, block(p, 1), block(q, 0))
	// A budget that holds the header, the query and the first block only: the second is left out, not cut.
	room := p.Segments[1] + len(p.IDs) - p.Segments[2]
	r, err := b.Build("q", []Candidate{long, short}, PromptOptions{MaxTokens: room + 3, MaxSummaryTokens: 10, FixedSummaryCap: true})
	require.NoError(t, err)
	require.Equal(t, 1, r.InContext)
	require.Equal(t, []int{10}, r.SummaryTokens)
	// Without FixedSummaryCap the same budget shares the room: both go in, cut shorter.
	w, err := b.Build("q", []Candidate{long, short}, PromptOptions{MaxTokens: room + 3, MaxSummaryTokens: 10})
	require.NoError(t, err)
	require.Equal(t, 2, w.InContext)
}

// TestQuantizeBlock: int8 groups (one position's head each) come back within half a step (max |x| / 254) of
// every value, an all-zero group stays zero, and a block taken as int8 and placed again gives back the cache's
// values within that bound, in a quarter of the bytes and a scale per head.
func TestQuantizeBlock(t *testing.T) {
	const g = 8
	rng := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, 4*g)
	for i := range x[:3*g] {
		x[i] = (rng.Float32()*2 - 1) * float32(1+i/g*10) // groups of different ranges; the last all zero
	}
	q, scale := make([]int8, len(x)), make([]float32, 4)
	quantize(q, scale, x, g)
	back := make([]float32, len(x))
	dequantize(back, q, scale, g)
	for h := range 4 {
		var m float32
		for _, v := range x[h*g : (h+1)*g] {
			m = max(m, v, -v)
		}
		require.InDelta(t, m/127, scale[h], 1e-6)
		for j := h * g; j < (h+1)*g; j++ {
			require.LessOrEqual(t, float64(abs32(back[j]-x[j])), float64(m/254)+1e-6, "value %d", j)
		}
	}
	require.Equal(t, make([]float32, g), back[3*g:], "a zero group")

	spec := Spec{NumLayers: 2, NumKVHeads: 2, HeadDim: g}
	c := NewKVCache(spec, 8)
	k := make([][]float32, 2)
	v := make([][]float32, 2)
	for l := range k {
		k[l], v[l] = make([]float32, 3*2*g), make([]float32, 3*2*g)
		for i := range k[l] {
			k[l][i], v[l][i] = rng.Float32()*4-2, rng.Float32()-0.5
		}
	}
	require.NoError(t, c.Append(3, k, v))
	full, quant := c.takeBlock(blockKey{1}, 0, 3, 0, false), c.takeBlock(blockKey{2}, 0, 3, 0, true)
	require.Equal(t, int64(2*2*3*2*g*4), full.size())
	require.Equal(t, int64(2*2*(3*2*g+3*2*4)), quant.size(), "int8 values and a float32 scale per position and head")
	d := NewKVCache(spec, 8)
	require.NoError(t, d.appendBlock(quant, 0, ropeFreqs(10000, g)))
	for l := range k {
		gotK, gotV := d.Past(l)
		require.InDeltaSlice(t, k[l], gotK, 2.0/254+1e-6)
		require.InDeltaSlice(t, v[l], gotV, 0.5/254+1e-6)
	}
	require.ErrorIs(t, NewKVCache(spec, 2).appendBlock(quant, 0, nil), ErrContextFull)
}

func abs32(x float32) float32 { return max(x, -x) }

// TestPlaceBlocks: placing a request's blocks at once, the layers shared among goroutines, writes the cache that
// appending them one by one writes, bit for bit: float32 and int8 blocks, rotated to another offset or not; and
// dequantize (eight values a step, then the rest) is q × scale exactly, for a head size that is not a multiple
// of eight.
func TestPlaceBlocks(t *testing.T) {
	const g = 12
	rng := rand.New(rand.NewPCG(5, 6))
	spec := Spec{NumLayers: 5, NumKVHeads: 2, HeadDim: g}
	src := NewKVCache(spec, 16)
	k, v := make([][]float32, spec.NumLayers), make([][]float32, spec.NumLayers)
	for l := range k {
		k[l], v[l] = make([]float32, 9*2*g), make([]float32, 9*2*g)
		for i := range k[l] {
			k[l][i], v[l][i] = rng.Float32()*4-2, rng.Float32()-0.5
		}
	}
	require.NoError(t, src.Append(9, k, v))
	blocks := []*blockKV{src.takeBlock(blockKey{1}, 0, 2, 0, true), src.takeBlock(blockKey{2}, 2, 4, 3, false),
		src.takeBlock(blockKey{3}, 6, 3, 3, true)}
	at := []int{0, 5, 3} // the first and last in place, the second rotated by 2
	freqs := ropeFreqs(10000, g)
	want := NewKVCache(spec, 16)
	for i, b := range blocks {
		require.NoError(t, want.appendBlock(b, at[i], freqs))
	}
	for _, workers := range []int{1, 2, 3, 8} {
		got := NewKVCache(spec, 16)
		require.NoError(t, got.placeBlocks(blocks, at, freqs, workers))
		require.Equal(t, want.Len(), got.Len())
		for l := range spec.NumLayers {
			wk, wv := want.Past(l)
			gk, gv := got.Past(l)
			require.Equal(t, wk, gk, "workers %d layer %d keys", workers, l)
			require.Equal(t, wv, gv, "workers %d layer %d values", workers, l)
		}
	}
	require.ErrorIs(t, NewKVCache(spec, 8).placeBlocks(blocks, at, freqs, 2), ErrContextFull)

	q := blocks[0].q[0][1]
	scale := blocks[0].scale[0][1]
	x := make([]float32, len(q))
	dequantize(x, q, scale, g)
	for i := range x {
		require.Equal(t, float32(q[i])*scale[i/g], x[i], "value %d", i)
	}
}

// BenchmarkDequantize: one layer of one 37-token block (3 kv heads of 64), the unit of placing stored blocks.
func BenchmarkDequantize(b *testing.B) {
	const g, n = 64, 37 * 3
	q, s, x := make([]int8, n*g), make([]float32, n), make([]float32, n*g)
	for i := range q {
		q[i] = int8(i)
	}
	for i := range s {
		s[i] = 0.01 * float32(i)
	}
	b.SetBytes(int64(len(q)))
	for b.Loop() {
		dequantize(x, q, s, g)
	}
}

// BenchmarkPlaceBlocks: placing 100 stored int8 blocks of 37 positions (a 100-candidate request over a model of
// 30 layers, 3 kv heads of 64) into the cache, on one goroutine and on two.
func BenchmarkPlaceBlocks(b *testing.B) {
	spec := Spec{NumLayers: 30, NumKVHeads: 3, HeadDim: 64}
	src := NewKVCache(spec, 37)
	k, v := make([][]float32, spec.NumLayers), make([][]float32, spec.NumLayers)
	for l := range k {
		k[l], v[l] = make([]float32, 37*3*64), make([]float32, 37*3*64)
		for i := range k[l] {
			k[l][i], v[l][i] = float32(i%17)-8, float32(i%13)-6
		}
	}
	if err := src.Append(37, k, v); err != nil {
		b.Fatal(err)
	}
	blocks, at := make([]*blockKV, 100), make([]int, 100)
	for i := range blocks {
		blocks[i] = src.takeBlock(blockKey{byte(i)}, 0, 37, 0, true) // distinct copies, as the store's are
	}
	c := NewKVCache(spec, 3700)
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			for b.Loop() {
				c.Reset()
				if err := c.placeBlocks(blocks, at, nil, workers); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestBlockModelNeedsBlockReading: a block model (the fp32 graph beside int8 sessions) is refused without block
// reading, where nothing would run it, and one of another shape is refused with both shapes named.
func TestBlockModelNeedsBlockReading(t *testing.T) {
	_, err := NewEngine(fakeManifest(), fakeTokenizer{}, []Model{&fakeModel{logitsFn: hashLogits}}, nil,
		EngineOptions{BlockModel: &fakeModel{logitsFn: hashLogits}})
	require.ErrorContains(t, err, "a block model without block reading")

	man := fakeManifest()
	man.RopeTheta = 10000
	_, err = NewEngine(man, fakeTokenizer{}, []Model{&fakeModel{logitsFn: hashLogits}}, nil,
		EngineOptions{Blocks: NewBlockStore(0, false), BlockModel: &otherSpecModel{}})
	require.ErrorContains(t, err, "the block model's spec")
}

// otherSpecModel is a fake whose spec is not fakeModel's; it is never run.
type otherSpecModel struct{ fakeModel }

func (otherSpecModel) Spec() Spec {
	return Spec{VocabSize: fakeVocab, NumLayers: 2, NumKVHeads: 1, HeadDim: 1}
}
