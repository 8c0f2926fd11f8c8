package adapter_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// TestIngestKeepStored (against the fake node of fixture_test.go, with a multi-get and a bulk answer in
// the real node's layout): a document not stored is created; a stored one with the same text is written
// over the version read (if_seq_no/if_primary_term) and keeps its seen flag; a stored one with a different
// text (another document with the same title) is not sent and is failed, not retryable.
func TestIngestKeepStored(t *testing.T) {
	docs := []adapter.Doc{
		{DocID: "Alpha", Title: "Alpha", Text: "alpha text", KeepSeen: true},
		{DocID: "Beta", Title: "Beta", Text: "beta text", KeepSeen: true},
		{DocID: "Gamma", Title: "Gamma", Text: "a new passage under the same title", KeepSeen: true},
	}
	a, f := newFakeAdapter(t, map[string][]reply{routeMapping: okMapping,
		routeMget: {{status: 200, file: "mget_keep_stored.json"}}, routeBulk: {{status: 200, file: "bulk_keep_stored.json"}}})
	rep, err := a.Ingest(t.Context(), slices.Values(docs), adapter.IngestOptions{Workers: 1, KeepStored: true})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Indexed)
	require.Equal(t, 1, rep.Updated)
	require.Len(t, rep.Failed, 1)
	require.Equal(t, "Gamma", rep.Failed[0].DocID)
	require.True(t, strings.HasPrefix(rep.Failed[0].Reason, adapter.ReasonDocIDTaken), rep.Failed[0].Reason)
	require.False(t, rep.Failed[0].Retryable)

	mgets := f.requests("POST", "/icicle-docs/_mget")
	require.Len(t, mgets, 1, "one multi-get for the batch")
	bulks := f.requests("POST", "/icicle-docs/_bulk")
	require.Len(t, bulks, 1)
	lines := bytes.Split(bytes.TrimSpace(bulks[0].Body), []byte("\n"))
	require.Len(t, lines, 4, "two documents sent, Gamma not: %s", bulks[0].Body)
	var meta0, meta1 map[string]map[string]any
	require.NoError(t, json.Unmarshal(lines[0], &meta0))
	require.NoError(t, json.Unmarshal(lines[2], &meta1))
	require.Contains(t, meta0, "create", "a document not stored is created")
	require.Equal(t, adapter.DocumentID("Alpha"), meta0["create"]["_id"])
	require.Contains(t, meta1, "index")
	require.EqualValues(t, 5, meta1["index"]["if_seq_no"], "written over the version read")
	require.EqualValues(t, 1, meta1["index"]["if_primary_term"])
	var src0, src1 map[string]any
	require.NoError(t, json.Unmarshal(lines[1], &src0))
	require.NoError(t, json.Unmarshal(lines[3], &src1))
	require.Equal(t, false, src0["seen"], "new, and the request did not say")
	require.Equal(t, true, src1["seen"], "stored seen, the request did not say: kept")
}

// TestIngestKeepStoredReplace: with Replace the different text overwrites (over the version read), and
// an explicit seen=false (KeepSeen off) clears the stored flag.
func TestIngestKeepStoredReplace(t *testing.T) {
	docs := []adapter.Doc{
		{DocID: "Alpha", Title: "Alpha", Text: "alpha text", KeepSeen: true},
		{DocID: "Beta", Title: "Beta", Text: "beta text"}, // seen false, said by the request
		{DocID: "Gamma", Title: "Gamma", Text: "a new passage under the same title", KeepSeen: true},
	}
	a, f := newFakeAdapter(t, map[string][]reply{routeMapping: okMapping,
		routeMget: {{status: 200, file: "mget_keep_stored.json"}}, routeBulk: {{status: 200, file: "bulk_keep_replace.json"}}})
	rep, err := a.Ingest(t.Context(), slices.Values(docs), adapter.IngestOptions{Workers: 1, KeepStored: true, Replace: true})
	require.NoError(t, err)
	require.Equal(t, adapter.IngestReport{Indexed: 1, Updated: 2}, rep)
	bulks := f.requests("POST", "/icicle-docs/_bulk")
	require.Len(t, bulks, 1)
	lines := bytes.Split(bytes.TrimSpace(bulks[0].Body), []byte("\n"))
	require.Len(t, lines, 6, "all three sent")
	var src1 map[string]any
	require.NoError(t, json.Unmarshal(lines[3], &src1))
	require.Equal(t, false, src1["seen"], "the request said seen=false: it wins over the stored flag")
	var meta2 map[string]map[string]any
	require.NoError(t, json.Unmarshal(lines[4], &meta2))
	require.EqualValues(t, 2, meta2["index"]["if_seq_no"])
}

