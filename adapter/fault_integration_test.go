//go:build integration

package adapter_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// Fault tests: a reverse proxy in front of the real node injects what a struggling or vanishing cluster
// does, so the adapter's retry and accounting paths run against real bulk responses.

// cutMode is how the proxy treats a request once the cluster has "gone away".
type cutMode int

const (
	// cutBeforeForward closes the connection without forwarding: the node never sees the request.
	cutBeforeForward cutMode = iota
	// cutAfterForward forwards the request, lets the node execute it, then closes the connection instead
	// of answering: the write happened but the client cannot know.
	cutAfterForward
	// hang accepts the request and never answers until the client gives up.
	hang
)

// faultProxy forwards to the node, answering 429 to the first throttle bulk requests, and after
// cutAfter forwarded bulk requests (when cutAfter >= 0) treating every request according to mode.
type faultProxy struct {
	t   *testing.T
	url string
	rp  *httputil.ReverseProxy

	mu        sync.Mutex
	throttle  int // bulk requests still to answer with 429
	cutAfter  int // forwarded bulk requests before the cluster goes away; -1 never
	mode      cutMode
	bulks     int // bulk requests received
	throttled int // 429s sent
	forwarded int // bulk requests forwarded
	cut       int // requests cut or hung
	release   chan struct{}
}

func newFaultProxy(t *testing.T, throttle, cutAfter int, mode cutMode) *faultProxy {
	t.Helper()
	target, err := url.Parse(esURL(t))
	require.NoError(t, err)
	tr := &http.Transport{DisableKeepAlives: true} // no idle upstream connections left for goleak
	p := &faultProxy{t: t, throttle: throttle, cutAfter: cutAfter, mode: mode, release: make(chan struct{})}
	p.rp = &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport: tr,
		ErrorLog:  nil,
	}
	srv := httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(func() {
		close(p.release)
		srv.Close()
		tr.CloseIdleConnections()
	})
	p.url = srv.URL
	return p
}

// goneAway makes every later request fail as mode says.
func (p *faultProxy) goneAway() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutAfter = 0
	p.forwarded = 0
}

