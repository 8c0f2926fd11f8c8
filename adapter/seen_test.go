package adapter_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// Routes of a point-in-time listing; testdata/pit_*.json and seen_page*.json were captured from a real
// 8.14 node listing three seen documents in pages of two.
const (
	routePITOpen  = "POST /icicle-docs/_pit"
	routePITClose = "DELETE /_pit"
	routePITPage  = "POST /_search"
)

func seenRoutes() map[string][]reply {
	return map[string][]reply{
		routePITOpen:  {{status: 200, file: "pit_open.json"}},
		routePITPage:  {{status: 200, file: "seen_page1.json"}, {status: 200, file: "seen_page2.json"}},
		routePITClose: {{status: 200, file: "pit_close.json"}},
	}
}

func TestListSeen(t *testing.T) {
	a, f := newFakeAdapter(t, seenRoutes())
	a.SetSeenPageSize(2)
	var pages [][]string
	require.NoError(t, a.ListSeen(t.Context(), func(p []string) error { pages = append(pages, p); return nil }))
	require.Equal(t, [][]string{{"Green Bay Packers", "Super Bowl XV"}, {"Wild card (sports)"}}, pages)

	open := f.requests("POST", "/icicle-docs/_pit")
	require.Len(t, open, 1)
	require.Equal(t, "keep_alive=1m", open[0].Query)
	reqs := f.requests("POST", "/_search")
	require.Len(t, reqs, 2, "a short page ends the listing")
	golden(t, "seen_page1.request.json", reqs[0].Body)
	golden(t, "seen_page2.request.json", reqs[1].Body) // search_after = the last sort values of page 1
	closed := f.requests("DELETE", "/_pit")
	require.Len(t, closed, 1, "the point in time is closed")
	var pit, closeBody struct{ ID string }
	require.NoError(t, json.Unmarshal(readTestdata(t, "seen_page2.json"), &struct {
		PitID *string `json:"pit_id"`
	}{&pit.ID}))
	require.NoError(t, json.Unmarshal(closed[0].Body, &closeBody))
	require.Equal(t, pit.ID, closeBody.ID, "closes the latest point-in-time id")
}

func TestListSeenErrors(t *testing.T) {
	t.Run("fn's error stops the listing and the point in time is still closed", func(t *testing.T) {
		a, f := newFakeAdapter(t, seenRoutes())
		a.SetSeenPageSize(2)
		stop := errors.New("stop")
		err := a.ListSeen(t.Context(), func([]string) error { return stop })
		require.ErrorIs(t, err, stop)
		require.Len(t, f.requests("POST", "/_search"), 1)
		require.Len(t, f.requests("DELETE", "/_pit"), 1)
	})
	t.Run("a failed shard is an error, not a shorter list", func(t *testing.T) {
		routes := seenRoutes()
		routes[routePITPage] = []reply{{status: 200, file: "seen_page_shard_failed.json"}}
		a, f := newFakeAdapter(t, routes)
		err := a.ListSeen(t.Context(), func([]string) error { return nil })
		require.ErrorIs(t, err, adapter.ErrUnavailable)
		require.Len(t, f.requests("DELETE", "/_pit"), 1)
	})
	t.Run("missing index", func(t *testing.T) {
		a, _ := newFakeAdapter(t, map[string][]reply{routePITOpen: {{status: 404, file: "index_not_found.json"}}})
		err := a.ListSeen(t.Context(), func([]string) error { return nil })
		require.ErrorIs(t, err, adapter.ErrIndexMissing)
	})
}

func TestSeenDiff(t *testing.T) {
	a, _ := newFakeAdapter(t, seenRoutes())
	a.SetSeenPageSize(2)
	// The index has Green Bay Packers, Super Bowl XV, Wild card (sports) marked seen.
	model := []string{"Super Bowl XV", "Wild card (sports)", "Zulu", "Alpha", "Alpha"}
	d, err := a.SeenDiff(t.Context(), model)
	require.NoError(t, err)
	require.Equal(t, adapter.SeenDiff{
		IndexSeen: 3, ModelSeen: 4,
		MissingInIndex: []string{"Alpha", "Zulu"}, MissingInIndexCount: 2,
		NotInModel: []string{"Green Bay Packers"}, NotInModelCount: 1,
	}, d)
	require.False(t, d.Consistent())

	a, _ = newFakeAdapter(t, seenRoutes())
	a.SetSeenPageSize(2)
	d, err = a.SeenDiff(t.Context(), []string{"Wild card (sports)", "Green Bay Packers", "Super Bowl XV"})
	require.NoError(t, err)
	require.True(t, d.Consistent(), "%+v", d)
	require.Equal(t, 3, d.IndexSeen)
}

func TestSeenDiffCapsExamplesNotCounts(t *testing.T) {
	a, _ := newFakeAdapter(t, seenRoutes())
	a.SetSeenPageSize(2)
	var model []string
	for i := range 100 {
		model = append(model, "doc "+string(rune('A'+i%26))+string(rune('a'+i/26)))
	}
	d, err := a.SeenDiff(t.Context(), model)
	require.NoError(t, err)
	require.Equal(t, 100, d.MissingInIndexCount)
	require.Len(t, d.MissingInIndex, adapter.SeenDiffExamples)
	require.True(t, slices.IsSorted(d.MissingInIndex))
	require.Equal(t, 3, d.NotInModelCount)
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}
