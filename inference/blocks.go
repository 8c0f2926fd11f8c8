package inference

// Block reading (issue 26). The prompt is read as the header, one block per candidate and the query: each
// candidate block is computed on its own, the query and the answer attend to everything. Two layouts, both
// exact with stored blocks and both a mask and position ids over the model's step contract (so a model can be
// fine-tuned to them without new parameters):
//   - BlockContiguous (Block-Attention): a block attends to itself only and every token keeps its place in the
//     prompt. A block's keys and values then depend on its offset only through the rotary embedding of its keys,
//     a rotation per position (R(a+d) = R(d) R(a)); it is computed once at offset 0 and its keys rotated to its
//     place in each prompt. The order of the list stays visible to the model.
//   - BlockShared (BlockRank): a block attends to the header and itself, and every block sits right after the
//     header (the same positions for all); the query follows the longest block. Nothing is rotated, and the
//     model cannot see the list's order.
//
// Blocks are kept in a BlockStore (float32, or int8 with a scale per position and head: a quarter of the memory)
// and reused by every request that lists them; only the query and the decoding
// run per request. The store is the engine's own (a swapped model starts with an empty one and fills it while
// it serves); a block missing at request time is computed then, all missing blocks of a request in as few Runs
// as the prefill chunk allows, and kept. Keys are content hashes of the block's ids, so a template with {i} in
// its candidate block (a position-dependent block) is read correctly, only with fewer hits.

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
)

// Block layouts (EngineOptions.BlockLayout).
const (
	BlockContiguous = "contiguous"
	BlockShared     = "shared"
)

// DefaultBlockStoreBytes bounds a BlockStore made with a zero size.
const DefaultBlockStoreBytes = 1 << 30

// Block store precisions (NewBlockStore).
const (
	// BlockFloat32 keeps a block's keys and values as computed: 4 bytes a value.
	BlockFloat32 = "float32"
	// BlockInt8 keeps each position's head (head_dim values of keys, or of values) as int8 with one float32
	// scale (max |x| / 127): 1 + 4/head_dim bytes a value.
	BlockInt8 = "int8"
)

// BlockStore keeps candidate blocks' keys and values, least recently used first out when full. It is safe
// for concurrent use.
type BlockStore struct {
	mu    sync.Mutex
	quant bool // int8
	max   int64
	bytes int64
	order *list.List // of *blockKV, most recently used at the front
	byKey map[blockKey]*list.Element
	stats BlockStoreStats
	fill  *BlockFill
	file  *blockFile // nil: in memory (OpenBlockStore: in a file, blockfile.go)
}

// BlockStoreStats counts a store's traffic.
type BlockStoreStats struct {
	// Precision is BlockFloat32 or BlockInt8.
	Precision string `json:"precision"`
	// Blocks and Bytes are what the store holds now; MaxBytes its bound.
	Blocks   int   `json:"blocks"`
	Bytes    int64 `json:"bytes"`
	MaxBytes int64 `json:"max_bytes"`
	// Hits and Misses count block lookups; Evicted counts blocks dropped to make room (in memory), Refused
	// the blocks a full file-backed store did not keep.
	Hits    int64 `json:"hits"`
	Misses  int64 `json:"misses"`
	Evicted int64 `json:"evicted"`
	Refused int64 `json:"refused"`
	// File is the file the store is kept in (OpenBlockStore); empty in memory. Its blocks were Loaded from
	// it when the store opened (computed before a restart).
	File   string `json:"file,omitempty"`
	Loaded int    `json:"loaded,omitempty"`
	// Fill is the last fill of the store from the index (SetFill); nil when none has started.
	Fill *BlockFill `json:"fill,omitempty"`
}

// BlockFill is the progress of a fill of a store ahead of requests with the blocks of the index's new
// documents (the sidecar's background fill, cmd/icicle blockfill.go, with Engine.FillBlocks).
type BlockFill struct {
	// State is "running", "done" (every new document of the index was listed and its block stored), "full"
	// (the store's bound was reached first: the fill stopped rather than evict what it computed) or "failed"
	// (Error says why; what was stored stays).
	State string `json:"state"`
	// Documents counts the new documents passed so far (the index's, once done); Computed the blocks the fill
	// computed (the others were stored already, by requests). With State done and Evicted 0, every new
	// document's block is in the store.
	Documents int     `json:"documents"`
	Computed  int     `json:"computed"`
	Seconds   float64 `json:"seconds"`
	Error     string  `json:"error,omitempty"`
}

