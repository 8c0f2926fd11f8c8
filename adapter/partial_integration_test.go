//go:build integration

package adapter_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// esDo sends one request to the test node and returns its decoded answer; a status of 300 or more fails the test.
func esDo(t *testing.T, method, path, body string) map[string]any {
	t.Helper()
	req, err := http.NewRequest(method, esURL(t)+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	res, err := plain.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	require.Less(t, res.StatusCode, 300, "%s %s: %v", method, path, out)
	return out
}

// TestSearchRefusesPartialResults: when a shard of the index has no copy that can answer (here an index behind
// the team's alias whose only shard cannot be allocated, as after losing a node that held a shard without a
// replica), Elasticsearch by default answers from the other shards and says so only in _shards.failed. The
// sidecar's searches refuse that answer: they fail as unavailable rather than rank part of the index as if it
// were all of it.
func TestSearchRefusesPartialResults(t *testing.T) {
	a, index := newIndex(t)
	require.NoError(t, a.EnsureIndex(t.Context()))
	docs := corpus(t, 20)
	_, err := a.Ingest(t.Context(), slices.Values(docs), adapter.IngestOptions{Refresh: true})
	require.NoError(t, err)

	// The second index has the same mapping and one shard that no node may hold: it stays unassigned (red).
	mapping := esDo(t, http.MethodGet, "/"+index+"/_mapping", "")[index].(map[string]any)["mappings"]
	red, alias := index+"-red", index+"-all"
	deleteIndex(t, esURL(t), red)
	t.Cleanup(func() { deleteIndex(t, esURL(t), red) })
	body, err := json.Marshal(map[string]any{"mappings": mapping, "settings": map[string]any{
		"index.number_of_shards": 1, "index.number_of_replicas": 0, "index.routing.allocation.require._name": "no-such-node"}})
	require.NoError(t, err)
	esDo(t, http.MethodPut, "/"+red+"?wait_for_active_shards=0", string(body))
	esDo(t, http.MethodPost, "/_aliases", `{"actions": [{"add": {"index": "`+index+`", "alias": "`+alias+`"}}, {"add": {"index": "`+red+`", "alias": "`+alias+`"}}]}`)

	// What Elasticsearch answers by default: 200, the healthy index's hits, one shard failed.
	q := docs[0].Title
	partial := esDo(t, http.MethodPost, "/"+alias+"/_search", `{"query": {"match": {"title": `+jsonString(t, q)+`}}}`)
	require.EqualValues(t, 1, partial["_shards"].(map[string]any)["failed"], "the scenario is a partial answer: %v", partial["_shards"])
	require.NotEmpty(t, partial["hits"].(map[string]any)["hits"])

	b, err := adapter.New(adapter.Options{Addresses: []string{esURL(t)}, Index: alias, RequestTimeout: 2 * time.Second}, nil)
	require.NoError(t, err)
	defer b.Close()
	for name, search := range map[string]func() error{
		"SearchNew":  func() error { _, err := b.SearchNew(t.Context(), q, 10); return err },
		"SearchAll":  func() error { _, err := b.SearchAll(t.Context(), q, 10); return err },
		"SearchLean": func() error { _, err := b.SearchLean(t.Context(), q, 10, false); return err },
	} {
		err := search()
		require.ErrorIs(t, err, adapter.ErrUnavailable, "%s: a ranking from part of the index is refused", name)
		require.Contains(t, err.Error(), "missing shards", name)
	}
	// The healthy index alone still answers.
	hits, err := a.SearchAll(t.Context(), q, 10)
	require.NoError(t, err)
	require.Equal(t, docs[0].DocID, hits[0].DocID)
}

func jsonString(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	require.NoError(t, err)
	return string(b)
}