// TestIngestKeepStoredUnchanged: a document stored already as sent (title, text, summary, the seen flag it
// keeps, and its stored vector: a record sent without one, as POST /v1/ingest sends them, keeps it) is not
// written again and counts as unchanged. Writing the same document again would leave the replaced version
// in the index, counted in BM25's statistics until a merge.
func TestIngestKeepStoredUnchanged(t *testing.T) {
	docs := []adapter.Doc{
		{DocID: "Delta", Title: "Delta", Text: "delta text", Summary: "delta summary", KeepSeen: true},
		{DocID: "Epsilon", Title: "Epsilon", Text: "epsilon text", Summary: "epsilon summary"},
	}
	a, f := newFakeAdapter(t, map[string][]reply{routeMapping: okMapping,
		routeMget: {{status: 200, file: "mget_keep_unchanged.json"}}})
	rep, err := a.Ingest(t.Context(), slices.Values(docs), adapter.IngestOptions{Workers: 1, KeepStored: true})
	require.NoError(t, err)
	require.Equal(t, adapter.IngestReport{Unchanged: 2}, rep)
	mgets := f.requests("POST", "/icicle-docs/_mget")
	require.Len(t, mgets, 1)
	require.Contains(t, string(mgets[0].Body)+mgets[0].Query, "summary", "the summary is read to compare")
	require.Empty(t, f.requests("POST", "/icicle-docs/_bulk"), "nothing written")

	t.Run("a changed summary is written, the stored vector kept", func(t *testing.T) {
		rep, f := ingestOverStored(t, adapter.Doc{DocID: "Epsilon", Title: "Epsilon", Text: "epsilon text", Summary: "a new summary"})
		require.Equal(t, adapter.IngestReport{Updated: 1}, rep)
		bulks := f.requests("POST", "/icicle-docs/_bulk")
		require.Len(t, bulks, 1)
		lines := bytes.Split(bytes.TrimSpace(bulks[0].Body), []byte("\n"))
		require.Len(t, lines, 2)
		var src map[string]any
		require.NoError(t, json.Unmarshal(lines[1], &src))
		require.Equal(t, "a new summary", src["summary"])
		require.Equal(t, []any{0.6, 0.8}, src["vector"], "the same text keeps its stored vector")
		require.Equal(t, "bge-small-en-v1.5-q", src["vector_model"])
	})
	t.Run("seen=false sent over a stored seen=true is written", func(t *testing.T) {
		rep, f := ingestOverStored(t, adapter.Doc{DocID: "Delta", Title: "Delta", Text: "delta text", Summary: "delta summary"})
		require.Zero(t, rep.Unchanged)
		require.Len(t, f.requests("POST", "/icicle-docs/_bulk"), 1)
	})
}

// ingestOverStored ingests one document (KeepStored) against the fake node holding mget_keep_unchanged.json's
// documents, answering a bulk write of it as an update.
func ingestOverStored(t *testing.T, d adapter.Doc) (adapter.IngestReport, *fakeES) {
	t.Helper()
	a, f := newFakeAdapter(t, map[string][]reply{routeMapping: okMapping,
		routeMget: {{status: 200, file: "mget_keep_unchanged.json"}}, routeBulk: {{status: 200, file: "bulk_keep_one.json"}}})
	rep, err := a.Ingest(t.Context(), slices.Values([]adapter.Doc{d}), adapter.IngestOptions{Workers: 1, KeepStored: true})
	require.NoError(t, err)
	return rep, f
}