// SetFill records a fill's progress, shown by Stats.
func (s *BlockStore) SetFill(f BlockFill) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fill = &f
}

type blockKey [sha256.Size]byte

// blockKV is one block's keys and values per layer (n positions in the KVCache layout), its keys rotated as
// at offset base: float32 (keys, values) or int8 (q, with a scale per position and head in scale).
type blockKV struct {
	key          blockKey
	n, base      int
	keys, values [][]float32
	q            [2][][]int8    // keys, values
	scale        [2][][]float32 // keys, values: per position and head
}

func (b *blockKV) size() int64 {
	var s int64
	for l := range b.keys {
		s += int64(len(b.keys[l])+len(b.values[l])) * 4
	}
	for kv := range b.q {
		for l := range b.q[kv] {
			s += int64(len(b.q[kv][l])) + int64(len(b.scale[kv][l]))*4
		}
	}
	return s
}

// NewBlockStore returns an empty store holding at most maxBytes of keys and values (DefaultBlockStoreBytes
// when 0), as int8 (BlockInt8) when quant is set, else float32.
func NewBlockStore(maxBytes int64, quant bool) *BlockStore {
	if maxBytes == 0 {
		maxBytes = DefaultBlockStoreBytes
	}
	return &BlockStore{quant: quant, max: maxBytes, order: list.New(), byKey: make(map[blockKey]*list.Element)}
}

// Precision returns BlockFloat32 or BlockInt8.
func (s *BlockStore) Precision() string {
	if s.quant {
		return BlockInt8
	}
	return BlockFloat32
}

// Stats returns the store's counters.
func (s *BlockStore) Stats() BlockStoreStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Precision, st.Blocks, st.Bytes, st.MaxBytes = s.Precision(), s.order.Len(), s.bytes, s.max
	if s.fill != nil {
		f := *s.fill
		st.Fill = &f
	}
	return st
}

func (s *BlockStore) get(k blockKey) *blockKV {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byKey[k]
	if !ok {
		s.stats.Misses++
		return nil
	}
	s.stats.Hits++
	s.order.MoveToFront(e)
	return e.Value.(*blockKV)
}

func (s *BlockStore) put(b *blockKV) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byKey[b.key]; ok {
		return
	}
	if s.file != nil {
		// In the file, read in place from now on; a full file keeps what it has.
		v, err := s.file.append(b)
		if err != nil {
			s.stats.Refused++
			return
		}
		s.byKey[v.key] = s.order.PushFront(v)
		s.bytes += v.size()
		return
	}
	sz := b.size()
	if sz > s.max {
		return
	}
	for s.bytes+sz > s.max {
		old := s.order.Back()
		ob := old.Value.(*blockKV)
		s.order.Remove(old)
		delete(s.byKey, ob.key)
		s.bytes -= ob.size()
		s.stats.Evicted++
	}
	s.byKey[b.key] = s.order.PushFront(b)
	s.bytes += sz
}

// Close releases a file-backed store's file (its blocks stay in it for the next OpenBlockStore) once every
// OpenBlockStore of it is closed; the store is empty afterwards. Call it once no engine reads the store. An
// in-memory store only empties; a nil one is a no-op.
func (s *BlockStore) Close() error {
	if s == nil {
		return nil
	}
	if s.file != nil && !s.file.release() {
		return nil // another holder still reads it
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.order.Init()
	clear(s.byKey)
	s.bytes = 0
	if s.file == nil {
		return nil
	}
	err := s.file.close()
	s.file = nil
	return err
}

// keyOf names a block by its layout, its ids and the offset its keys are rotated for.
func keyOf(layout string, base int, ids []int64) blockKey {
	h := sha256.New()
	h.Write([]byte(layout))
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(base))
	h.Write(buf[:])
	for _, id := range ids {
		binary.LittleEndian.PutUint64(buf[:], uint64(id))
		h.Write(buf[:])
	}
	var k blockKey
	h.Sum(k[:0])
	return k
}

// ropeFreqs returns theta^(-2j/headDim) for j < headDim/2, the rotary frequencies of the model's graph.
func ropeFreqs(theta float64, headDim int) []float64 {
	f := make([]float64, headDim/2)
	for j := range f {
		f[j] = 1 / math.Pow(theta, float64(2*j)/float64(headDim))
	}
	return f
}

// rotation is the cosines and sines that turn keys by delta positions: one pair per rotary frequency.
type rotation struct{ cos, sin []float32 }

