package dense

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeTokenizer gives each word the id of its length (so "aaa" is 3).
type fakeTokenizer struct{}

func (fakeTokenizer) Encode(text string) ([]int64, error) {
	var ids []int64
	for _, w := range strings.Fields(text) {
		ids = append(ids, int64(len(w)))
	}
	return ids, nil
}
func (fakeTokenizer) Close() error { return nil }

// fakeSession returns, for position j of row r, the hidden state [id, 1, r] (dims 3), and records the
// batches it was given.
type fakeSession struct {
	mu      sync.Mutex
	batches [][2]int // batch, seqLen
	err     error
}

func (f *fakeSession) Run(_ context.Context, ids, mask []int64, batch, seqLen int) ([]float32, error) {
	f.mu.Lock()
	f.batches = append(f.batches, [2]int{batch, seqLen})
	f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	out := make([]float32, batch*seqLen*3)
	for r := range batch {
		for j := range seqLen {
			i := r*seqLen + j
			out[i*3], out[i*3+1], out[i*3+2] = float32(ids[i]), float32(mask[i]), float32(r)
		}
	}
	return out, nil
}
func (f *fakeSession) Close() error { return nil }

func testManifest(pooling string) *Manifest {
	return &Manifest{Name: "fake", ONNX: "m", Tokenizer: "t", Dims: 3, MaxTokens: 5, Pooling: pooling,
		QueryPrefix: "q: ", CLSID: 101, SEPID: 102, PadID: 0}
}

func TestTokens(t *testing.T) {
	e, err := New(testManifest(PoolCLS), fakeTokenizer{}, &fakeSession{}, Options{})
	require.NoError(t, err)
	ids, err := e.Tokens("a bb ccc dddd eeeee")
	require.NoError(t, err)
	require.Equal(t, []int64{101, 1, 2, 3, 102}, ids, "[CLS], max_tokens-2 pieces, [SEP]")
	_, err = e.Tokens("a\x00b")
	require.ErrorContains(t, err, "NUL")
}

func TestEmbed(t *testing.T) {
	t.Run("cls pooling of the query, with its prefix", func(t *testing.T) {
		e, _ := New(testManifest(PoolCLS), fakeTokenizer{}, &fakeSession{}, Options{})
		v, err := e.Query(t.Context(), "hello")
		require.NoError(t, err)
		// The CLS position's state is [101, 1, 0]; unnormalised.
		require.Equal(t, []float32{101, 1, 0}, v)
	})
	t.Run("mean pooling over the unmasked positions, normalised", func(t *testing.T) {
		m := testManifest(PoolMean)
		m.Normalize = true
		e, _ := New(m, fakeTokenizer{}, &fakeSession{}, Options{})
		v, err := e.Passages(t.Context(), []string{"aa"})
		require.NoError(t, err)
		// Positions [CLS]=101, 2, [SEP]=102: mean id 205/3, mask 1, row 0.
		want := []float64{205.0 / 3, 1, 0}
		n := math.Hypot(want[0], want[1])
		require.InDelta(t, want[0]/n, v[0][0], 1e-6)
		require.InDelta(t, want[1]/n, v[0][1], 1e-6)
	})
	t.Run("batches by length, results in input order, padding ignored by mean", func(t *testing.T) {
		s := &fakeSession{}
		e, _ := New(testManifest(PoolMean), fakeTokenizer{}, s, Options{BatchSize: 2})
		vs, err := e.Passages(t.Context(), []string{"a", "bbb ccc ddd", "ee ff", "g"})
		require.NoError(t, err)
		require.Len(t, vs, 4)
		// Longest first: [bbb ccc ddd] and [ee ff] in one run of length 5, then [a] and [g] of length 3.
		require.Equal(t, [][2]int{{2, 5}, {2, 3}}, s.batches)
		require.InDelta(t, (101.0+1+102)/3, vs[0][0], 1e-5, "input 0's own tokens, no padding")
		require.InDelta(t, (101.0+3+3+3+102)/5, vs[1][0], 1e-5)
		require.InDelta(t, (101.0+2+2+102)/4, vs[2][0], 1e-5)
	})
	t.Run("the manifest's max_batch caps a run", func(t *testing.T) {
		s := &fakeSession{}
		m := testManifest(PoolCLS)
		m.MaxBatch = 1
		e, _ := New(m, fakeTokenizer{}, s, Options{BatchSize: 16})
		_, err := e.Passages(t.Context(), []string{"a", "b", "c"})
		require.NoError(t, err)
		require.Len(t, s.batches, 3)
	})
	t.Run("a session error names the batch", func(t *testing.T) {
		e, _ := New(testManifest(PoolCLS), fakeTokenizer{}, &fakeSession{err: errors.New("boom")}, Options{})
		_, err := e.Query(t.Context(), "x")
		require.ErrorContains(t, err, "boom")
		require.ErrorContains(t, err, "embed query")
	})
	t.Run("closed", func(t *testing.T) {
		e, _ := New(testManifest(PoolCLS), fakeTokenizer{}, &fakeSession{}, Options{})
		require.NoError(t, e.Close())
		require.NoError(t, e.Close())
		_, err := e.Query(t.Context(), "x")
		require.ErrorIs(t, err, ErrClosed)
	})
}

