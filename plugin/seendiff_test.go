package plugin

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// readyWithDiff polls /readyz until the background diff has landed and returns that body.
func readyWithDiff(t *testing.T, s *Server) map[string]any {
	t.Helper()
	var body map[string]any
	require.Eventually(t, func() bool {
		var code int
		code, body, _ = do(t, s, "GET", "/readyz", "")
		return code == 200 && body["seen_diff"] != nil
	}, 5*time.Second, 5*time.Millisecond)
	return body
}

func TestReadySeenDiff(t *testing.T) {
	model := []string{"Alpha", "Beta", "Gamma"}
	t.Run("differences are counted and named, and make the seen corpus inconsistent", func(t *testing.T) {
		var calls atomic.Int32
		es := &fakeSearcher{seen: 3, seenDiff: func(_ context.Context, got []string) (adapter.SeenDiff, error) {
			calls.Add(1)
			require.Equal(t, model, got, "the model's seen corpus is compared")
			return adapter.SeenDiff{IndexSeen: 3, ModelSeen: 3, MissingInIndex: []string{"Gamma"}, MissingInIndexCount: 1,
				NotInModel: []string{"Zeta"}, NotInModelCount: 1}, nil
		}}
		s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.Model.SeenDocIDs = 3 })
		s.models = NewSwapper(LoadedModel{Reader: icicle(&fakeReranker{rank: copyBeta}), Info: s.opts.Model, Seen: model}, nil, nil)
		body := readyWithDiff(t, s)
		require.Equal(t, false, body["seen_consistent"], "equal counts, different sets")
		d := body["seen_diff"].(map[string]any)
		require.EqualValues(t, 1, d["missing_in_index"])
		require.EqualValues(t, 1, d["not_in_model"])
		require.Equal(t, []any{"Gamma"}, d["missing_in_index_examples"])
		require.Equal(t, []any{"Zeta"}, d["not_in_model_examples"])
		for range 5 {
			do(t, s, "GET", "/readyz", "")
		}
		require.EqualValues(t, 1, calls.Load(), "a fresh diff is reused, not recomputed per probe")
	})
	t.Run("a consistent diff and equal counts are consistent; a stale diff is refreshed", func(t *testing.T) {
		var calls atomic.Int32
		es := &fakeSearcher{seen: 3, seenDiff: func(context.Context, []string) (adapter.SeenDiff, error) {
			calls.Add(1)
			return adapter.SeenDiff{IndexSeen: 3, ModelSeen: 3}, nil
		}}
		s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.Model.SeenDocIDs = 3; o.SeenDiffInterval = time.Nanosecond })
		s.models = NewSwapper(LoadedModel{Reader: icicle(&fakeReranker{rank: copyBeta}), Info: s.opts.Model, Seen: model}, nil, nil)
		body := readyWithDiff(t, s)
		require.Equal(t, true, body["seen_consistent"])
		d := body["seen_diff"].(map[string]any)
		require.Equal(t, []any{}, d["missing_in_index_examples"], "empty lists, not null")
		require.Eventually(t, func() bool { do(t, s, "GET", "/readyz", ""); return calls.Load() >= 2 }, 5*time.Second, 5*time.Millisecond)
	})
	t.Run("equal counts are pending, not consistent, until the diff has finished", func(t *testing.T) {
		release := make(chan struct{})
		es := &fakeSearcher{seen: 3, seenDiff: func(ctx context.Context, _ []string) (adapter.SeenDiff, error) {
			select {
			case <-release:
			case <-ctx.Done():
				return adapter.SeenDiff{}, ctx.Err()
			}
			return adapter.SeenDiff{IndexSeen: 3, ModelSeen: 3}, nil
		}}
		s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.Model.SeenDocIDs = 3 })
		s.models = NewSwapper(LoadedModel{Reader: icicle(&fakeReranker{rank: copyBeta}), Info: s.opts.Model, Seen: model}, nil, nil)
		code, body, _ := do(t, s, "GET", "/readyz", "")
		require.Equal(t, 200, code)
		require.Equal(t, "pending", body["seen_consistent"], "3 = 3 by count, but the sets are not compared yet")
		close(release)
		body = readyWithDiff(t, s)
		require.Equal(t, true, body["seen_consistent"])
	})
	t.Run("a failed diff leaves the equal counts pending", func(t *testing.T) {
		var calls atomic.Int32
		es := &fakeSearcher{seen: 3, seenDiff: func(context.Context, []string) (adapter.SeenDiff, error) {
			calls.Add(1)
			return adapter.SeenDiff{}, errors.New("elasticsearch unavailable")
		}}
		s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.Model.SeenDocIDs = 3 })
		s.models = NewSwapper(LoadedModel{Reader: icicle(&fakeReranker{rank: copyBeta}), Info: s.opts.Model, Seen: model}, nil, nil)
		require.Eventually(t, func() bool {
			code, body, _ := do(t, s, "GET", "/readyz", "")
			return calls.Load() >= 1 && code == 200 && body["seen_consistent"] == "pending" && body["seen_diff"] == nil
		}, 5*time.Second, 5*time.Millisecond)
	})
	t.Run("a model that does not know its seen corpus gets counts only", func(t *testing.T) {
		es := &fakeSearcher{seenDiff: func(context.Context, []string) (adapter.SeenDiff, error) {
			t.Error("SeenDiff called without a seen corpus")
			return adapter.SeenDiff{}, nil
		}}
		s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, nil)
		code, body, _ := do(t, s, "GET", "/readyz", "")
		require.Equal(t, 200, code)
		require.Nil(t, body["seen_diff"])
	})
}

