//go:build integration && ort && tokenizers

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/inference/loader"
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/internal/compress"
	"github.com/icicle-search/sidecar/internal/testenv"
	"github.com/icicle-search/sidecar/plugin"
)

// stack is a sidecar wired to a real node and the real model, behind httptest.
type stack struct {
	es     *adapter.Adapter
	engine *inference.Engine
	fault  *faultyReranker
	url    string
	seen   []string
	// config is the model's training configuration (manifest "config"); ingested lists every docid indexed.
	config   string
	ingested []string
	// opts are the sidecar's options at url; withOptions serves the same index and engine under others.
	opts sidecarOptions
}

// withOptions serves the stack's index and engine from another sidecar whose options are the stack's changed
// by mod; it returns that sidecar's URL.
func (s *stack) withOptions(t *testing.T, mod func(*sidecarOptions)) string {
	t.Helper()
	o := s.opts
	mod(&o)
	hs := httptest.NewServer(newSidecar(s.es, s.fault, o).Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

// defaultModelDir is the model the integration tests run: $ICICLE_MODEL_DIR, else models/small (the model
// with both routes, memory and copy; the shipped default models/reader135 has only the copy route), else
// the tiny fixture.
func defaultModelDir() string {
	if d := os.Getenv("ICICLE_MODEL_DIR"); d != "" {
		return d
	}
	small := filepath.Join("..", "models", "small")
	if _, err := os.Stat(filepath.Join(small, "manifest.json")); err == nil {
		return small
	}
	return filepath.Join("..", "models", "tiny")
}

// faultyReranker wraps the real engine and injects failures while fail is set (for breaker tests).
type faultyReranker struct {
	inner *inference.Engine
	fail  atomic.Bool
	calls atomic.Int64
}

func (f *faultyReranker) Rank(ctx context.Context, q string, c []inference.Candidate, o inference.Options) (inference.Result, error) {
	f.calls.Add(1)
	if f.fail.Load() {
		return inference.Result{}, errors.New("injected model failure")
	}
	return f.inner.Rank(ctx, q, c, o)
}

func newStack(t *testing.T, newDocs int) *stack {
	t.Helper()
	esURL := os.Getenv("ICICLE_ES_URL")
	lib := os.Getenv("ICICLE_ORT_LIB")
	if esURL == "" || lib == "" {
		testenv.Missing(t, "ICICLE_ES_URL and ICICLE_ORT_LIB must be set (scripts/test.sh sets both)")
	}
	dir := defaultModelDir()
	require.NoError(t, ort.Init(lib))
	t.Cleanup(func() { _ = ort.Shutdown() })
	lm, err := loader.Open(dir, loader.Options{Runtime: ort.Options{Threads: 2}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lm.Close() })
	man, engine, seen := lm.Manifest, lm.Engine, lm.Seen

	index := fmt.Sprintf("icicle-e2e-%d", time.Now().UnixNano())
	es, err := adapter.New(adapter.Options{Addresses: []string{esURL}, Index: index}, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = http.DefaultClient.Do(mustReq(t, http.MethodDelete, esURL+"/"+index))
		_ = es.Close()
	})
	require.NoError(t, es.EnsureIndex(t.Context()))

	// The corpus: every seen document plus newDocs others (D_new from the model's point of view).
	isSeen := make(map[string]bool)
	for _, d := range seen {
		isSeen[d] = true
	}
	r, err := adapter.OpenCorpus(filepath.Join("..", "data", "nq_qed", "corpus.jsonl.gz"), adapter.CorpusLimits{})
	require.NoError(t, err)
	defer r.Close()
	var docs []adapter.Doc
	added := 0
	for d := range r.All() {
		d.Seen = isSeen[d.DocID]
		if !d.Seen {
			if added >= newDocs {
				continue
			}
			added++
		}
		d.Summary = compress.Extractive(d.Text)
		docs = append(docs, d)
	}
	rep, err := es.Ingest(t.Context(), slices.Values(docs), adapter.IngestOptions{Refresh: true})
	require.NoError(t, err)
	require.Empty(t, rep.Failed)
	n, err := es.SeenCount(t.Context())
	require.NoError(t, err)
	require.Equal(t, len(seen), n, "every seen docid of the model is in the corpus and marked seen")

	fault := &faultyReranker{inner: engine}
	opts := sidecarOptions{MaxBodyBytes: 4 << 20, RequestTimeout: 30 * time.Second,
		ESBudgetFraction: 0.3, MaxQueryChars: 1024, MaxHits: 1000, MaxCandidates: 100, Decode: inference.Options{BeamWidth: 10},
		MaxInflight: 1, QueueSize: 4, ConsecutiveFailures: 2, OpenTimeout: 2 * time.Second, MinTopScore: -1e9,
		Model: plugin.ModelInfo{Name: man.Name}}
	srv := newSidecar(es, fault, opts)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	ids := make([]string, len(docs))
	for i, d := range docs {
		ids[i] = d.DocID
	}
	return &stack{es: es, engine: engine, fault: fault, url: hs.URL, seen: seen, config: man.Config, ingested: ids, opts: opts}
}

func mustReq(t *testing.T, method, url string) *http.Request {
	req, err := http.NewRequestWithContext(context.Background(), method, url, nil)
	require.NoError(t, err)
	return req
}

func (s *stack) post(t *testing.T, path string, body any) (int, plugin.Response) {
	t.Helper()
	return postTo(t, s.url, path, body)
}

// postTo posts body as JSON to the sidecar at url and decodes its response.
func postTo(t *testing.T, url, path string, body any) (int, plugin.Response) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	res, err := http.Post(url+path, "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer res.Body.Close()
	var out plugin.Response
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	return res.StatusCode, out
}

// checkReranked asserts what every reranked response must satisfy, whatever the model's quality. hits are
// the model's context and the BM25 baseline (/v1/rerank); checkRerankedWith takes the baseline apart
// (/v1/search: BM25 over the whole index).
func checkReranked(t *testing.T, s *stack, resp plugin.Response, hits []adapter.Hit) {
	t.Helper()
	checkRerankedWith(t, s, resp, hits, nil)
}

func checkRerankedWith(t *testing.T, s *stack, resp plugin.Response, hits, baseline []adapter.Hit) {
	contextIsBaseline := baseline == nil
	if contextIsBaseline {
		baseline = hits
	}
	t.Helper()
	require.Equal(t, plugin.ModeReranked, resp.Mode, resp.FallbackReason)
	require.NotEmpty(t, resp.Results)
	require.Positive(t, resp.CandidatesInContext)
	require.NotNil(t, resp.RouterProb)
	require.Positive(t, resp.Timings.Model)
	hitIDs := make(map[string]string)
	for _, h := range hits {
		hitIDs[h.DocID] = h.ID
	}
	for i, r := range resp.Results {
		require.Equal(t, i+1, r.Rank)
		require.LessOrEqual(t, r.Score, 0.0, "scores are log-probabilities")
		require.True(t, r.Resolved, "result %d %q resolved to a stored document", i, r.DocID)
		require.Equal(t, adapter.DocumentID(r.DocID), r.ID)
		if r.BM25Rank != nil {
			require.Equal(t, baseline[*r.BM25Rank-1].DocID, r.DocID, "bm25_rank is the rank in the BM25 baseline")
		}
		switch r.Provenance {
		case plugin.FromCopy:
			require.Contains(t, hitIDs, r.DocID, "a copied docid is one of the context hits")
			if contextIsBaseline {
				require.NotNil(t, r.BM25Rank, "the context is the baseline")
			}
		case plugin.FromParametric:
			require.Contains(t, s.seen, r.DocID, "a parametric docid belongs to the seen corpus")
		default:
			t.Fatalf("result %d: provenance %q", i, r.Provenance)
		}
	}
}

func TestEndToEnd(t *testing.T) {
	s := newStack(t, 300)
	query := "who appoints the chair of the federal reserve system"

	t.Run("search", func(t *testing.T) {
		hits, err := s.es.SearchNew(t.Context(), query, 100)
		require.NoError(t, err)
		for _, h := range hits {
			require.NotContains(t, s.seen, h.DocID, "BM25 over new documents only")
		}
		all, err := s.es.SearchAll(t.Context(), query, 100)
		require.NoError(t, err)
		code, resp := s.post(t, "/v1/search", plugin.SearchRequest{Query: query, Size: 10})
		require.Equal(t, http.StatusOK, code)
		checkRerankedWith(t, s, resp, hits, all)
		require.Equal(t, len(hits), resp.HitsReceived)
	})

	t.Run("rerank with Elasticsearch hits", func(t *testing.T) {
		hits, err := s.es.SearchNew(t.Context(), query, 20)
		require.NoError(t, err)
		var esHits []map[string]any
		for _, h := range hits {
			esHits = append(esHits, map[string]any{"_id": h.ID, "_score": h.Score, "_source": map[string]any{"title": h.Title, "summary": h.Summary}})
		}
		code, resp := s.post(t, "/v1/rerank", map[string]any{"query": query, "hits": esHits, "size": 5})
		require.Equal(t, http.StatusOK, code)
		checkReranked(t, s, resp, hits)
		require.LessOrEqual(t, len(resp.Results), 5)
		require.Equal(t, 20, resp.CandidatesInContext, "20 short hits fit the prompt")
	})

	t.Run("parametric docids resolve to stored documents", func(t *testing.T) {
		code, resp := s.post(t, "/v1/rerank", map[string]any{"query": query, "hits": []any{}})
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, plugin.ModeReranked, resp.Mode)
		require.Zero(t, resp.CandidatesInContext)
		for _, r := range resp.Results {
			require.Equal(t, plugin.FromParametric, r.Provenance, "no context: parametric only")
			require.True(t, r.Resolved)
			require.Equal(t, adapter.DocumentID(r.DocID), r.ID)
		}
	})

	t.Run("model failure trips the breaker, then it recovers", func(t *testing.T) {
		s.fault.fail.Store(true)
		var reasons []string
		for range 4 {
			code, resp := s.post(t, "/v1/search", plugin.SearchRequest{Query: query})
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, plugin.ModeFirstStageFallback, resp.Mode)
			require.Equal(t, plugin.FromBM25, resp.Results[0].Provenance)
			require.Equal(t, 1, *resp.Results[0].BM25Rank)
			reasons = append(reasons, resp.FallbackReason)
		}
		require.Equal(t, []string{"model_error", "model_error", "breaker_open", "breaker_open"}, reasons)
		s.fault.fail.Store(false)
		// The stack's OpenTimeout (2 s) is long enough that no request of the four above outlasts it on a
		// loaded machine (at 300 ms the third found the breaker half-open and failed its probe: model_error).
		time.Sleep(s.opts.OpenTimeout + 100*time.Millisecond) // past OpenTimeout: half-open lets a probe through
		code, resp := s.post(t, "/v1/search", plugin.SearchRequest{Query: query})
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, plugin.ModeReranked, resp.Mode, "recovered through half-open")
	})

	t.Run("a new document is in context after one refresh", func(t *testing.T) {
		doc := adapter.Doc{DocID: "Zorblatt Quasar Observatory", Title: "Zorblatt Quasar Observatory",
			Text:    "The Zorblatt Quasar Observatory is a fictional test observatory built in 2026 on the moon of Quillon.",
			Summary: "Zorblatt Quasar Observatory: fictional observatory on the moon of Quillon, built 2026."}
		_, err := s.es.Ingest(t.Context(), slices.Values([]adapter.Doc{doc}), adapter.IngestOptions{Refresh: true})
		require.NoError(t, err)
		hits, err := s.es.SearchNew(t.Context(), "Zorblatt Quasar Observatory Quillon", 100)
		require.NoError(t, err)
		require.Equal(t, doc.DocID, hits[0].DocID, "BM25 finds it first among new documents, no retraining")
		all, err := s.es.SearchAll(t.Context(), "Zorblatt Quasar Observatory Quillon", 100)
		require.NoError(t, err)
		code, resp := s.post(t, "/v1/search", plugin.SearchRequest{Query: "Zorblatt Quasar Observatory Quillon"})
		require.Equal(t, http.StatusOK, code)
		checkRerankedWith(t, s, resp, hits, all)
		require.Positive(t, resp.CandidatesInContext, "the new document is in the model's context (first hit)")
		t.Logf("fictional document: rank 1 %q via %s (p_copy %.3f)", resp.Results[0].DocID, resp.Results[0].Provenance, *resp.RouterProb)
		i := slices.IndexFunc(resp.Results, func(r plugin.Result) bool { return r.DocID == doc.DocID })
		require.GreaterOrEqual(t, i, 0, "the new document is among the model's answers")
		require.Equal(t, plugin.FromCopy, resp.Results[i].Provenance, "through the copy route")
		t.Logf("fictional document at rank %d", i+1)
	})
}
