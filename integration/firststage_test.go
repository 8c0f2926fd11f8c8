//go:build integration && ort && tokenizers

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/config"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/inference/dense"
	"github.com/icicle-search/sidecar/inference/loader"
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/internal/compress"
	"github.com/icicle-search/sidecar/internal/testenv"
	"github.com/icicle-search/sidecar/plugin"
	"github.com/icicle-search/sidecar/retrieve"
)

// faultyEncoder wraps the real encoder and fails while fail is set.
type faultyEncoder struct {
	inner *dense.Encoder
	fail  atomic.Bool
}

func (f *faultyEncoder) Query(ctx context.Context, q string) ([]float32, error) {
	if f.fail.Load() {
		return nil, errors.New("injected encoder failure")
	}
	return f.inner.Query(ctx, q)
}
func (f *faultyEncoder) Name() string { return f.inner.Name() }

// encoderDir is the configured default encoder, from the repository root.
func encoderDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", config.Default().FirstStage.EncoderDir))
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(dir, "model.onnx")); err != nil {
		testenv.Missing(t, "%s has no model.onnx: run scripts/encoder.sh", dir)
	}
	return dir
}

// TestFirstStage runs the first stage against the real node with the real encoder: documents ingested
// with their vectors, the hybrid baseline through /v1/search and /v1/rerank, its cosines checked against
// vectors computed here, and the faults (the encoder failing, an index without vectors) answered by BM25
// with their reasons while the model's breaker stays closed.
func TestFirstStage(t *testing.T) {
	esURL, lib := os.Getenv("ICICLE_ES_URL"), os.Getenv("ICICLE_ORT_LIB")
	if esURL == "" || lib == "" {
		testenv.Missing(t, "ICICLE_ES_URL and ICICLE_ORT_LIB must be set (scripts/test.sh sets both)")
	}
	require.NoError(t, ort.Init(lib))
	t.Cleanup(func() { _ = ort.Shutdown() })
	enc, err := loader.OpenEncoder(encoderDir(t), loader.EncoderOptions{Runtime: ort.Options{Threads: 2}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = enc.Close() })
	lm, err := loader.Open(defaultModelDir(), loader.Options{Runtime: ort.Options{Threads: 2}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lm.Close() })

	// 120 documents of nq_qed, the first 20 marked seen, with their vectors.
	index := fmt.Sprintf("icicle-first-%d", time.Now().UnixNano())
	es, err := adapter.New(adapter.Options{Addresses: []string{esURL}, Index: index, VectorDims: enc.Dims()}, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = http.DefaultClient.Do(mustReq(t, http.MethodDelete, esURL+"/"+index))
		_ = es.Close()
	})
	require.NoError(t, es.EnsureIndex(t.Context()))
	r, err := adapter.OpenCorpus(filepath.Join("..", "data", "nq_qed", "corpus.jsonl.gz"), adapter.CorpusLimits{})
	require.NoError(t, err)
	var docs []adapter.Doc
	for d := range r.All() {
		if len(docs) == 120 {
			break
		}
		d.Seen, d.Summary = len(docs) < 20, compress.Extractive(d.Text)
		docs = append(docs, d)
	}
	r.Close()
	embed := func(ctx context.Context, ds []adapter.Doc) ([][]float32, error) {
		texts := make([]string, len(ds))
		for i, d := range ds {
			texts[i] = dense.PassageText(d.Title, d.Text)
		}
		return enc.Passages(ctx, texts)
	}
	rep, err := es.Ingest(t.Context(), slices.Values(docs), adapter.IngestOptions{Refresh: true, KeepStored: true, Embed: embed, VectorModel: enc.Name()})
	require.NoError(t, err)
	require.Empty(t, rep.Failed)
	missing, err := es.CountWithoutVector(t.Context(), enc.Name())
	require.NoError(t, err)
	require.Zero(t, missing, "every ingested document has the encoder's vector")

	faulty := &faultyEncoder{inner: enc}
	stage, err := retrieve.New(es, faulty, retrieve.DefaultParams, nil)
	require.NoError(t, err)
	srv := newSidecar(es, lm.Engine, sidecarOptions{MaxBodyBytes: 4 << 20, RequestTimeout: 30 * time.Second,
		ESBudgetFraction: 0.3, MaxQueryChars: 1024, MaxHits: 1000, MaxCandidates: 10, Decode: inference.Options{BeamWidth: 10},
		MaxInflight: 1, QueueSize: 4, ConsecutiveFailures: 2, OpenTimeout: time.Minute, MinTopScore: -1e9, Policy: "model",
		FirstStage: stage, Model: plugin.ModelInfo{Name: lm.Manifest.Name}})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	const query = "when was the last time a wildcard team won the superbowl"
	qvec, err := enc.Query(t.Context(), query)
	require.NoError(t, err)
	byDocID := map[string]adapter.Doc{}
	for _, d := range docs {
		byDocID[d.DocID] = d
	}

	t.Run("the first stage alone: hybrid, its cosines those of the documents' vectors", func(t *testing.T) {
		resp := postSearch(t, hs.URL, plugin.SearchRequest{Query: query, Size: 10, Policy: plugin.PolicyFirstStage})
		require.Equal(t, plugin.ModeFirstStage, resp.Mode)
		require.NotNil(t, resp.Baseline)
		require.Equal(t, retrieve.BaselineHybrid, resp.Baseline.Kind)
		require.Equal(t, enc.Name(), resp.Baseline.Encoder)
		require.Len(t, resp.Results, 10)
		for i, res := range resp.Results {
			require.Equal(t, plugin.FromFirstStage, res.Provenance)
			require.Equal(t, i+1, *res.FirstStageRank)
			require.NotEmpty(t, res.Title, "a shown result has its title")
			require.NotNil(t, res.DenseScore, "every result has its cosine")
			d := byDocID[res.DocID]
			vs, err := enc.Passages(t.Context(), []string{dense.PassageText(d.Title, d.Text)})
			require.NoError(t, err)
			require.InDelta(t, dense.Dot(qvec, vs[0]), *res.DenseScore, 1e-4, "the index's cosine of %q", res.DocID)
			if i > 0 {
				require.GreaterOrEqual(t, resp.Results[i-1].Score, res.Score, "fused score order")
			}
		}
	})
	t.Run("the model reads the first stage's top new documents", func(t *testing.T) {
		resp := postSearch(t, hs.URL, plugin.SearchRequest{Query: query, Size: 10})
		require.Equal(t, plugin.ModeReranked, resp.Mode)
		require.Equal(t, retrieve.BaselineHybrid, resp.Baseline.Kind)
		require.NotEmpty(t, resp.Context)
		for _, d := range resp.Context {
			require.False(t, byDocID[d].Seen, "context documents are new: %q", d)
		}
		first := postSearch(t, hs.URL, plugin.SearchRequest{Query: query, Size: 100, Policy: plugin.PolicyFirstStage})
		var newOrder []string
		for _, res := range first.Results {
			if !byDocID[res.DocID].Seen {
				newOrder = append(newOrder, res.DocID)
			}
		}
		require.Equal(t, newOrder[:len(resp.Context)], resp.Context, "in the first stage's order")
	})
	t.Run("rerank re-scores the caller's hits", func(t *testing.T) {
		hits, err := es.SearchAll(t.Context(), query, 10)
		require.NoError(t, err)
		resp := postRerank(t, hs.URL, query, hits, plugin.PolicyFirstStage)
		require.Equal(t, retrieve.BaselineHybrid, resp.Baseline.Kind)
		for _, res := range resp.Results {
			require.NotNil(t, res.DenseScore)
			require.NotNil(t, res.BM25Rank, "the caller's rank stands for BM25's")
		}
	})
	t.Run("an encoder failure answers BM25 with its reason and leaves the breaker closed", func(t *testing.T) {
		faulty.fail.Store(true)
		defer faulty.fail.Store(false)
		want := bm25All(t, es, query, 10)
		for range 4 { // twice the breaker's failure count
			resp := postSearch(t, hs.URL, plugin.SearchRequest{Query: query, Size: 10})
			require.Equal(t, retrieve.BaselineBM25, resp.Baseline.Kind)
			require.Equal(t, retrieve.ReasonEncoderError, resp.Baseline.Reason)
			require.Equal(t, plugin.ModeReranked, resp.Mode, "the model still reranks, over BM25's candidates")
			base := postSearch(t, hs.URL, plugin.SearchRequest{Query: query, Size: 10, Policy: plugin.PolicyFirstStage})
			require.Equal(t, want, docIDs(base.Results))
			require.Equal(t, plugin.FromBM25, base.Results[0].Provenance)
		}
		metrics := getText(t, hs.URL+"/metrics")
		require.Contains(t, metrics, `icicle_breaker_transitions_total{to="open"} 0`)
		require.Contains(t, metrics, `icicle_first_stage_total{baseline="bm25",reason="encoder_error"} 8`)
	})
	t.Run("a request for more new documents than half the depth: BM25 over new ones from one deeper search", func(t *testing.T) {
		// Depth 20 and 30 new documents (more than the 25 of the ranking over all can hold): BM25 over all goes
		// 40 deep, and its first 20 new documents must be BM25 over new ones, with the same scores, fused with
		// the kNN over new documents as their own search would be.
		const broad = "the history of the united states"
		p := retrieve.Params{Method: retrieve.MethodLinear, DenseWeight: 0.8, Depth: 20, KNN: 5}
		st, err := retrieve.New(es, enc, p, nil)
		require.NoError(t, err)
		l, err := st.Search(t.Context(), retrieve.Request{Query: broad, NewK: 30, Size: 10})
		require.NoError(t, err)
		require.Equal(t, retrieve.BaselineHybrid, l.Baseline)

		deep, err := es.SearchLean(t.Context(), broad, 40, false)
		require.NoError(t, err)
		require.Len(t, deep, 40, "the query matches more than 40 of the 120 documents")
		newLean, err := es.SearchLean(t.Context(), broad, 20, true)
		require.NoError(t, err)
		var fromDeep []adapter.Hit
		for _, h := range deep {
			if !h.Seen && len(fromDeep) < 20 {
				fromDeep = append(fromDeep, h)
			}
		}
		require.Len(t, fromDeep, 20)
		for i := range newLean {
			require.Equal(t, newLean[i].DocID, fromDeep[i].DocID, "rank %d", i+1)
			require.Equal(t, newLean[i].BM25, fromDeep[i].BM25, "rank %d", i+1)
		}

		vec, err := enc.Query(t.Context(), broad)
		require.NoError(t, err)
		ids := make([]string, len(newLean))
		for i, h := range newLean {
			ids[i] = h.ID
		}
		res, err := es.Dense(t.Context(), vec, []adapter.DenseQuery{{IDs: ids}, {K: p.KNN, OnlyNew: true}})
		require.NoError(t, err)
		exact := map[string]float64{}
		for _, h := range append(res[0], res[1]...) {
			if _, ok := exact[h.ID]; !ok {
				exact[h.ID] = h.Dense
			}
		}
		want := retrieve.Fuse(newLean, res[1], exact, p)
		require.Equal(t, hitDocIDs(want), hitDocIDs(l.New))
		for _, h := range l.New {
			require.False(t, h.Seen)
			require.NotEmpty(t, h.Title)
		}
	})
	t.Run("an index without vectors answers BM25 with its reason", func(t *testing.T) {
		plain := fmt.Sprintf("icicle-novec-%d", time.Now().UnixNano())
		pes, err := adapter.New(adapter.Options{Addresses: []string{esURL}, Index: plain}, nil)
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = http.DefaultClient.Do(mustReq(t, http.MethodDelete, esURL+"/"+plain))
			_ = pes.Close()
		})
		require.NoError(t, pes.EnsureIndex(t.Context()))
		_, err = pes.Ingest(t.Context(), slices.Values(docs[:30]), adapter.IngestOptions{Refresh: true})
		require.NoError(t, err)
		// An adapter that expects vectors, over an index that has none: the dense searches fail.
		ves, err := adapter.New(adapter.Options{Addresses: []string{esURL}, Index: plain, VectorDims: enc.Dims()}, nil)
		require.NoError(t, err)
		defer ves.Close()
		st, err := retrieve.New(ves, enc, retrieve.DefaultParams, nil)
		require.NoError(t, err)
		l, err := st.Search(t.Context(), retrieve.Request{Query: query, NewK: 5, Size: 10})
		require.NoError(t, err)
		require.Equal(t, retrieve.BaselineBM25, l.Baseline)
		require.Equal(t, retrieve.ReasonDenseUnavailable, l.Reason)
		require.Equal(t, bm25All(t, pes, query, len(l.All)), hitDocIDs(l.All))
		require.NotEmpty(t, l.All[0].Title)
	})
}

