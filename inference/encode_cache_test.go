package inference

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// countingTokenizer counts Encode calls to the wrapped fake.
type countingTokenizer struct {
	fakeTokenizer
	mu    sync.Mutex
	calls int
}

func (c *countingTokenizer) Encode(s string) ([]int64, error) {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	ids, err := c.fakeTokenizer.Encode(s)
	return append(make([]int64, 0, len(ids)+8), ids...), err // spare capacity, as real tokenizers leave
}

func TestEncodeCache(t *testing.T) {
	inner := &countingTokenizer{}
	c := newEncodeCache(inner, 2)
	a1, err := c.Encode("ab")
	require.NoError(t, err)
	a2, _ := c.Encode("ab")
	require.Equal(t, 1, inner.calls, "second call is a hit")
	require.Equal(t, a1, a2)
	require.Equal(t, len(a1), cap(a1), "clipped, so append copies")
	_ = append(a1, 99)
	a3, _ := c.Encode("ab")
	require.Equal(t, []int64{'a' + 2, 'b' + 2}, a3, "cached ids unchanged by a caller's append")

	c.Encode("cd") // cache: cd, ab
	c.Encode("ab") // ab most recent
	c.Encode("ef") // evicts cd
	calls := inner.calls
	c.Encode("ab")
	require.Equal(t, calls, inner.calls, "ab survived")
	c.Encode("cd")
	require.Equal(t, calls+1, inner.calls, "cd was evicted")

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				ids, err := c.Encode(fmt.Sprint((g + i) % 5))
				require.NoError(t, err)
				require.Len(t, ids, 1)
			}
		}()
	}
	wg.Wait()
}
