//go:build integration

package adapter_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// TestIntegrationListSeenAndDiff lists the seen documents of a real index across several pages of a
// point in time and compares them with a model's seen corpus that misses some and adds others; ListNew
// lists the other documents with their titles and summaries (the block store's fill reads them).
func TestIntegrationListSeenAndDiff(t *testing.T) {
	a, _ := newIndex(t)
	ctx := t.Context()
	require.NoError(t, a.EnsureIndex(ctx))
	docs := corpus(t, 250)
	nSeen := seenEvery(docs, 2)
	rep, err := a.Ingest(ctx, slices.Values(docs), adapter.IngestOptions{Refresh: true})
	require.NoError(t, err)
	require.Empty(t, rep.Failed)

	var want []string
	for _, d := range docs {
		if d.Seen {
			want = append(want, d.DocID)
		}
	}
	slices.Sort(want)
	a.SetSeenPageSize(50) // 125 seen documents: pages of 50, 50, 25
	var got []string
	pages := 0
	require.NoError(t, a.ListSeen(ctx, func(p []string) error { pages++; got = append(got, p...); return nil }))
	require.Equal(t, 3, pages)
	require.Equal(t, want, got, "every seen docid once, in byte order")
	n, err := a.SeenCount(ctx)
	require.NoError(t, err)
	require.Equal(t, nSeen, n)

	// The model knows all but the first 30 seen documents, plus 5 the index has as new and 7 it lacks.
	var model []string
	model = append(model, want[30:]...)
	for _, d := range docs {
		if !d.Seen && len(model) < len(want)-30+5 {
			model = append(model, d.DocID)
		}
	}
	for i := range 7 {
		model = append(model, fmt.Sprintf("Not ingested %d", i))
	}
	d, err := a.SeenDiff(ctx, model)
	require.NoError(t, err)
	require.Equal(t, nSeen, d.IndexSeen)
	require.Equal(t, len(model), d.ModelSeen)
	require.Equal(t, 30, d.NotInModelCount)
	require.Equal(t, want[:adapter.SeenDiffExamples], d.NotInModel)
	require.Equal(t, 12, d.MissingInIndexCount)
	require.Len(t, d.MissingInIndex, 12)
	require.False(t, d.Consistent())

	d, err = a.SeenDiff(ctx, want)
	require.NoError(t, err)
	require.True(t, d.Consistent(), "%+v", d)

	byID := map[string]adapter.Doc{}
	var wantNew []string
	for _, d := range docs {
		if !d.Seen {
			byID[d.DocID] = d
			wantNew = append(wantNew, d.DocID)
		}
	}
	slices.Sort(wantNew)
	var gotNew []string
	pages = 0
	require.NoError(t, a.ListNew(ctx, 60, func(p []adapter.Hit) error {
		pages++
		for _, h := range p {
			gotNew = append(gotNew, h.DocID)
			require.Equal(t, byID[h.DocID].Title, h.Title, h.DocID)
			require.Equal(t, byID[h.DocID].Summary, h.Summary, h.DocID)
			require.Equal(t, adapter.DocumentID(h.DocID), h.ID)
		}
		return nil
	}))
	require.Equal(t, 3, pages, "125 new documents: pages of 60, 60, 5")
	require.Equal(t, wantNew, gotNew, "every new document once, in docid order")
	require.ErrorIs(t, a.ListNew(ctx, 0, nil), adapter.ErrInvalidArgument)
	stop := errors.New("enough")
	require.ErrorIs(t, a.ListNew(ctx, 10, func([]adapter.Hit) error { return stop }), stop)

	// No point in time is left open.
	res, err := plain.Get(esURL(t) + "/_nodes/stats/indices/search")
	require.NoError(t, err)
	defer res.Body.Close()
	var st struct {
		Nodes map[string]struct {
			Indices struct {
				Search struct {
					OpenContexts int `json:"open_contexts"`
				} `json:"search"`
			} `json:"indices"`
		} `json:"nodes"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&st))
	for _, node := range st.Nodes {
		require.Zero(t, node.Indices.Search.OpenContexts)
	}
}

// shedProxy forwards to the node, but from the first shed bulk requests it keeps every k-th action (index,
// create or update) back and answers for it as a node whose write queue is full does inside a 200 bulk
// response (an item with status 429, es_rejected_execution_exception); the node never sees those actions.
type shedProxy struct {
	t   *testing.T
	url string
	up  *url.URL

	mu    sync.Mutex
	shed  int // bulk requests still to shed from
	every int
	held  int // documents answered 429
}

func newShedProxy(t *testing.T, shed, every int) *shedProxy {
	t.Helper()
	up, err := url.Parse(esURL(t))
	require.NoError(t, err)
	p := &shedProxy{t: t, up: up, shed: shed, every: every}
	srv := httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

func (p *shedProxy) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	shedding := strings.HasSuffix(r.URL.Path, "/_bulk") && p.shed > 0
	if shedding {
		p.shed--
	}
	p.mu.Unlock()
	var kept [][]byte
	var shedAt []int // positions in the original request
	var ops, ids []string
	if shedding {
		lines := bytes.Split(bytes.TrimRight(body, "\n"), []byte("\n"))
		for k := 0; k+1 < len(lines); k += 2 {
			if (k/2)%p.every == 0 {
				var meta map[string]struct {
					ID string `json:"_id"`
				}
				require.NoError(p.t, json.Unmarshal(lines[k], &meta))
				shedAt = append(shedAt, k/2)
				for op, m := range meta { // one key: the action
					ops, ids = append(ops, op), append(ids, m.ID)
				}
				continue
			}
			kept = append(kept, lines[k], lines[k+1])
		}
		body = append(bytes.Join(kept, []byte("\n")), '\n')
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.up.String()+r.URL.RequestURI(), bytes.NewReader(body))
	require.NoError(p.t, err)
	req.Header = r.Header.Clone()
	req.Header.Del("Accept-Encoding") // let our transport ask for gzip and undo it, so the body can be read
	var res *http.Response
	if !shedding || len(kept) > 0 {
		res, err = plain.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
	}
	if !shedding {
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		_, _ = io.Copy(w, res.Body)
		return
	}
	var out struct {
		Took   int               `json:"took"`
		Errors bool              `json:"errors"`
		Items  []json.RawMessage `json:"items"`
	}
	if res != nil {
		require.NoError(p.t, json.NewDecoder(res.Body).Decode(&out))
	}
	total := len(out.Items) + len(shedAt)
	items := make([]json.RawMessage, 0, total)
	next := 0
	for i := range total {
		if len(shedAt) > 0 && shedAt[0] == i {
			items = append(items, json.RawMessage(fmt.Sprintf(`{%q:{"_index":"x","_id":%q,"status":429,"error":{"type":"es_rejected_execution_exception","reason":"rejected execution of primary operation [queue capacity 10000]"}}}`, ops[0], ids[0])))
			shedAt, ops, ids = shedAt[1:], ops[1:], ids[1:]
			p.mu.Lock()
			p.held++
			p.mu.Unlock()
			continue
		}
		items = append(items, out.Items[next])
		next++
	}
	out.Items, out.Errors = items, true
	w.Header().Set("X-Elastic-Product", "Elasticsearch")
	w.Header().Set("Content-Type", "application/json")
	require.NoError(p.t, json.NewEncoder(w).Encode(out))
}

// TestIntegrationIngestRetriesShedItems: documents a node shed with 429 inside 200 bulk responses are
// sent again and written; every document is counted once and is in the index once.
func TestIntegrationIngestRetriesShedItems(t *testing.T) {
	direct, index := newIndex(t)
	ctx := t.Context()
	require.NoError(t, direct.EnsureIndex(ctx))
	docs := corpus(t, 300)
	p := newShedProxy(t, 2, 3) // the first two bulk requests lose every third document
	a, err := adapter.New(adapter.Options{Addresses: []string{p.url}, Index: index, RequestTimeout: 30 * time.Second}, nil)
	require.NoError(t, err)
	defer a.Close()
	rep, err := a.Ingest(ctx, slices.Values(docs), adapter.IngestOptions{FlushBytes: 32 << 10, Workers: 1})
	require.NoError(t, err)
	require.Empty(t, rep.Failed)
	require.Equal(t, adapter.IngestReport{Indexed: len(docs)}, rep, "shed documents were written by a retry, counted once")
	p.mu.Lock()
	held := p.held
	p.mu.Unlock()
	require.Positive(t, held)
	refresh(t, index)
	n, err := count(t, esURL(t), index)
	require.NoError(t, err)
	require.Equal(t, len(docs), n)
}