// TestReadySeenDiffFollowsSwaps: with a Swapper, /readyz diffs the serving model's seen corpus. After a
// hot swap the previous model's diff is not shown (nor used for seen_consistent) while the new model's is
// being listed, and the new one compares the new corpus.
func TestReadySeenDiffFollowsSwaps(t *testing.T) {
	a, b := newFakeModel(t, "A", "a1", "a2"), newFakeModel(t, "B", "b1")
	sw := NewSwapper(a.loaded(), fakeLoader(a, b), nil)
	t.Cleanup(func() { require.NoError(t, sw.Close()) })
	release := make(chan struct{})
	var mu sync.Mutex
	var compared [][]string
	es := &fakeSearcher{seen: 2, seenDiff: func(ctx context.Context, got []string) (adapter.SeenDiff, error) {
		mu.Lock()
		compared = append(compared, got)
		mu.Unlock()
		if slices.Equal(got, b.seen) {
			select { // B's listing waits, so the test can look at /readyz in between
			case <-release:
			case <-ctx.Done():
				return adapter.SeenDiff{}, ctx.Err()
			}
			return adapter.SeenDiff{IndexSeen: 2, ModelSeen: 1, NotInModel: []string{"a2"}, NotInModelCount: 1,
				MissingInIndex: []string{"b1"}, MissingInIndexCount: 1}, nil
		}
		return adapter.SeenDiff{IndexSeen: 2, ModelSeen: 2}, nil
	}}
	s := newServer(es, sw, testOptions{Options: Options{RequestTimeout: time.Second},
		ESBudgetFraction: 0.3, MinTopScore: -1e9})

	body := readyWithDiff(t, s)
	require.Equal(t, "A", body["seen_diff"].(map[string]any)["model"])
	require.Equal(t, true, body["seen_consistent"])

	_, err := s.SwapModel("/models/B")
	require.NoError(t, err)
	require.Equal(t, b.seen, sw.SeenCorpus(), "the Swapper's seen corpus follows the swap")
	code, body, _ := do(t, s, "GET", "/readyz", "")
	require.Equal(t, 200, code)
	require.Equal(t, "B", body["model"])
	require.Nil(t, body["seen_diff"], "model A's diff says nothing about model B")
	require.Equal(t, false, body["seen_consistent"], "the counts alone: 2 seen in the index, 1 in model B")

	close(release)
	body = readyWithDiff(t, s)
	d := body["seen_diff"].(map[string]any)
	require.Equal(t, "B", d["model"])
	require.Equal(t, []any{"b1"}, d["missing_in_index_examples"])
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, [][]string{a.seen, b.seen}, compared, "one listing per model, each against its own corpus")
}
