package compress

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeCompressor is a Compressor whose behaviour is a function field.
type fakeCompressor struct {
	compress func(ctx context.Context, title, text string) (string, error)
}

func (fakeCompressor) ID() string { return "fake" }

func (f fakeCompressor) Compress(ctx context.Context, title, text string) (string, error) {
	return f.compress(ctx, title, text)
}

type item struct {
	title, text, summary string
}

func items(n int) iter.Seq[item] {
	return func(yield func(item) bool) {
		for i := range n {
			it := item{title: fmt.Sprint("t", i), text: fmt.Sprint("text ", i)}
			if i%5 == 4 {
				it.summary = "given" // already summarised: not sent to the compressor
			}
			if !yield(it) {
				return
			}
		}
	}
}

func need(it *item) (string, string, bool) { return it.title, it.text, it.summary == "" }
func set(it *item, s string)               { it.summary = s }

func TestApplyKeepsOrder(t *testing.T) {
	for _, workers := range []int{0, 1, 4, 16} {
		t.Run(fmt.Sprint("workers ", workers), func(t *testing.T) {
			var inflight, peak, calls atomic.Int32
			c := fakeCompressor{func(ctx context.Context, title, text string) (string, error) {
				calls.Add(1)
				n := inflight.Add(1)
				defer inflight.Add(-1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond) // finish out of order
				return "sum " + title, nil
			}}
			seq, errf := Apply(t.Context(), c, workers, items(50), need, set)
			var got []item
			for it := range seq {
				got = append(got, it)
			}
			require.NoError(t, errf())
			require.Len(t, got, 50)
			for i, it := range got {
				require.Equal(t, fmt.Sprint("t", i), it.title)
				if i%5 == 4 {
					require.Equal(t, "given", it.summary)
				} else {
					require.Equal(t, "sum "+it.title, it.summary)
				}
			}
			require.EqualValues(t, 40, calls.Load())
			require.LessOrEqual(t, peak.Load(), int32(max(workers, 1)))
		})
	}
}

func TestApplyStopsAtFirstError(t *testing.T) {
	boom := errors.New("boom")
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprint("workers ", workers), func(t *testing.T) {
			c := fakeCompressor{func(ctx context.Context, title, text string) (string, error) {
				if title == "t7" {
					return "", boom
				}
				return "s", ctx.Err()
			}}
			seq, errf := Apply(t.Context(), c, workers, items(1000), need, set)
			var got []string
			for it := range seq {
				got = append(got, it.title)
			}
			require.ErrorIs(t, errf(), boom)
			require.Equal(t, []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6"}, got)
		})
	}
}

func TestApplyConsumerStopsEarly(t *testing.T) {
	var read atomic.Int32
	in := func(yield func(item) bool) {
		for it := range items(10_000) {
			read.Add(1)
			if !yield(it) {
				return
			}
		}
	}
	c := fakeCompressor{func(ctx context.Context, title, text string) (string, error) { return "s", nil }}
	seq, errf := Apply(t.Context(), c, 4, in, need, set)
	var got []string
	for it := range seq {
		got = append(got, it.title)
		if len(got) == 3 {
			break
		}
	}
	require.NoError(t, errf())
	require.Equal(t, []string{"t0", "t1", "t2"}, got)
	require.Less(t, read.Load(), int32(100), "the reader stops soon after the consumer")
	require.True(t, slices.Equal(got, []string{"t0", "t1", "t2"}))
}