func newRotation(freqs []float64, delta int) rotation {
	r := rotation{make([]float32, len(freqs)), make([]float32, len(freqs))}
	for j, f := range freqs {
		a := float64(delta) * f
		r.cos[j], r.sin[j] = float32(math.Cos(a)), float32(math.Sin(a))
	}
	return r
}

// rotate turns keys (positions x heads x headDim, rotary in the rotate-half layout: dimension j pairs with
// j+headDim/2, headDim = 2 x the frequencies) in place.
func (r rotation) rotate(keys []float32) {
	half := len(r.cos)
	for h := 0; h+2*half <= len(keys); h += 2 * half {
		x := keys[h : h+2*half]
		for j := range half {
			a, b := x[j], x[j+half]
			x[j] = a*r.cos[j] - b*r.sin[j]
			x[j+half] = b*r.cos[j] + a*r.sin[j]
		}
	}
}

// appendBlock appends b's positions to the cache with its keys rotated to start at offset at (one rotation
// for every layer).
func (c *KVCache) appendBlock(b *blockKV, at int, freqs []float64) error {
	return c.placeBlocks([]*blockKV{b}, []int{at}, freqs, 1)
}

// placeBlocks appends blocks to the cache in order, block i's keys rotated to start at offset at[i], with the
// layers shared among workers goroutines. Placing a request's blocks writes every stored value as float32 (100
// candidates: about 170 MB), which one core's memory bandwidth and int8 conversion bound; each layer is
// independent, so two cores take half the time.
func (c *KVCache) placeBlocks(blocks []*blockKV, at []int, freqs []float64, workers int) error {
	n := 0
	for _, b := range blocks {
		n += b.n
	}
	if c.n+n > c.Cap() {
		return fmt.Errorf("append %d positions to kv cache of %d/%d: %w", n, c.n, c.Cap(), ErrContextFull)
	}
	starts := make([]int, len(blocks))
	rots := make([]*rotation, len(blocks))
	pos := c.n
	for i, b := range blocks {
		starts[i], pos = pos, pos+b.n
		if at[i] != b.base {
			r := newRotation(freqs, at[i]-b.base)
			rots[i] = &r
		}
	}
	place := func(l int) {
		for i, b := range blocks {
			start, end := starts[i]*c.stride, (starts[i]+b.n)*c.stride
			keys, values := c.keys[l][start:end], c.values[l][start:end]
			if b.keys != nil {
				copy(keys, b.keys[l])
				copy(values, b.values[l])
			} else {
				dequantize(keys, b.q[0][l], b.scale[0][l], c.spec.HeadDim)
				dequantize(values, b.q[1][l], b.scale[1][l], c.spec.HeadDim)
			}
			if rots[i] != nil {
				rots[i].rotate(keys)
			}
		}
	}
	workers = max(1, min(workers, len(c.keys)))
	if workers == 1 { // one block (the header, a fill's) or one core: no goroutine
		for l := range c.keys {
			place(l)
		}
	} else {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for l := w; l < len(c.keys); l += workers {
					place(l)
				}
			})
		}
		wg.Wait()
	}
	c.n = pos
	return nil
}

// takeBlock copies positions [from, from+n) of the cache out as a block rotated for offset base, quantized to
// int8 when asked.
func (c *KVCache) takeBlock(k blockKey, from, n, base int, quant bool) *blockKV {
	b := &blockKV{key: k, n: n, base: base}
	span := func(buf []float32) []float32 { return buf[from*c.stride : (from+n)*c.stride] }
	if !quant {
		b.keys, b.values = make([][]float32, len(c.keys)), make([][]float32, len(c.keys))
		for l := range c.keys {
			b.keys[l] = append([]float32(nil), span(c.keys[l])...)
			b.values[l] = append([]float32(nil), span(c.values[l])...)
		}
		return b
	}
	heads := n * c.stride / c.spec.HeadDim
	for kv, bufs := range [2][][]float32{c.keys, c.values} {
		b.q[kv], b.scale[kv] = make([][]int8, len(bufs)), make([][]float32, len(bufs))
		for l, buf := range bufs {
			b.q[kv][l], b.scale[kv][l] = make([]int8, n*c.stride), make([]float32, heads)
			quantize(b.q[kv][l], b.scale[kv][l], span(buf), c.spec.HeadDim)
		}
	}
	return b
}

// quantize writes x as int8 in groups of g values (one position's head), each with the scale max |x| / 127:
// x ≈ q × scale, the error at most scale / 2 per value.
func quantize(q []int8, scale []float32, x []float32, g int) {
	for h := range scale {
		grp := x[h*g : (h+1)*g]
		var m float32
		for _, v := range grp {
			m = max(m, v, -v)
		}
		if m == 0 {
			scale[h] = 0
			clear(q[h*g : (h+1)*g])
			continue
		}
		scale[h] = m / 127
		inv := 127 / m
		for j, v := range grp {
			q[h*g+j] = int8(math.Round(float64(v * inv)))
		}
	}
}