func TestManifestValidate(t *testing.T) {
	err := (&Manifest{Dims: 0, MaxTokens: 1, Pooling: "max", MaxBatch: -1}).Validate()
	for _, f := range []string{"name", "onnx", "tokenizer", "dims", "max_tokens", "pooling", "max_batch"} {
		require.ErrorContains(t, err, f)
	}
	_, err = LoadManifest(t.TempDir())
	require.ErrorContains(t, err, ManifestFile)
}

func TestPassageText(t *testing.T) {
	require.Equal(t, "T\nbody", PassageText("T", "body"))
	require.Equal(t, "T", PassageText("T", ""))
	require.Equal(t, "body", PassageText("", "body"))
}

// blockingSession is a fake Run that holds until release is closed or its context ends, counting the Runs in
// progress and the most at once.
type blockingSession struct {
	fakeSession
	release       chan struct{}
	started       chan struct{}
	running, most atomic.Int32
}

func (b *blockingSession) Run(ctx context.Context, ids, mask []int64, batch, seqLen int) ([]float32, error) {
	n := b.running.Add(1)
	defer b.running.Add(-1)
	for m := b.most.Load(); n > m && !b.most.CompareAndSwap(m, n); m = b.most.Load() {
	}
	b.started <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return b.fakeSession.Run(ctx, ids, mask, batch, seqLen)
}

// TestMaxRuns: no more than MaxRuns Runs at once; a call beyond them waits, and gives up when its context ends
// (an error wrapping the context's) without starting a Run; once the Runs end, the next call runs.
func TestMaxRuns(t *testing.T) {
	s := &blockingSession{release: make(chan struct{}), started: make(chan struct{}, 8)}
	e, err := New(testManifest(PoolCLS), fakeTokenizer{}, s, Options{MaxRuns: 2})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			_, err := e.Query(context.Background(), "held")
			require.NoError(t, err)
		})
	}
	<-s.started
	<-s.started // both Runs in progress
	// Without the bound this call would start a third Run (and the most at once would be 3).
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err = e.Query(ctx, "third")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, int32(2), s.most.Load(), "never more than MaxRuns at once")
	close(s.release)
	wg.Wait()
	_, err = e.Query(t.Context(), "fourth")
	require.NoError(t, err)
	s.mu.Lock()
	require.Len(t, s.batches, 3, "the call that gave up never ran")
	s.mu.Unlock()
	_, err = New(testManifest(PoolCLS), fakeTokenizer{}, s, Options{MaxRuns: -1})
	require.ErrorContains(t, err, "max runs")
}

// TestPassageRuns: with PassageRuns 2 a Passages call runs two of its batches at once (never more, within
// MaxRuns), and the vectors are those of one batch at a time, each in its text's place.
func TestPassageRuns(t *testing.T) {
	texts := []string{"a bb", "ccc", "dddd e", "ff", "g hh iii", "jjjj"}
	one, err := New(testManifest(PoolMean), fakeTokenizer{}, &fakeSession{}, Options{BatchSize: 1})
	require.NoError(t, err)
	want, err := one.Passages(t.Context(), texts)
	require.NoError(t, err)

	s := &blockingSession{release: make(chan struct{}), started: make(chan struct{}, 8)}
	two, err := New(testManifest(PoolMean), fakeTokenizer{}, s, Options{BatchSize: 1, PassageRuns: 2, MaxRuns: 4})
	require.NoError(t, err)
	type result struct {
		vs  [][]float32
		err error
	}
	done := make(chan result)
	go func() {
		vs, err := two.Passages(context.Background(), texts)
		done <- result{vs, err}
	}()
	<-s.started
	<-s.started // two batches of the one call in progress at once
	close(s.release)
	got := <-done
	require.NoError(t, got.err)
	require.Equal(t, want, got.vs)
	require.Equal(t, int32(2), s.most.Load(), "never more than PassageRuns of one call at once")
	s.mu.Lock()
	require.Len(t, s.batches, len(texts))
	s.mu.Unlock()

	_, err = New(testManifest(PoolMean), fakeTokenizer{}, &fakeSession{err: errors.New("x")}, Options{PassageRuns: -1})
	require.ErrorContains(t, err, "passage runs -1")
	failing, err := New(testManifest(PoolMean), fakeTokenizer{}, &fakeSession{err: errors.New("run failed")}, Options{BatchSize: 1, PassageRuns: 2})
	require.NoError(t, err)
	_, err = failing.Passages(t.Context(), texts)
	require.ErrorContains(t, err, "run failed")
}
