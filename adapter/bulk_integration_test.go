//go:build integration

package adapter_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// Ingest, MarkSeen and Enrich write through one bulk writer: each test sends one kind of action (create,
// index over a version, update, update over a version) through a shedProxy in front of the real node and
// checks that the actions shed for load are sent again, counted once, and in the index once.

// shedAdapter returns an adapter on index whose requests go through p.
func shedAdapter(t *testing.T, p *shedProxy, index string, opts adapter.Options) *adapter.Adapter {
	t.Helper()
	opts.Addresses, opts.Index, opts.RequestTimeout = []string{p.url}, index, 30*time.Second
	a, err := adapter.New(opts, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	return a
}

// ingestedIndex returns an adapter on a fresh index that holds docs, searchable.
func ingestedIndex(t *testing.T, docs []adapter.Doc) (*adapter.Adapter, string) {
	t.Helper()
	a, index := newIndex(t)
	require.NoError(t, a.EnsureIndex(t.Context()))
	rep, err := a.Ingest(t.Context(), slices.Values(docs), adapter.IngestOptions{Refresh: true})
	require.NoError(t, err)
	require.Equal(t, adapter.IngestReport{Indexed: len(docs)}, rep)
	return a, index
}

// heldCount returns how many actions p has answered 429 for.
func (p *shedProxy) heldCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// TestIntegrationIngestKeepStoredRetriesShedItems: KeepStored's "create" actions, and its writes over the
// version read (if_seq_no), shed by the node are sent again with the same condition and succeed, since
// the node never saw them; every document is counted once and stored once.
func TestIntegrationIngestKeepStoredRetriesShedItems(t *testing.T) {
	ctx := t.Context()
	docs := corpus(t, 200)
	direct, index := ingestedIndex(t, nil) // empty: the documents are created through the proxy

	p := newShedProxy(t, 2, 3) // the first two bulk requests lose every third document
	rep, err := shedAdapter(t, p, index, adapter.Options{}).Ingest(ctx, slices.Values(docs),
		adapter.IngestOptions{KeepStored: true, Workers: 1})
	require.NoError(t, err)
	require.Equal(t, adapter.IngestReport{Indexed: len(docs)}, rep, "created by a retry, counted once")
	require.Positive(t, p.heldCount())

	revised := slices.Clone(docs)
	for i := range revised {
		revised[i].Text += " Revised."
	}
	p = newShedProxy(t, 2, 3)
	rep, err = shedAdapter(t, p, index, adapter.Options{}).Ingest(ctx, slices.Values(revised),
		adapter.IngestOptions{KeepStored: true, Replace: true, Workers: 1, Refresh: true})
	require.NoError(t, err)
	require.Equal(t, adapter.IngestReport{Updated: len(docs)}, rep, "written over the version read by a retry, counted once")
	require.Positive(t, p.heldCount())

	n, err := count(t, esURL(t), index)
	require.NoError(t, err)
	require.Equal(t, len(docs), n)
	stored, err := direct.Resolve(ctx, docDocIDs(docs))
	require.NoError(t, err)
	require.Len(t, stored, len(docs))
	rep, err = direct.Ingest(ctx, slices.Values(revised), adapter.IngestOptions{KeepStored: true})
	require.NoError(t, err)
	require.Equal(t, adapter.IngestReport{Unchanged: len(docs)}, rep, "every revision is stored")
}

// TestIntegrationMarkSeenRetriesShedUpdates: MarkSeen's updates shed by the node are sent again and
// counted once; an update shed at every attempt is a retryable failure after Options.MaxRetries resends,
// and no more are made.
func TestIntegrationMarkSeenRetriesShedUpdates(t *testing.T) {
	ctx := t.Context()
	docs := corpus(t, 300)
	nSeen := seenEvery(docs, 2)
	direct, index := ingestedIndex(t, docs)

	p := newShedProxy(t, 1, 3) // the first bulk request loses every third update
	rep, err := shedAdapter(t, p, index, adapter.Options{}).MarkSeen(ctx, docDocIDs(docs))
	require.NoError(t, err)
	require.Equal(t, adapter.MarkSeenReport{Marked: len(docs) - nSeen, Unchanged: nSeen}, rep)
	require.Equal(t, len(docs)/3, p.heldCount())
	n, err := direct.SeenCount(ctx)
	require.NoError(t, err)
	require.Equal(t, len(docs), n)

	t.Run("shed at every attempt", func(t *testing.T) {
		const retries = 2
		p := newShedProxy(t, retries+2, 1) // every update of every request, and one request to spare
		ids := docDocIDs(docs[:10])
		rep, err := shedAdapter(t, p, index, adapter.Options{MaxRetries: retries}).MarkSeen(ctx, ids)
		require.NoError(t, err)
		require.Zero(t, rep.Marked+rep.Unchanged)
		require.Len(t, rep.Failed, len(ids))
		for _, f := range rep.Failed {
			require.Contains(t, ids, f.DocID)
			require.True(t, f.Retryable, "shed for load is not the document's fault: %+v", f)
			require.Contains(t, f.Reason, "es_rejected_execution_exception")
			require.Contains(t, f.Reason, "(sent 3 times)")
		}
		require.Equal(t, len(ids)*(retries+1), p.heldCount(), "sent once and retried MaxRetries times")
	})
}

// TestIntegrationEnrichRetriesShedUpdates: Enrich's updates over the version read, shed by the node, are
// sent again and written; each document is embedded once and written once.
func TestIntegrationEnrichRetriesShedUpdates(t *testing.T) {
	ctx := t.Context()
	docs := corpus(t, 40)
	_, index := ingestedIndex(t, docs)

	p := newShedProxy(t, 2, 3) // the first two bulk requests lose every third update
	a := shedAdapter(t, p, index, adapter.Options{VectorDims: testDims})
	require.NoError(t, a.EnsureIndex(ctx), "the vector fields are added")
	embedded := 0
	embed := func(ctx context.Context, ds []adapter.Doc) ([][]float32, error) {
		embedded += len(ds)
		return hashEmbed(ctx, ds)
	}
	rep, err := a.Enrich(ctx, adapter.EnrichOptions{Embed: embed, VectorModel: "hash-v1", PageSize: 16})
	require.NoError(t, err)
	require.Equal(t, adapter.EnrichReport{Needed: len(docs), Written: len(docs), Vectors: len(docs)}, rep)
	require.Equal(t, len(docs), embedded, "a shed update is sent again, not embedded again")
	require.Positive(t, p.heldCount())

	byID := map[string]adapter.Doc{}
	for _, d := range docs {
		byID[adapter.DocumentID(d.DocID)] = d
	}
	after := sources(t, index)
	require.Len(t, after, len(docs))
	for id, src := range after {
		d := byID[id]
		require.Equal(t, "hash-v1", src["vector_model"], d.DocID)
		require.InDeltaSlice(t, toFloats(hashVector(d.Title+"\n"+d.Text)), src["vector"], 1e-6, d.DocID)
	}
}

// TestIntegrationIngestRefreshAtEnd: into an index whose refresh_interval is -1 (a bulk load's setting),
// Ingest with RefreshAtEnd returns with every document searchable; each request waiting for a refresh
// (Refresh) would not return there.
func TestIntegrationIngestRefreshAtEnd(t *testing.T) {
	a, index := newIndex(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	require.NoError(t, a.EnsureIndex(ctx))
	esDo(t, http.MethodPut, "/"+index+"/_settings", `{"index": {"refresh_interval": "-1"}}`)
	docs := make([]adapter.Doc, 30)
	for i := range docs {
		docs[i] = adapter.Doc{DocID: fmt.Sprint("r", i), Title: fmt.Sprint("Doc ", i), Text: "text to find"}
	}
	rep, err := a.Ingest(ctx, slices.Values(docs), adapter.IngestOptions{RefreshAtEnd: true, Workers: 1, FlushBytes: 512})
	require.NoError(t, err)
	require.Equal(t, 30, rep.Indexed)
	count := esDo(t, http.MethodGet, "/"+index+"/_count", "")
	require.EqualValues(t, 30, count["count"], "searchable when Ingest returned")
}