// dequantize writes q × scale (quantize's groups of g) into x. Eight values a step, with the bounds proved
// once a step: the loop places every stored value of a request (BenchmarkDequantize).
func dequantize(x []float32, q []int8, scale []float32, g int) {
	x, q = x[:len(scale)*g], q[:len(scale)*g]
	for h, s := range scale {
		grp, qs := x[h*g:(h+1)*g], q[h*g:(h+1)*g]
		qs = qs[:len(grp)]
		j := 0
		for ; j+8 <= len(grp); j += 8 {
			v, o := qs[j:j+8:j+8], grp[j:j+8:j+8]
			o[0], o[1], o[2], o[3] = float32(v[0])*s, float32(v[1])*s, float32(v[2])*s, float32(v[3])*s
			o[4], o[5], o[6], o[7] = float32(v[4])*s, float32(v[5])*s, float32(v[6])*s, float32(v[7])*s
		}
		for ; j < len(grp); j++ {
			grp[j] = float32(qs[j]) * s
		}
	}
}

// blockPlan is a prompt's blocks looked up in the store: the header (segment 0) and each candidate's block.
type blockPlan struct {
	keys    []blockKey
	kv      []*blockKV // nil: to compute
	missing int        // tokens to compute
}

// blockBase is the offset a candidate block is computed and stored at: 0 (contiguous: it sees itself only)
// or the header's end (shared).
func (d *decoding) blockBase() int {
	if d.e.layout == BlockShared {
		return d.prompt.Segments[0]
	}
	return 0
}

// planBlocks looks every segment of the prompt up (the header at offset 0, the candidates' blocks at
// blockBase) and sets the position shift of the query and the answer.
func (d *decoding) planBlocks() blockPlan {
	segs := d.prompt.Segments
	pl := blockPlan{keys: make([]blockKey, len(segs)), kv: make([]*blockKV, len(segs))}
	start, longest := 0, 0
	for i, end := range segs {
		base := 0
		if i > 0 {
			base = d.blockBase()
			longest = max(longest, end-start)
		}
		pl.keys[i] = keyOf(d.e.layout, base, d.prompt.IDs[start:end])
		if pl.kv[i] = d.e.blocks.get(pl.keys[i]); pl.kv[i] == nil {
			pl.missing += end - start
		}
		start = end
	}
	if d.e.layout == BlockShared {
		// Cache index segs[last] holds the query's first token, at position header + longest block.
		d.shift = segs[0] + longest - segs[len(segs)-1]
	}
	return pl
}

// prefillBlocks fills the cache with the header and the candidate blocks, from the store or computed and
// stored, then feeds the query causally over them (with tree's first chunk, as prefill); it returns the logits
// after the prompt's last token.
func (d *decoding) prefillBlocks(ctx context.Context, pl blockPlan, tree *copyTree) ([]float32, error) {
	if err := d.storeBlocks(ctx, pl); err != nil {
		return nil, err
	}
	segs := d.prompt.Segments
	c := d.w.cache
	// Every block in its place (shared: where it was computed), then the query.
	at := make([]int, len(segs)-1)
	for i := range at {
		at[i] = segs[i]
		if d.e.layout == BlockShared {
			at[i] = pl.kv[i+1].base
		}
	}
	if err := c.placeBlocks(pl.kv[1:], at, d.e.freqs, d.e.placeWorkers); err != nil {
		return nil, fmt.Errorf("place blocks: %w", err)
	}
	return d.prefillCausal(ctx, segs[len(segs)-1], d.p, d.shift, tree)
}

