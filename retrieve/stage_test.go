package retrieve

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// fakeSearcher is a Searcher whose answers the test sets; it records the dense queries it was asked.
type fakeSearcher struct {
	all, new  []adapter.Hit
	newErr    error
	dense     map[string]float64 // cosine by _id
	denseErr  error
	denseAsks [][]adapter.DenseQuery
	leanAsks  []leanAsk
	sourced   int
}

// leanAsk is one SearchLean call's depth and filter.
type leanAsk struct {
	k       int
	onlyNew bool
}

func (f *fakeSearcher) SearchAll(context.Context, string, int) ([]adapter.Hit, error) {
	return f.all, nil
}
func (f *fakeSearcher) SearchNew(context.Context, string, int) ([]adapter.Hit, error) {
	return f.new, f.newErr
}

// SearchLean returns the first k of all, or of new.
func (f *fakeSearcher) SearchLean(_ context.Context, _ string, k int, onlyNew bool) ([]adapter.Hit, error) {
	f.leanAsks = append(f.leanAsks, leanAsk{k, onlyNew})
	if onlyNew {
		return f.new[:min(k, len(f.new))], f.newErr
	}
	return f.all[:min(k, len(f.all))], nil
}

// Sources sets each hit's title to "title of " + its docid.
func (f *fakeSearcher) Sources(_ context.Context, hits []adapter.Hit) error {
	f.sourced += len(hits)
	for i := range hits {
		hits[i].Title = "title of " + hits[i].DocID
	}
	return nil
}

func (f *fakeSearcher) Dense(_ context.Context, _ []float32, qs []adapter.DenseQuery) ([][]adapter.Hit, error) {
	f.denseAsks = append(f.denseAsks, qs)
	if f.denseErr != nil {
		return nil, f.denseErr
	}
	out := make([][]adapter.Hit, len(qs))
	for i, q := range qs {
		if len(q.IDs) > 0 {
			for _, id := range q.IDs {
				if d, ok := f.dense[id]; ok {
					out[i] = append(out[i], adapter.Hit{ID: id, Dense: d, HasDense: true})
				}
			}
			continue
		}
		out[i] = []adapter.Hit{{ID: "k", DocID: "dk", Dense: 0.95, HasDense: true}}
	}
	return out, nil
}

// fakeEmbedder embeds every query as the same vector, or fails.
type fakeEmbedder struct{ err error }

func (f fakeEmbedder) Query(context.Context, string) ([]float32, error) {
	return []float32{1, 0}, f.err
}
func (fakeEmbedder) Name() string { return "fake-encoder" }

