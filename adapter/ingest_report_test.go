package adapter_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

func TestIngestFailureRetryableAndProgress(t *testing.T) {
	invalid := adapter.Doc{DocID: " ", Title: "no id", Text: "t"}
	tests := []struct {
		name          string
		bulk          []reply
		docs          []adapter.Doc
		wantRetryable []bool // per failure, in report order
	}{
		{
			name:          "invalid and rejected documents are the documents' fault",
			bulk:          []reply{{status: 200, file: "bulk_partial.json"}},
			docs:          append([]adapter.Doc{invalid}, fixtureDocs...),
			wantRetryable: []bool{false, false},
		},
		{
			name:          "a document the response does not mention may be sent again",
			bulk:          []reply{{status: 200, file: "bulk_partial.json"}},
			docs:          append(slices.Clone(fixtureDocs), adapter.Doc{DocID: "Fifth", Title: "Fifth", Text: "t"}),
			wantRetryable: []bool{false, true},
		},
		{
			name:          "a bulk request that kept failing fails its documents as retryable",
			bulk:          unavailable,
			docs:          fixtureDocs[:2],
			wantRetryable: []bool{true, true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _ := newFakeAdapter(t, map[string][]reply{routeMapping: okMapping, routeBulk: tt.bulk})
			var (
				mu       sync.Mutex
				progress []int
			)
			rep, _ := a.Ingest(t.Context(), slices.Values(tt.docs), adapter.IngestOptions{Workers: 1, Progress: func(done int) {
				mu.Lock()
				defer mu.Unlock()
				progress = append(progress, done)
			}})
			require.Len(t, rep.Failed, len(tt.wantRetryable))
			for i, want := range tt.wantRetryable {
				require.Equal(t, want, rep.Failed[i].Retryable, "failure %d: %+v", i, rep.Failed[i])
			}
			for _, f := range rep.Failed {
				if f.Reason == "no result from the bulk indexer" {
					require.Equal(t, "Fifth", f.DocID, "the lost document is named")
				}
			}
			require.NotEmpty(t, progress)
			require.True(t, slices.IsSorted(progress), "one worker: progress only grows: %v", progress)
			require.Equal(t, len(tt.docs), progress[len(progress)-1], "the last call has the final count")
		})
	}
}

// hangingTransport accepts every request and never answers, like a node stuck in a long GC or a network
// that drops packets: only the request's context ends the wait.
type hangingTransport struct{}

func (hangingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	<-req.Context().Done()
	return nil, req.Context().Err()
}

func TestRequestTimeoutIsUnavailable(t *testing.T) {
	a, err := adapter.New(adapter.Options{
		Addresses: []string{"http://es.test:9200"}, Transport: hangingTransport{}, RequestTimeout: 100 * time.Millisecond,
	}, nil)
	require.NoError(t, err)
	defer a.Close()

	// The transport never answers: only the adapter's 100 ms timeout ends the call (a hang fails the test).
	_, err = a.SearchNew(t.Context(), "query", 10)
	require.ErrorIs(t, err, adapter.ErrUnavailable, "the adapter's own timeout is an outage")
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// The caller's own deadline running out first is the caller's business, not an outage.
	a2, err := adapter.New(adapter.Options{
		Addresses: []string{"http://es.test:9200"}, Transport: hangingTransport{}, RequestTimeout: time.Minute,
	}, nil)
	require.NoError(t, err)
	defer a2.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err = a2.SearchNew(ctx, "query", 10)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, adapter.ErrUnavailable)
}
