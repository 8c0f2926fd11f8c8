//go:build integration

package adapter_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

const testDims = 8

// hashEmbed stands in for the encoder here (the encoder itself is tested in inference/loader and
// integration/): a deterministic unit vector per title and text, so the tests check what the adapter
// stores and searches, not what a model thinks.
func hashEmbed(_ context.Context, docs []adapter.Doc) ([][]float32, error) {
	out := make([][]float32, len(docs))
	for i, d := range docs {
		out[i] = hashVector(d.Title + "\n" + d.Text)
	}
	return out, nil
}

func hashVector(s string) []float32 {
	sum := sha256.Sum256([]byte(s))
	v := make([]float32, testDims)
	var n float64
	for i := range v {
		v[i] = float32(int(sum[i])-128) / 128
		n += float64(v[i]) * float64(v[i])
	}
	for i := range v {
		v[i] /= float32(math.Sqrt(n))
	}
	return v
}

// vectorIndex is newIndex with vectors of testDims.
func vectorIndex(t *testing.T) (*adapter.Adapter, string) {
	t.Helper()
	_, index := newIndex(t)
	a, err := adapter.New(adapter.Options{Addresses: []string{esURL(t)}, Index: index, RequestTimeout: 30 * time.Second, VectorDims: testDims}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	return a, index
}

// sources reads every document's _source by _id, vectors included: 9.x leaves dense vectors out of a
// _source unless the request names them (index.mapping.exclude_source_vectors, true by default for new
// indices); _source_includes=* names them on 9.x and changes nothing on 8.x.
func sources(t *testing.T, index string) map[string]map[string]any {
	t.Helper()
	res, err := plain.Get(esURL(t) + "/" + index + "/_search?size=1000&seq_no_primary_term=true&_source_includes=*")
	require.NoError(t, err)
	defer res.Body.Close()
	var body struct {
		Hits struct {
			Hits []struct {
				ID     string         `json:"_id"`
				Source map[string]any `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	out := map[string]map[string]any{}
	for _, h := range body.Hits.Hits {
		out[h.ID] = h.Source
	}
	return out
}

func TestIngestWithVectors(t *testing.T) {
	a, index := vectorIndex(t)
	require.NoError(t, a.EnsureIndex(t.Context()))
	docs := corpus(t, 20)
	calls := 0
	embed := func(ctx context.Context, ds []adapter.Doc) ([][]float32, error) {
		calls += len(ds)
		return hashEmbed(ctx, ds)
	}
	opts := adapter.IngestOptions{Refresh: true, KeepStored: true, Embed: embed, VectorModel: "hash-v1"}
	rep, err := a.Ingest(t.Context(), slices.Values(docs), opts)
	require.NoError(t, err)
	require.Equal(t, 20, rep.Indexed)
	require.Equal(t, 20, calls)
	n, err := a.CountWithoutVector(t.Context(), "hash-v1")
	require.NoError(t, err)
	require.Zero(t, n)

	t.Run("re-ingesting the same texts embeds nothing and writes nothing", func(t *testing.T) {
		calls = 0
		rep, err := a.Ingest(t.Context(), slices.Values(docs), opts)
		require.NoError(t, err)
		require.Equal(t, adapter.IngestReport{Unchanged: 20}, rep)
		require.Zero(t, calls)
		// A write would leave the replaced version in the index (deleted, counted in BM25's statistics until
		// a merge): none is there.
		require.Zero(t, deletedDocs(t, index))
		n, err := a.CountWithoutVector(t.Context(), "hash-v1")
		require.NoError(t, err)
		require.Zero(t, n, "the stored vectors were kept")
	})
	t.Run("sent again without a vector, as POST /v1/ingest sends it, a document keeps its stored one", func(t *testing.T) {
		resent := slices.Clone(docs[1:3])
		resent[0].Summary = "a summary that changes the document" // written
		rep, err := a.Ingest(t.Context(), slices.Values(resent), adapter.IngestOptions{Refresh: true, KeepStored: true})
		require.NoError(t, err)
		require.Equal(t, adapter.IngestReport{Updated: 1, Unchanged: 1}, rep)
		src := sources(t, index)[adapter.DocumentID(resent[0].DocID)]
		require.Equal(t, "a summary that changes the document", src["summary"])
		require.InDeltaSlice(t, toFloats(hashVector(resent[0].Title+"\n"+resent[0].Text)), src["vector"], 1e-6)
		require.Equal(t, "hash-v1", src["vector_model"])
		n, err := a.CountWithoutVector(t.Context(), "hash-v1")
		require.NoError(t, err)
		require.Zero(t, n)
	})
	t.Run("a changed text is embedded again", func(t *testing.T) {
		calls = 0
		changed := slices.Clone(docs[:1])
		changed[0].Text += " More text."
		ropts := opts
		ropts.Replace = true
		_, err := a.Ingest(t.Context(), slices.Values(changed), ropts)
		require.NoError(t, err)
		require.Equal(t, 1, calls)
		src := sources(t, index)[adapter.DocumentID(changed[0].DocID)]
		require.InDeltaSlice(t, toFloats(hashVector(changed[0].Title+"\n"+changed[0].Text)), src["vector"], 1e-6)
	})
	t.Run("the exact cosine and the kNN agree with the stored vectors", func(t *testing.T) {
		q := hashVector(docs[3].Title + "\n" + docs[3].Text) // the query is document 3's own vector
		ids := []string{adapter.DocumentID(docs[3].DocID), adapter.DocumentID(docs[4].DocID), "no-such-id"}
		res, err := a.Dense(t.Context(), q, []adapter.DenseQuery{{IDs: ids}, {K: 3}, {K: 3, OnlyNew: true}})
		require.NoError(t, err)
		require.Len(t, res, 3)
		require.Len(t, res[0], 2, "an unknown id is absent")
		require.Equal(t, ids[0], res[0][0].ID)
		require.InDelta(t, 1.0, res[0][0].Dense, 1e-5, "a vector's cosine with itself")
		var want4 float64
		for i, x := range hashVector(docs[4].Title + "\n" + docs[4].Text) {
			want4 += float64(x) * float64(q[i])
		}
		require.InDelta(t, want4, res[0][1].Dense, 1e-5)
		require.Equal(t, docs[3].DocID, res[1][0].DocID, "the kNN's nearest is the document itself")
		require.Len(t, res[1], 3)
	})
	t.Run("a vector of the wrong length fails its batch, retryable", func(t *testing.T) {
		bad := func(context.Context, []adapter.Doc) ([][]float32, error) { return [][]float32{{1, 0}}, nil }
		other := corpus(t, 21)[20:]
		rep, err := a.Ingest(t.Context(), slices.Values(other), adapter.IngestOptions{Refresh: true, KeepStored: true, Embed: bad, VectorModel: "hash-v1"})
		require.Error(t, err)
		require.ErrorContains(t, err, "dims")
		require.Len(t, rep.Failed, 1)
		require.True(t, rep.Failed[0].Retryable)
	})
}

// TestBackfillResumes (Enrich with vectors) gives vectors to an index written without them, stopping the first run halfway (as
// an interrupted `icicle enrich` would): the second run writes the rest, each document is written once in
// all, and nothing but the vector fields changed.
func TestBackfillResumes(t *testing.T) {
	plainA, index := newIndex(t)
	require.NoError(t, plainA.EnsureIndex(t.Context()))
	docs := corpus(t, 40)
	_, err := plainA.Ingest(t.Context(), slices.Values(docs), adapter.IngestOptions{Refresh: true})
	require.NoError(t, err)
	before := sources(t, index)

	a, err := adapter.New(adapter.Options{Addresses: []string{esURL(t)}, Index: index, VectorDims: testDims}, nil)
	require.NoError(t, err)
	defer a.Close()
	require.NoError(t, a.EnsureIndex(t.Context()), "the vector fields are added to an index that has none")

	interrupted := errors.New("interrupted")
	embedded := map[string]int{}
	pages := 0
	stopAfterTwo := func(ctx context.Context, ds []adapter.Doc) ([][]float32, error) {
		if pages == 2 {
			return nil, interrupted
		}
		pages++
		for _, d := range ds {
			embedded[d.DocID]++
		}
		return hashEmbed(ctx, ds)
	}
	rep, err := a.Enrich(t.Context(), adapter.EnrichOptions{Embed: stopAfterTwo, VectorModel: "hash-v1", PageSize: 8})
	require.ErrorIs(t, err, interrupted)
	require.Equal(t, 40, rep.Needed)
	require.Equal(t, 16, rep.Written)

	res, err := plain.Do(mustRequest(t, http.MethodPost, esURL(t)+"/"+index+"/_refresh"))
	require.NoError(t, err)
	res.Body.Close()
	count := func(ctx context.Context, ds []adapter.Doc) ([][]float32, error) {
		for _, d := range ds {
			embedded[d.DocID]++
		}
		return hashEmbed(ctx, ds)
	}
	rep, err = a.Enrich(t.Context(), adapter.EnrichOptions{Embed: count, VectorModel: "hash-v1", PageSize: 8})
	require.NoError(t, err)
	require.Equal(t, 24, rep.Needed)
	require.Equal(t, 24, rep.Written)
	require.Len(t, embedded, 40)
	for d, n := range embedded {
		require.Equal(t, 1, n, "%q embedded once over both runs", d)
	}
	after := sources(t, index)
	require.Len(t, after, 40)
	for id, src := range after {
		require.Equal(t, "hash-v1", src["vector_model"])
		require.Len(t, src["vector"], testDims)
		delete(src, "vector")
		delete(src, "vector_model")
		require.Equal(t, before[id], src, "only the vector fields changed")
	}
	rep, err = a.Enrich(t.Context(), adapter.EnrichOptions{Embed: count, VectorModel: "hash-v1"})
	require.NoError(t, err)
	require.Zero(t, rep.Needed, "a third run has nothing to do")
}

func toFloats(v []float32) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func mustRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	return req
}

// deletedDocs is the index's count of deleted documents still in its segments (replaced versions).
func deletedDocs(t *testing.T, index string) int {
	t.Helper()
	res, err := plain.Get(esURL(t) + "/" + index + "/_stats/docs")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	var body struct {
		All struct {
			Primaries struct {
				Docs struct {
					Deleted int `json:"deleted"`
				} `json:"docs"`
			} `json:"primaries"`
		} `json:"_all"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	return body.All.Primaries.Docs.Deleted
}

// vectorIndexOptions reads the index_options type of the index's vector field from its mapping.
func vectorIndexOptions(t *testing.T, index string) string {
	t.Helper()
	res, err := plain.Get(esURL(t) + "/" + index + "/_mapping")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	var body map[string]struct {
		Mappings struct {
			Properties map[string]struct {
				IndexOptions struct {
					Type string `json:"type"`
				} `json:"index_options"`
			} `json:"properties"`
		} `json:"mappings"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	return body[index].Mappings.Properties[adapter.VectorField].IndexOptions.Type
}

// TestVectorIndexOptionsPinned: the nodes' defaults for a 384-dim float vector differ (8.14: int8_hnsw;
// 9.1+: bbq_hnsw), so the sidecar pins plain hnsw, under which kNN scores are the exact cosines on both.
func TestVectorIndexOptionsPinned(t *testing.T) {
	const dims = 384 // the first stage's encoder (bge-small)
	_, index := newIndex(t)
	ctx := t.Context()
	opts := adapter.Options{Addresses: []string{esURL(t)}, Index: index, VectorDims: dims,
		RequestTimeout: 30 * time.Second}
	a, err := adapter.New(opts, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	info, err := a.Check(ctx)
	require.ErrorIs(t, err, adapter.ErrIndexMissing)
	require.NoError(t, a.EnsureIndex(ctx))
	require.Equal(t, "hnsw", vectorIndexOptions(t, index), "Elasticsearch %s", info.Version)

	// Unit vectors whose cosines with the query are known: doc i has cos (i+1)/10 with e0.
	unit := func(c float64, axis int) []float32 {
		v := make([]float32, dims)
		v[0], v[axis] = float32(c), float32(math.Sqrt(1-c*c))
		return v
	}
	docs := make([]adapter.Doc, 8)
	for i := range docs {
		docs[i] = adapter.Doc{DocID: fmt.Sprint("d", i), Title: fmt.Sprint("doc ", i), Text: "text",
			Vector: unit(float64(i+1)/10, i+1)}
	}
	_, err = a.Ingest(ctx, slices.Values(docs), adapter.IngestOptions{Refresh: true, VectorModel: "unit"})
	require.NoError(t, err)
	q := unit(1, 1) // e0
	ids := []string{adapter.DocumentID("d0"), adapter.DocumentID("d4")}
	res, err := a.Dense(ctx, q, []adapter.DenseQuery{{K: 3}, {IDs: ids}})
	require.NoError(t, err)
	require.Len(t, res[0], 3)
	for i, h := range res[0] {
		require.Equal(t, adapter.DocumentID(fmt.Sprint("d", 7-i)), h.ID)
		require.InDelta(t, float64(8-i)/10, h.Dense, 1e-6, "kNN hit %d on Elasticsearch %s", i, info.Version)
	}
	exact := map[string]float64{}
	for _, h := range res[1] {
		exact[h.ID] = h.Dense
	}
	require.InDelta(t, 0.1, exact[adapter.DocumentID("d0")], 1e-6)
	require.InDelta(t, 0.5, exact[adapter.DocumentID("d4")], 1e-6)

	// The same fields mapped without index_options get the node's default, which the sidecar refuses in
	// its own index (a team's index is only warned about: the sidecar does not own its mapping).
	other := index + "-default"
	deleteIndex(t, esURL(t), other)
	t.Cleanup(func() { deleteIndex(t, esURL(t), other) })
	req, err := http.NewRequest(http.MethodPut, esURL(t)+"/"+other, strings.NewReader(`{"mappings":{"properties":{
		"docid":{"type":"keyword"},"title":{"type":"text","fields":{"keyword":{"type":"keyword"}}},
		"text":{"type":"text"},"summary":{"type":"text"},"seen":{"type":"boolean"},"ingested_at":{"type":"date"},
		"vector_model":{"type":"keyword"},"vector":{"type":"dense_vector","dims":384,"similarity":"dot_product"}}}}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	put, err := plain.Do(req)
	require.NoError(t, err)
	put.Body.Close()
	require.Equal(t, http.StatusOK, put.StatusCode)
	def := vectorIndexOptions(t, other)
	if strings.HasPrefix(info.Version, "8.") {
		require.Equal(t, "int8_hnsw", def, "8.14's default for float vectors")
	} else {
		require.Equal(t, "bbq_hnsw", def, "9.1+'s default for 384 dims and more")
	}
	opts.Index = other
	b, err := adapter.New(opts, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	err = b.EnsureIndex(ctx)
	require.ErrorIs(t, err, adapter.ErrMappingMismatch)
	require.ErrorContains(t, err, `field "vector": index_options type is "`+def+`", want "hnsw"`)

	// Configured for that type (first_stage.vector_index), the same index is the sidecar's; and a new index
	// made under a quantised type gets it.
	opts.VectorIndex = def
	c, err := adapter.New(opts, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.EnsureIndex(ctx))
	opts.Index, opts.VectorIndex = index+"-int8", "int8_hnsw"
	deleteIndex(t, esURL(t), opts.Index)
	t.Cleanup(func() { deleteIndex(t, esURL(t), opts.Index) })
	d, err := adapter.New(opts, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	require.NoError(t, d.EnsureIndex(ctx))
	require.Equal(t, "int8_hnsw", vectorIndexOptions(t, opts.Index))
}

// TestDenseWithoutVectorField: over an index that does not map the vector field, 8.x refuses the kNN search
// and 9.x answers it with no hits; Dense fails on both, so the first stage answers BM25 with its reason.
func TestDenseWithoutVectorField(t *testing.T) {
	plainIdx, index := newIndex(t)
	ctx := t.Context()
	require.NoError(t, plainIdx.EnsureIndex(ctx))
	docs := []adapter.Doc{{DocID: "a", Title: "A", Text: "alpha"}, {DocID: "b", Title: "B", Text: "beta"}}
	_, err := plainIdx.Ingest(ctx, slices.Values(docs), adapter.IngestOptions{Refresh: true})
	require.NoError(t, err)
	// An adapter that expects vectors over it, never having run EnsureIndex (which would add the fields).
	a, err := adapter.New(adapter.Options{Addresses: []string{esURL(t)}, Index: index, VectorDims: testDims,
		RequestTimeout: 30 * time.Second}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	info, err := a.Check(ctx)
	require.Error(t, err) // the mapping lacks the vector fields
	for _, q := range []adapter.DenseQuery{{K: 3}, {IDs: []string{adapter.DocumentID("a")}}} {
		_, err := a.Dense(ctx, hashVector("alpha"), []adapter.DenseQuery{q})
		require.Error(t, err, "Elasticsearch %s, %+v", info.Version, q)
		require.ErrorContains(t, err, "vector")
		if !strings.HasPrefix(info.Version, "8.") {
			require.ErrorIs(t, err, adapter.ErrMappingMismatch)
		}
	}
}