// TestEncoderStartupFaults starts `icicle serve` with a broken encoder directory: it must stop at once,
// naming what is wrong, before it serves anything.
func TestEncoderStartupFaults(t *testing.T) {
	esURL, lib := os.Getenv("ICICLE_ES_URL"), os.Getenv("ICICLE_ORT_LIB")
	if esURL == "" || lib == "" {
		testenv.Missing(t, "ICICLE_ES_URL and ICICLE_ORT_LIB must be set (scripts/test.sh sets both)")
	}
	good := encoderDir(t)
	bin := buildIcicle(t)
	modelDir, err := filepath.Abs(defaultModelDir())
	require.NoError(t, err)
	man, err := os.ReadFile(filepath.Join(good, dense.ManifestFile))
	require.NoError(t, err)
	tokenizer, err := os.ReadFile(filepath.Join(good, "tokenizer.json"))
	require.NoError(t, err)

	missing := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(missing, dense.ManifestFile), man, 0o644))
	corrupt := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(corrupt, dense.ManifestFile), man, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(corrupt, "tokenizer.json"), tokenizer, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(corrupt, "model.onnx"), []byte("truncated"), 0o644))
	for _, tc := range []struct{ name, dir, want string }{
		{"no encoder.json", t.TempDir(), dense.ManifestFile},
		{"the graph missing", missing, "model.onnx"},
		{"the graph corrupt", corrupt, filepath.Join(corrupt, "model.onnx")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "serve")
			cmd.Env = append(os.Environ(), "ICICLE_ELASTICSEARCH_ADDRESSES="+esURL, "ICICLE_MODEL_DIR="+modelDir,
				"ICICLE_ORT_LIB="+lib, "ICICLE_SERVER_ADDR=127.0.0.1:0", "ICICLE_FIRST_STAGE_ENCODER_DIR="+tc.dir)
			var logs bytes.Buffer
			cmd.Stdout, cmd.Stderr = &logs, &logs
			err := cmd.Run()
			require.Error(t, err, "serve must not start with a broken encoder:\n%s", logs.String())
			require.NoError(t, ctx.Err(), "serve must stop at once, not hang")
			require.Contains(t, logs.String(), "first_stage.encoder_dir")
			require.Contains(t, logs.String(), tc.want)
		})
	}
}

func postSearch(t *testing.T, url string, req plugin.SearchRequest) plugin.Response {
	t.Helper()
	body, _ := json.Marshal(req)
	return postResponse(t, url+"/v1/search", body)
}

func postRerank(t *testing.T, url, query string, hits []adapter.Hit, policy string) plugin.Response {
	t.Helper()
	req := plugin.RerankRequest{Query: query, Size: len(hits), Policy: policy}
	for _, h := range hits {
		src, _ := json.Marshal(map[string]string{"title": h.Title, "docid": h.DocID, "summary": h.Summary})
		req.Hits = append(req.Hits, plugin.ESHit{ID: h.ID, Score: &h.Score, Source: src})
	}
	body, _ := json.Marshal(req)
	return postResponse(t, url+"/v1/rerank", body)
}

func postResponse(t *testing.T, url string, body []byte) plugin.Response {
	t.Helper()
	res, err := http.Post(url, "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	require.Equal(t, http.StatusOK, res.StatusCode, string(b))
	var resp plugin.Response
	require.NoError(t, json.Unmarshal(b, &resp))
	return resp
}

func hitDocIDs(hs []adapter.Hit) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.DocID
	}
	return out
}