// storeBlocks leaves the header in the cache (from the store, or computed and stored) and computes and stores
// the candidate blocks the store lacks, in groups of at most a prefill chunk of tokens, each at blockBase
// (computeBlocks); pl.kv then holds every block.
func (d *decoding) storeBlocks(ctx context.Context, pl blockPlan) error {
	d.blockRun = true
	defer func() { d.blockRun = false }()
	segs := d.prompt.Segments
	h := segs[0]
	c := d.w.cache
	if pl.kv[0] == nil {
		if _, err := d.prefillCausal(ctx, 0, h, 0, nil); err != nil {
			return fmt.Errorf("header: %w", err)
		}
		pl.kv[0] = c.takeBlock(pl.keys[0], 0, h, 0, d.e.blocks.quant)
		d.e.blocks.put(pl.kv[0])
		d.stats.BlockMisses++
	} else if err := c.appendBlock(pl.kv[0], 0, d.e.freqs); err != nil {
		return err
	} else {
		d.stats.BlockHits++
	}
	var group []int
	fed := 0
	flush := func() error {
		if len(group) == 0 {
			return nil
		}
		if err := d.computeBlocks(ctx, pl, group, fed); err != nil {
			return err
		}
		group, fed = group[:0], 0
		return nil
	}
	for i := 1; i < len(segs); i++ {
		if pl.kv[i] != nil {
			d.stats.BlockHits++
			continue
		}
		d.stats.BlockMisses++
		n := segs[i] - segs[i-1]
		if fed > 0 && fed+n > d.e.chunk {
			if err := flush(); err != nil {
				return err
			}
		}
		group = append(group, i)
		fed += n
	}
	return flush()
}

// ErrBusy is FillBlocks' answer when every session is serving requests.
var ErrBusy = errors.New("every session is busy")

// fillQuery stands in for a query in FillBlocks' prompt, whose query is never fed.
const fillQuery = "?"

// FillBlocks computes and keeps the blocks of cands that the store lacks, each as a request listing it would
// read it (opts' summary cap and title-only), and returns how many candidate blocks it computed and how many
// of cands its prompt held (those that fit opts.MaxPromptTokens, in order; the rest are left for another call).
// It runs only on a free session: when every session is serving, it returns ErrBusy at once, so that a
// background fill never makes a request wait longer than one fill's Runs (pass a few candidates at a time).
func (e *Engine) FillBlocks(ctx context.Context, cands []Candidate, opts Options) (computed, held int, err error) {
	if e.blocks == nil {
		return 0, 0, errors.New("fill blocks: the engine does not read by blocks")
	}
	// The session first: a busy engine is told at once, before the candidates are tokenized.
	var w *worker
	select {
	case w = <-e.workers:
		if w == nil {
			return 0, 0, fmt.Errorf("fill blocks: %w", ErrClosed)
		}
	default:
		return 0, 0, ErrBusy
	}
	defer func() { e.workers <- w }()
	opts, prompt, err := e.prompt(fillQuery, cands, opts)
	if err != nil {
		return 0, 0, fmt.Errorf("fill blocks: %w", err)
	}
	d := decoding{e: e, w: w, opts: opts, prompt: prompt, cands: cands}
	pl := d.planBlocks()
	if pl.missing == 0 {
		return 0, prompt.InContext, nil
	}
	if need := len(prompt.IDs); w.cache.Cap() < need {
		w.cache = NewKVCache(w.model.Spec(), need)
	}
	for _, kv := range pl.kv[1:] {
		if kv == nil {
			computed++
		}
	}
	w.cache.Reset()
	if err := d.storeBlocks(ctx, pl); err != nil {
		return 0, 0, fmt.Errorf("fill blocks: %w", err)
	}
	return computed, prompt.InContext, nil
}

// computeBlocks runs the blocks in group (segment indices) in one Run after the header, each at blockBase
// attending to itself (and, shared, to the header), and stores them. fed is their total length.
func (d *decoding) computeBlocks(ctx context.Context, pl blockPlan, group []int, fed int) error {
	segs := d.prompt.Segments
	h, base, see := segs[0], d.blockBase(), 0
	if d.e.layout == BlockShared {
		see = h
	}
	c := d.w.cache
	c.Truncate(h)
	ids, pos := d.w.buffers(fed)
	mask := d.w.maskBuf(fed, h)
	k := 0
	for _, i := range group {
		first := k
		for t := segs[i-1]; t < segs[i]; t++ {
			ids[k] = d.prompt.IDs[t]
			pos[k] = int64(base + k - first)
			row := maskRow(mask, k, h+fed, see)
			clear(row[h+first : h+k+1])
			k++
		}
	}
	if _, err := d.forward(ctx, Step{IDs: ids, Positions: pos, Mask: mask, LogitsIndex: d.w.index(fed - 1)}); err != nil {
		return fmt.Errorf("compute %d blocks (%d tokens): %w", len(group), fed, err)
	}
	from := h
	for _, i := range group {
		n := segs[i] - segs[i-1]
		pl.kv[i] = c.takeBlock(pl.keys[i], from, n, base, d.e.blocks.quant)
		d.e.blocks.put(pl.kv[i])
		from += n
	}
	c.Truncate(h)
	return nil
}
