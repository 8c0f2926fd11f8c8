package adapter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// bulkIDs returns the _id of every action line of a bulk request body, in order.
func bulkIDs(t *testing.T, body []byte) []string {
	t.Helper()
	var ids []string
	lines := bytes.Split(bytes.TrimSpace(body), []byte("\n"))
	for k := 0; k < len(lines); k += 2 {
		var meta map[string]struct {
			ID string `json:"_id"`
		}
		require.NoError(t, json.Unmarshal(lines[k], &meta), "line %d: %s", k, lines[k])
		ids = append(ids, meta["index"].ID)
	}
	return ids
}

// TestIngestRetriesShedItems: a 200 bulk response whose items Elasticsearch shed with 429
// (testdata/bulk_shed*.json, in the layout of a real node's es_rejected_execution_exception item) has
// those items sent again after a backoff, and only those; each document is counted once, by the attempt
// that settles it, and only a document shed at every attempt is a failure, a retryable one.
func TestIngestRetriesShedItems(t *testing.T) {
	docs := fixtureDocs[:3]
	ids := make([]string, len(docs))
	for i, d := range docs {
		ids[i] = adapter.DocumentID(d.DocID)
	}
	tests := []struct {
		name       string
		retries    int
		bulk       []reply
		want       adapter.IngestReport // Failed compared by DocID and Retryable
		wantFailed []string             // reason substrings, in order
		wantSent   [][]string           // _ids of each bulk request
	}{
		{
			name:     "429 items then created: nothing failed, nothing counted twice",
			bulk:     []reply{{status: 200, file: "bulk_shed.json"}, {status: 200, file: "bulk_shed_retry.json"}},
			want:     adapter.IngestReport{Indexed: 2, Updated: 1},
			wantSent: [][]string{ids, ids[1:]},
		},
		{
			name:    "shed at every attempt: retryable failures after MaxRetries resends",
			retries: 2,
			bulk: []reply{{status: 200, file: "bulk_shed.json"}, {status: 200, file: "bulk_shed_again.json"},
				{status: 200, file: "bulk_shed_one.json"}},
			want:       adapter.IngestReport{Indexed: 2, Failed: []adapter.Failure{{DocID: docs[2].DocID, Retryable: true}}},
			wantFailed: []string{"es_rejected_execution_exception: rejected execution of primary operation"},
			wantSent:   [][]string{ids, ids[1:], ids[2:]},
		},
		{
			name:       "retries off: a shed item fails at once, retryable",
			retries:    -1,
			bulk:       []reply{{status: 200, file: "bulk_shed.json"}},
			want:       adapter.IngestReport{Indexed: 1, Failed: []adapter.Failure{{DocID: docs[1].DocID, Retryable: true}, {DocID: docs[2].DocID, Retryable: true}}},
			wantFailed: []string{"es_rejected_execution_exception", "es_rejected_execution_exception"},
			wantSent:   [][]string{ids},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeES(t, map[string][]reply{routeMapping: okMapping, routeBulk: tt.bulk})
			a, err := adapter.New(adapter.Options{Addresses: []string{"http://es.test:9200"}, Transport: f, MaxRetries: tt.retries}, nil)
			require.NoError(t, err)
			defer a.Close()
			var progress []int
			rep, err := a.Ingest(t.Context(), slices.Values(docs), adapter.IngestOptions{Workers: 1, Progress: func(done int) {
				progress = append(progress, done)
			}})
			require.NoError(t, err)
			require.Equal(t, tt.want.Indexed, rep.Indexed)
			require.Equal(t, tt.want.Updated, rep.Updated)
			require.Len(t, rep.Failed, len(tt.want.Failed))
			for i, w := range tt.want.Failed {
				require.Equal(t, w.DocID, rep.Failed[i].DocID)
				require.Equal(t, w.Retryable, rep.Failed[i].Retryable)
				require.Contains(t, rep.Failed[i].Reason, tt.wantFailed[i])
			}
			require.Equal(t, len(docs), rep.Total(), "every document accounted for exactly once")
			sent := f.requests("POST", "/icicle-docs/_bulk")
			require.Len(t, sent, len(tt.wantSent))
			for k, want := range tt.wantSent {
				require.Equal(t, want, bulkIDs(t, sent[k].Body), "bulk request %d", k)
			}
			require.True(t, slices.IsSorted(progress), "progress only grows: %v", progress)
			require.Equal(t, len(docs), progress[len(progress)-1])
		})
	}
}

// TestIngestShedRetryStopsWithContext: a caller that gives up during the backoff gets every shed
// document back as a retryable failure, not lost and not reported written.
func TestIngestShedRetryStopsWithContext(t *testing.T) {
	f := newFakeES(t, map[string][]reply{routeMapping: okMapping, routeBulk: {{status: 200, file: "bulk_shed.json"}}})
	a, err := adapter.New(adapter.Options{Addresses: []string{"http://es.test:9200"}, Transport: f}, nil)
	require.NoError(t, err)
	defer a.Close()
	ctx, cancel := context.WithCancel(t.Context())
	rep, err := a.Ingest(ctx, slices.Values(fixtureDocs[:3]), adapter.IngestOptions{Workers: 1, Progress: func(done int) {
		if done == 1 {
			cancel() // the first flush is answered: cancel before the retry round
		}
	}})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, rep.Indexed)
	require.Len(t, rep.Failed, 2)
	for _, fl := range rep.Failed {
		require.True(t, fl.Retryable)
		require.True(t, strings.Contains(fl.Reason, "not sent again"), fl.Reason)
	}
	require.Len(t, f.requests("POST", "/icicle-docs/_bulk"), 1)
}