func TestStageSearch(t *testing.T) {
	// BM25 over all documents: a (seen), b, c; the kNN adds k. Cosines order k, b, c, a.
	newSearcher := func() *fakeSearcher {
		all := bm25Hits("a", "b", "c")
		all[0].Seen = true
		return &fakeSearcher{all: all, new: bm25Hits("b", "c"),
			dense: map[string]float64{"a": 0.1, "b": 0.9, "c": 0.5}}
	}
	p := Params{Method: MethodLinear, DenseWeight: 1, Depth: 100, KNN: 5}
	t.Run("hybrid fuses BM25, kNN and exact cosines in one multi-search", func(t *testing.T) {
		es := newSearcher()
		st, err := New(es, fakeEmbedder{}, p, nil)
		require.NoError(t, err)
		l, err := st.Search(t.Context(), Request{Query: "q", NewK: 2, Size: 1})
		require.NoError(t, err)
		require.Equal(t, BaselineHybrid, l.Baseline)
		require.Equal(t, "fake-encoder", l.Encoder)
		require.Equal(t, []string{"k", "b", "c", "a"}, order(l.All))
		require.Equal(t, []string{"k", "b"}, order(l.New), "the new documents of the fused ranking")
		require.Equal(t, [][]adapter.DenseQuery{{{IDs: []string{"a", "b", "c"}}, {K: 5}}}, es.denseAsks)
		require.Equal(t, "title of dk", l.All[0].Title, "the shown results have their sources")
		require.Empty(t, l.All[1].Title, "the rest need none")
		require.Equal(t, "title of db", l.New[1].Title)
		require.Equal(t, 3, es.sourced)
	})
	t.Run("too few new documents among all: new ones ranked on their own", func(t *testing.T) {
		es := newSearcher()
		st, _ := New(es, fakeEmbedder{}, p, nil)
		l, err := st.Search(t.Context(), Request{Query: "q", NewK: 5})
		require.NoError(t, err)
		require.Equal(t, []string{"k", "b", "c"}, order(l.New))
		require.Len(t, es.denseAsks, 2)
		require.Equal(t, []adapter.DenseQuery{{IDs: []string{"b", "c"}}, {K: 5, OnlyNew: true}}, es.denseAsks[1])
	})
	t.Run("more than half of depth new: one search twice as deep holds both lists, one multi-search", func(t *testing.T) {
		// Depth 2: NewK 2 asks for more than half of BM25's top 2; BM25 over all goes 4 deep and its first 2
		// new documents are BM25's ranking over new ones.
		deep := Params{Method: MethodLinear, DenseWeight: 1, Depth: 2, KNN: 5}
		es := newSearcher()
		st, _ := New(es, fakeEmbedder{}, deep, nil)
		l, err := st.Search(t.Context(), Request{Query: "q", NewK: 3})
		require.NoError(t, err)
		require.Equal(t, []leanAsk{{4, false}}, es.leanAsks, "one BM25 search, twice as deep")
		require.Equal(t, []string{"k", "b", "a"}, order(l.All), "all: BM25's top 2 (a, b) and the kNN")
		require.Equal(t, []string{"k", "b", "c"}, order(l.New), "new: b and c fused with the kNN over new documents")
		require.Equal(t, 1, l.New[1].BM25Rank, "ranked among the new documents")
		require.Equal(t, [][]adapter.DenseQuery{{{IDs: []string{"a", "b", "c"}}, {K: 5}, {K: 5, OnlyNew: true}}},
			es.denseAsks, "one cosine lookup of both lists' hits and both kNN in one call")
		require.Equal(t, "title of db", l.New[1].Title)

		// A corpus mostly seen: the 4 hold one new document, so BM25 over new ones follows; its failure fails
		// the request's new list only.
		mostlySeen := func() *fakeSearcher {
			es := newSearcher()
			es.all = bm25Hits("a", "b", "c", "d")
			es.all[0].Seen, es.all[1].Seen, es.all[3].Seen = true, true, true
			es.new = bm25Hits("c", "e")
			es.dense["e"] = 0.7
			return es
		}
		es = mostlySeen()
		st, _ = New(es, fakeEmbedder{}, deep, nil)
		l, err = st.Search(t.Context(), Request{Query: "q", NewK: 2})
		require.NoError(t, err)
		require.Equal(t, []leanAsk{{4, false}, {2, true}}, es.leanAsks)
		require.Equal(t, []string{"k", "e"}, order(l.New))

		es = mostlySeen()
		es.newErr = errors.New("shard failure")
		st, _ = New(es, fakeEmbedder{}, deep, nil)
		l, err = st.Search(t.Context(), Request{Query: "q", NewK: 2})
		require.True(t, IsNewSearch(err))
		require.Equal(t, []string{"k", "b", "a"}, order(l.All))
		require.Empty(t, l.New)
		require.Equal(t, []adapter.DenseQuery{{IDs: []string{"a", "b"}}, {K: 5}}, es.denseAsks[0], "no new list to fuse")

		// At most half of the depth: one search of the depth, the new documents found among all.
		es = newSearcher()
		st, _ = New(es, fakeEmbedder{}, deep, nil)
		l, err = st.Search(t.Context(), Request{Query: "q", NewK: 1})
		require.NoError(t, err)
		require.Equal(t, []leanAsk{{2, false}}, es.leanAsks)
		require.Equal(t, []string{"k"}, order(l.New))
	})
	t.Run("an encoder failure answers BM25 with its reason", func(t *testing.T) {
		es := newSearcher()
		st, _ := New(es, fakeEmbedder{err: errors.New("onnx: boom")}, p, nil)
		l, err := st.Search(t.Context(), Request{Query: "q", NewK: 2})
		require.NoError(t, err)
		require.Equal(t, BaselineBM25, l.Baseline)
		require.Equal(t, ReasonEncoderError, l.Reason)
		require.Equal(t, []string{"a", "b", "c"}, order(l.All))
		require.Equal(t, []string{"b", "c"}, order(l.New))
		require.Equal(t, "title of db", l.New[0].Title)
		require.Empty(t, es.denseAsks)
	})
	t.Run("a dense search failure answers BM25 with its reason", func(t *testing.T) {
		es := newSearcher()
		es.denseErr = errors.New("no such field [vector]")
		st, _ := New(es, fakeEmbedder{}, p, nil)
		l, err := st.Search(t.Context(), Request{Query: "q", NewK: 2})
		require.NoError(t, err)
		require.Equal(t, BaselineBM25, l.Baseline)
		require.Equal(t, ReasonDenseUnavailable, l.Reason)
		require.Equal(t, []string{"a", "b", "c"}, order(l.All))
	})
	t.Run("without an encoder BM25 answers, with no reason", func(t *testing.T) {
		es := newSearcher()
		st, _ := New(es, nil, p, nil)
		l, err := st.Search(t.Context(), Request{Query: "q", NewK: 2})
		require.NoError(t, err)
		require.Equal(t, BaselineBM25, l.Baseline)
		require.Empty(t, l.Reason)
		require.Equal(t, []string{"b", "c"}, order(l.New), "BM25 over new documents")
		require.Zero(t, es.sourced, "BM25's own searches carry their sources")
	})
	t.Run("the new search failing still answers all documents", func(t *testing.T) {
		es := newSearcher()
		es.newErr = errors.New("shard failure")
		st, _ := New(es, fakeEmbedder{}, p, nil)
		l, err := st.Search(t.Context(), Request{Query: "q", NewK: 5})
		require.True(t, IsNewSearch(err))
		require.Equal(t, []string{"k", "b", "c", "a"}, order(l.All))
		require.Empty(t, l.New)
	})
}