func (p *faultProxy) serve(w http.ResponseWriter, r *http.Request) {
	bulk := strings.HasSuffix(r.URL.Path, "/_bulk")
	p.mu.Lock()
	gone := p.cutAfter >= 0 && p.forwarded >= p.cutAfter
	throttle := false
	switch {
	case gone:
		p.cut++
	case bulk && p.throttle > 0:
		p.throttle--
		p.throttled++
		throttle = true
	}
	if bulk {
		p.bulks++
		if !gone && !throttle {
			p.forwarded++
		}
	}
	mode := p.mode
	p.mu.Unlock()

	switch {
	case throttle:
		// What a node whose write queue is full answers for a whole request.
		w.Header().Set("X-Elastic-Product", "Elasticsearch")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"type":"es_rejected_execution_exception","reason":"rejected execution (queue capacity 10000)"},"status":429}`)
	case !gone:
		p.rp.ServeHTTP(w, r)
	case mode == hang:
		select {
		case <-r.Context().Done():
		case <-p.release:
		}
	default:
		if mode == cutAfterForward {
			p.rp.ServeHTTP(httptest.NewRecorder(), r) // the node does the work; the answer is dropped
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			p.t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
	}
}

func (p *faultProxy) counts() (bulks, throttled, forwarded, cut int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bulks, p.throttled, p.forwarded, p.cut
}

// proxied returns an adapter on index whose requests go through the proxy.
func proxied(t *testing.T, p *faultProxy, index string, opts adapter.Options) *adapter.Adapter {
	t.Helper()
	opts.Addresses, opts.Index = []string{p.url}, index
	a, err := adapter.New(opts, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	return a
}

// seenEvery marks every k-th document seen (D_train) and returns how many are.
func seenEvery(docs []adapter.Doc, k int) int {
	n := 0
	for i := range docs {
		docs[i].Seen = i%k == 0
		if docs[i].Seen {
			n++
		}
	}
	return n
}

// counted yields docs and counts how many Ingest drew.
func counted(docs []adapter.Doc, drawn *int) func(func(adapter.Doc) bool) {
	return func(yield func(adapter.Doc) bool) {
		for _, d := range docs {
			*drawn++
			if !yield(d) {
				return
			}
		}
	}
}

func refresh(t *testing.T, index string) {
	t.Helper()
	res, err := plain.Post(esURL(t)+"/"+index+"/_refresh", "application/json", nil)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
}

func TestIntegrationIngestThrottled(t *testing.T) {
	direct, index := newIndex(t)
	ctx := t.Context()
	require.NoError(t, direct.EnsureIndex(ctx))
	docs := corpus(t, 600)
	nSeen := seenEvery(docs, 4)

	// Three 429s in a row, the default MaxRetries: whichever flushes get them, each gets through at last.
	p := newFaultProxy(t, 3, -1, cutBeforeForward)
	a := proxied(t, p, index, adapter.Options{RequestTimeout: 30 * time.Second})
	var drawn int
	rep, err := a.Ingest(ctx, counted(docs, &drawn), adapter.IngestOptions{FlushBytes: 64 << 10})
	require.NoError(t, err)
	require.Empty(t, rep.Failed)
	require.Equal(t, adapter.IngestReport{Indexed: len(docs)}, rep)
	require.Equal(t, len(docs), drawn)

	bulks, throttled, forwarded, _ := p.counts()
	t.Logf("bulk requests: %d received, %d answered 429, %d forwarded", bulks, throttled, forwarded)
	require.Equal(t, 3, throttled)
	require.Equal(t, bulks, forwarded+throttled, "every 429 was retried")
	require.Greater(t, forwarded, 3, "the corpus took several bulk requests")

	refresh(t, index)
	n, err := count(t, esURL(t), index)
	require.NoError(t, err)
	require.Equal(t, len(docs), n)
	seen, err := direct.SeenCount(ctx)
	require.NoError(t, err)
	require.Equal(t, nSeen, seen)
}

func TestIntegrationIngestClusterGoesAway(t *testing.T) {
	for _, tt := range []struct {
		name string
		mode cutMode
		// exact: the documents failed are exactly those not stored. Otherwise a failed document may have
		// been stored (the node wrote it, the answer was lost), never the other way round.
		exact bool
	}{
		{"connections cut before the node sees the request", cutBeforeForward, true},
		{"answer lost after the node wrote", cutAfterForward, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			direct, index := newIndex(t)
			ctx := t.Context()
			require.NoError(t, direct.EnsureIndex(ctx))
			docs := corpus(t, 1000)
			nSeen := seenEvery(docs, 5)

			p := newFaultProxy(t, 0, 3, tt.mode)
			a := proxied(t, p, index, adapter.Options{RequestTimeout: 5 * time.Second, MaxRetries: 1})
			var drawn int
			rep, err := a.Ingest(ctx, counted(docs, &drawn), adapter.IngestOptions{FlushBytes: 64 << 10, Workers: 2})
			if err != nil {
				require.ErrorIs(t, err, adapter.ErrUnavailable)
			}
			bulks, _, forwarded, cut := p.counts()
			t.Logf("ingest: indexed %d, updated %d, failed %d, err %v; proxy: %d bulk requests, %d forwarded, %d cut",
				rep.Indexed, rep.Updated, len(rep.Failed), err, bulks, forwarded, cut)
			require.Equal(t, drawn, rep.Total(), "Indexed+Updated+Failed == drawn: nothing lost silently")
			require.Equal(t, len(docs), drawn)
			require.Positive(t, rep.Indexed, "the first bulk requests went through")
			require.NotEmpty(t, rep.Failed, "the rest did not")
			require.Zero(t, rep.Updated)

			failed := map[string]bool{}
			for _, f := range rep.Failed {
				require.NotEmpty(t, f.DocID, "a failure names its document: %+v", f)
				require.False(t, failed[f.DocID], "failed twice: %q", f.DocID)
				require.True(t, f.Retryable, "an outage is never the document's fault: %+v", f)
				failed[f.DocID] = true
			}

			// Compare with what the node holds, read directly.
			refresh(t, index)
			stored, err := direct.Resolve(ctx, docDocIDs(docs))
			require.NoError(t, err)
			for _, d := range docs {
				_, isStored := stored[d.DocID]
				if !failed[d.DocID] {
					require.True(t, isStored, "reported written but not stored: %q", d.DocID)
				} else if tt.exact {
					require.False(t, isStored, "reported failed but stored: %q", d.DocID)
				}
			}
			if tt.exact {
				require.Len(t, stored, rep.Indexed)
			}
			t.Logf("stored %d: %d reported written, %d reported failed although the node wrote them",
				len(stored), rep.Indexed, len(stored)-rep.Indexed)

			t.Run("search during the outage fails fast with ErrUnavailable", func(t *testing.T) {
				start := time.Now()
				_, err := a.SearchNew(ctx, "who sang the theme song", 100)
				took := time.Since(start)
				t.Logf("SearchNew during outage: %v after %s", err, took)
				require.ErrorIs(t, err, adapter.ErrUnavailable)
				require.Less(t, took, 5*time.Second, "bounded by RequestTimeout")
			})

			t.Run("resume against the node", func(t *testing.T) {
				rep2, err := direct.Ingest(ctx, slices.Values(docs), adapter.IngestOptions{Refresh: true})
				require.NoError(t, err)
				require.Empty(t, rep2.Failed)
				require.Equal(t, len(docs)-len(stored), rep2.Indexed, "the documents not stored are new now")
				require.Equal(t, len(stored), rep2.Updated, "the stored ones are replaced, not duplicated")
				n, err := count(t, esURL(t), index)
				require.NoError(t, err)
				require.Equal(t, len(docs), n)
				seen, err := direct.SeenCount(ctx)
				require.NoError(t, err)
				require.Equal(t, nSeen, seen)

				rep3, err := direct.Ingest(ctx, slices.Values(docs), adapter.IngestOptions{Refresh: true})
				require.NoError(t, err)
				require.Equal(t, adapter.IngestReport{Updated: len(docs)}, rep3, "idempotent")
				n, err = count(t, esURL(t), index)
				require.NoError(t, err)
				require.Equal(t, len(docs), n)
			})
		})
	}
}

func TestIntegrationSearchOutage(t *testing.T) {
	direct, index := newIndex(t)
	ctx := t.Context()
	require.NoError(t, direct.EnsureIndex(ctx))
	_, err := direct.Ingest(ctx, slices.Values(corpus(t, 20)), adapter.IngestOptions{Refresh: true})
	require.NoError(t, err)

	for _, tt := range []struct {
		name string
		mode cutMode
	}{
		{"connections cut", cutBeforeForward},
		{"node hangs", hang},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const timeout = 500 * time.Millisecond
			p := newFaultProxy(t, 0, -1, tt.mode)
			a := proxied(t, p, index, adapter.Options{RequestTimeout: timeout})
			hits, err := a.SearchNew(ctx, "super bowl", 100)
			require.NoError(t, err, "healthy through the proxy")
			require.NotEmpty(t, hits)

			p.goneAway()
			for _, search := range []func(context.Context, string, int) ([]adapter.Hit, error){a.SearchNew, a.SearchAll} {
				start := time.Now()
				_, err = search(ctx, "super bowl", 100)
				took := time.Since(start)
				t.Logf("%s: %v after %s", tt.name, err, took)
				require.ErrorIs(t, err, adapter.ErrUnavailable)
				require.Less(t, took, timeout+time.Second, "bounded by RequestTimeout, no hang")
			}
		})
	}
}
