//go:build integration

package adapter_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// Snippets on a real node: the highlighter's best sentence for the query, the body's start when nothing
// matches, the stored summary kept for a hit whose document is gone, and bad arguments named.
func TestIntegrationSnippets(t *testing.T) {
	a, _ := newIndex(t)
	ctx := t.Context()
	require.NoError(t, a.EnsureIndex(ctx))
	docs := []adapter.Doc{
		{DocID: "Lighthouse", Title: "Lighthouse", Summary: "A lighthouse is a tower.",
			Text: "A lighthouse is a tower that emits light. Keepers once lived beside the lamp. " +
				"The tallest lighthouse in the world stands in Jeddah at 133 metres."},
		{DocID: "Harbour", Title: "Harbour", Summary: "A harbour is sheltered water.",
			Text: "A harbour is a sheltered body of water where ships may be docked. Breakwaters protect it."},
	}
	rep, err := a.Ingest(ctx, slices.Values(docs), adapter.IngestOptions{Refresh: true})
	require.NoError(t, err)
	require.Equal(t, 2, rep.Indexed)

	hits := []adapter.Hit{
		{ID: adapter.DocumentID("Lighthouse"), DocID: "Lighthouse", Summary: "A lighthouse is a tower."},
		{ID: adapter.DocumentID("Harbour"), DocID: "Harbour", Summary: "A harbour is sheltered water."},
		{ID: adapter.DocumentID("Gone"), DocID: "Gone", Summary: "stored summary of a deleted document"},
	}
	require.NoError(t, a.Snippets(ctx, "tallest lighthouse", hits, 80))
	// the third sentence holds "tallest"; the first and the summary hold only "lighthouse"
	require.Equal(t, "The tallest lighthouse in the world stands in Jeddah at 133 metres.", hits[0].Summary)
	// nothing of the query in the body: its first sentence, cut near 80 characters
	require.True(t, strings.HasPrefix(hits[1].Summary, "A harbour is a sheltered body of water"), hits[1].Summary)
	require.LessOrEqual(t, len(hits[1].Summary), 100)
	require.Equal(t, "stored summary of a deleted document", hits[2].Summary)

	require.ErrorIs(t, a.Snippets(ctx, "  ", hits, 80), adapter.ErrInvalidArgument)
	require.ErrorIs(t, a.Snippets(ctx, "lighthouse", hits, 0), adapter.ErrInvalidArgument)
	require.NoError(t, a.Snippets(ctx, "lighthouse", nil, 80))
}