func TestStageRescore(t *testing.T) {
	hits := []adapter.Hit{{ID: "a", DocID: "da", Score: 7}, {ID: "b", DocID: "db", Score: 3}, {DocID: "no-id", Score: 1}}
	p := Params{Method: MethodLinear, DenseWeight: 1, Depth: 10}
	t.Run("the caller's order re-scored by the cosine", func(t *testing.T) {
		es := &fakeSearcher{dense: map[string]float64{"a": 0.2, "b": 0.7}}
		st, _ := New(es, fakeEmbedder{}, p, nil)
		got, info, err := st.Rescore(t.Context(), "q", hits)
		require.NoError(t, err)
		require.Equal(t, BaselineHybrid, info.Baseline)
		require.Equal(t, []string{"b", "a", ""}, order(got))
		require.Equal(t, 2, got[0].BM25Rank, "the caller's rank stands for BM25's")
		require.InDelta(t, 3.0, got[0].BM25, 1e-12)
		require.Equal(t, []adapter.DenseQuery{{IDs: []string{"a", "b"}}}, es.denseAsks[0])
	})
	t.Run("without an encoder the order is kept, ranks set", func(t *testing.T) {
		st, _ := New(&fakeSearcher{}, nil, p, nil)
		got, info, err := st.Rescore(t.Context(), "q", hits)
		require.NoError(t, err)
		require.Equal(t, BaselineBM25, info.Baseline)
		require.Equal(t, []string{"a", "b", ""}, order(got))
		require.Equal(t, []int{1, 2, 3}, []int{got[0].BM25Rank, got[1].BM25Rank, got[2].BM25Rank})
	})
	t.Run("a dense failure keeps the order and says why", func(t *testing.T) {
		st, _ := New(&fakeSearcher{denseErr: errors.New("down")}, fakeEmbedder{}, p, nil)
		got, info, err := st.Rescore(t.Context(), "q", hits)
		require.NoError(t, err)
		require.Equal(t, ReasonDenseUnavailable, info.Reason)
		require.Equal(t, []string{"a", "b", ""}, order(got))
	})
	t.Run("a cancelled client is an error, not a fallback", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		st, _ := New(&fakeSearcher{}, fakeEmbedder{err: context.Canceled}, p, nil)
		_, _, err := st.Rescore(ctx, "q", hits)
		require.ErrorIs(t, err, context.Canceled)
	})
}
