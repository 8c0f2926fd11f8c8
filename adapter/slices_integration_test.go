//go:build integration

package adapter_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// threeShards makes a three-shard copy of a one-shard index (Elasticsearch's split API) and returns its name;
// the copy is deleted when the test ends.
func threeShards(t *testing.T, index string) string {
	t.Helper()
	u := esURL(t)
	send := func(method, path, body string) { t.Helper(); esDo(t, method, path, body) }
	split := index + "-3"
	deleteIndex(t, u, split)
	t.Cleanup(func() { deleteIndex(t, u, split) })
	send(http.MethodPut, "/"+index+"/_settings", `{"index.blocks.write": true}`)
	send(http.MethodPost, "/"+index+"/_split/"+split+"?wait_for_active_shards=1",
		`{"settings": {"index.number_of_shards": 3, "index.number_of_replicas": 0, "index.blocks.write": null}}`)
	send(http.MethodGet, "/_cluster/health/"+split+"?wait_for_status=green&timeout=60s", "")
	return split
}

// docShards reads each document's shard number and version.
func docShards(t *testing.T, index string) (shard map[string]int, version map[string]int) {
	t.Helper()
	res, err := plain.Get(esURL(t) + "/" + index + "/_search?size=1000&explain=true&version=true&_source=false")
	require.NoError(t, err)
	defer res.Body.Close()
	var body struct {
		Hits struct {
			Hits []struct {
				ID      string `json:"_id"`
				Shard   string `json:"_shard"` // "[index][2]"
				Version int    `json:"_version"`
			} `json:"hits"`
		} `json:"hits"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	shard, version = map[string]int{}, map[string]int{}
	for _, h := range body.Hits.Hits {
		i := strings.LastIndex(h.Shard, "[")
		require.Positive(t, i, "shard %q", h.Shard)
		n := 0
		for _, c := range strings.TrimSuffix(h.Shard[i+1:], "]") {
			n = n*10 + int(c-'0')
		}
		shard[h.ID], version[h.ID] = n, h.Version
	}
	return shard, version
}

// TestEnrichSlices runs `icicle enrich` as three workers over one three-shard index: two are stopped
// mid-slice (after their first page) while the third finishes, the index is force-merged (which renumbers
// documents inside their segments), and the two are run again. Every document ends with its vector, written
// exactly once (version 2: the ingest, then one update), and every worker touched only its own shard.
func TestEnrichSlices(t *testing.T) {
	plainA, one := newIndex(t)
	require.NoError(t, plainA.EnsureIndex(t.Context()))
	const n = 120
	_, err := plainA.Ingest(t.Context(), slices.Values(corpus(t, n)), adapter.IngestOptions{Refresh: true})
	require.NoError(t, err)
	index := threeShards(t, one)
	shardOf, version := docShards(t, index)
	require.Len(t, shardOf, n)
	perShard := map[int]int{}
	for id, s := range shardOf {
		perShard[s]++
		require.Equal(t, 1, version[id])
	}
	require.Len(t, perShard, 3, "the split spread the documents over three shards: %v", perShard)

	a, err := adapter.New(adapter.Options{Addresses: []string{esURL(t)}, Index: index, RequestTimeout: 30 * time.Second, VectorDims: testDims}, nil)
	require.NoError(t, err)
	defer a.Close()
	require.NoError(t, a.EnsureIndex(t.Context()))

	var mu sync.Mutex
	embeddedBy := map[string][]int{} // docid -> the slices whose runs embedded (and then wrote) it
	interrupted := errors.New("worker stopped")
	worker := func(slice, stopAfterPages int) (adapter.EnrichReport, error) {
		pages := 0
		embed := func(ctx context.Context, ds []adapter.Doc) ([][]float32, error) {
			if stopAfterPages > 0 && pages == stopAfterPages {
				return nil, interrupted
			}
			pages++
			mu.Lock()
			for _, d := range ds {
				embeddedBy[d.DocID] = append(embeddedBy[d.DocID], slice)
			}
			mu.Unlock()
			return hashEmbed(ctx, ds)
		}
		return a.Enrich(t.Context(), adapter.EnrichOptions{Embed: embed, VectorModel: "hash-v1", PageSize: 8, Slice: slice, Slices: 3})
	}

	// The first round: workers 0 and 1 stop after one page, worker 2 finishes; all at once.
	reps := make([]adapter.EnrichReport, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for s := range 3 {
		wg.Go(func() { reps[s], errs[s] = worker(s, map[int]int{0: 1, 1: 1, 2: 0}[s]) })
	}
	wg.Wait()
	require.ErrorIs(t, errs[0], interrupted)
	require.ErrorIs(t, errs[1], interrupted)
	require.NoError(t, errs[2])
	needed := 0
	for s, r := range reps {
		require.Equal(t, 3, r.Shards, "slice %d", s)
		needed += r.Needed
	}
	require.Equal(t, n, needed, "the three slices' counts add up to the index: %+v", reps)
	require.Equal(t, 8, reps[0].Written)
	require.Equal(t, reps[2].Needed, reps[2].Written)

	// A merge renumbers every document inside its shard; a slice of whole shards does not move.
	res, err := plain.Post(esURL(t)+"/"+index+"/_forcemerge?max_num_segments=1", "application/json", nil)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	// The stopped workers run again and finish.
	for _, s := range []int{0, 1} {
		rep, err := worker(s, 0)
		require.NoError(t, err, "slice %d", s)
		require.Equal(t, reps[s].Needed-8, rep.Needed, "slice %d: the rerun finds only what the first run left", s)
		require.Equal(t, rep.Needed, rep.Written, "slice %d", s)
		require.Zero(t, rep.Changed, "slice %d", s)
	}

	shardOf, version = docShards(t, index)
	require.Len(t, shardOf, n)
	require.Len(t, embeddedBy, n, "every document embedded")
	workerShard := map[int]int{} // slice -> the one shard it read
	for docid, by := range embeddedBy {
		id := adapter.DocumentID(docid)
		require.Len(t, by, 1, "%q embedded once, by slices %v", docid, by)
		require.Equal(t, 2, version[id], "%q written once after its ingest", id)
		if s, ok := workerShard[by[0]]; ok {
			require.Equal(t, s, shardOf[id], "slice %d read shards %d and %d", by[0], s, shardOf[id])
		}
		workerShard[by[0]] = shardOf[id]
	}
	require.Len(t, workerShard, 3)
	for id, src := range sources(t, index) {
		require.Equal(t, "hash-v1", src["vector_model"], id)
		require.Len(t, src["vector"], testDims, id)
	}
	rep, err := a.Enrich(t.Context(), adapter.EnrichOptions{Embed: hashEmbed, VectorModel: "hash-v1"})
	require.NoError(t, err)
	require.Zero(t, rep.Needed, "an unsliced run after the workers has nothing left")

	t.Run("more slices than shards are refused, naming the shards", func(t *testing.T) {
		_, err := a.Enrich(t.Context(), adapter.EnrichOptions{Embed: hashEmbed, VectorModel: "hash-v1", Slice: 0, Slices: 4})
		require.ErrorIs(t, err, adapter.ErrInvalidArgument)
		require.ErrorContains(t, err, "Slices 4 is more than the index's 3 primary shards")
	})

	t.Run("a slice outside the slices is refused, naming it", func(t *testing.T) {
		for _, o := range []adapter.EnrichOptions{{Slice: 3, Slices: 3}, {Slice: -1, Slices: 3}, {Slice: 1}, {Slices: -2}} {
			o.Embed, o.VectorModel = hashEmbed, "hash-v1"
			_, err := a.Enrich(t.Context(), o)
			require.ErrorIs(t, err, adapter.ErrInvalidArgument, "%+v", o)
			require.ErrorContains(t, err, "Slice")
		}
	})
}
