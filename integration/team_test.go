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
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/dropin"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/inference/dense"
	"github.com/icicle-search/sidecar/inference/loader"
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/internal/compress"
	"github.com/icicle-search/sidecar/internal/testenv"
	"github.com/icicle-search/sidecar/plugin"
	"github.com/icicle-search/sidecar/retrieve"
)

// teamFields is how a team's cranfield index is laid out: its own names, the docid in _id, the sidecar's
// fields prefixed.
var teamFields = adapter.Fields{DocID: adapter.IDField, Title: "name", Search: []string{"name^2", "icicle_summary", "body"},
	Body: []string{"body"}, Summary: "icicle_summary", Seen: "icicle_seen", Vector: "icicle_vector", VectorModel: "icicle_vector_model"}

// esDo sends one request to the node and decodes the answer into out (when set).
func esDo(t *testing.T, method, url, ctype string, body []byte, out any) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", ctype)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	require.Less(t, res.StatusCode, 300, "%s %s: %s", method, url, b)
	if out != nil {
		require.NoError(t, json.Unmarshal(b, out))
	}
}

// teamIndex creates a team's own index of n cranfield documents outside the sidecar: 3 shards, a custom
// analyzer, fields name and body (and two the sidecar never reads), the docid in _id.
func teamIndex(t *testing.T, esURL string, n int) string {
	t.Helper()
	index := fmt.Sprintf("team-cranfield-%d", time.Now().UnixNano())
	esDo(t, http.MethodPut, esURL+"/"+index, "application/json", []byte(`{
	  "settings": {"number_of_shards": 3, "analysis": {"analyzer": {"team_text": {"type": "custom", "tokenizer": "standard", "filter": ["lowercase"]}}}},
	  "mappings": {"properties": {"name": {"type": "text", "analyzer": "team_text"}, "body": {"type": "text", "analyzer": "team_text"},
	    "source": {"type": "keyword"}, "loaded": {"type": "date"}}}}`), nil)
	t.Cleanup(func() { _, _ = http.DefaultClient.Do(mustReq(t, http.MethodDelete, esURL+"/"+index)) })
	r, err := adapter.OpenCorpus(filepath.Join("..", "data", "cranfield", "corpus.jsonl.gz"), adapter.CorpusLimits{})
	require.NoError(t, err)
	defer r.Close()
	var bulk bytes.Buffer
	enc := json.NewEncoder(&bulk)
	count := 0
	for d := range r.All() {
		if count == n {
			break
		}
		count++
		_ = enc.Encode(map[string]any{"index": map[string]any{"_id": d.DocID}})
		_ = enc.Encode(map[string]any{"name": d.Title, "body": d.Text, "source": "cranfield", "loaded": "2026-11-25"})
	}
	var res struct {
		Errors bool `json:"errors"`
	}
	esDo(t, http.MethodPost, esURL+"/"+index+"/_bulk?refresh=true", "application/x-ndjson", bulk.Bytes(), &res)
	require.False(t, res.Errors)
	return index
}

// teamSources reads every document's _source, split into the team's fields and the sidecar's.
func teamSources(t *testing.T, esURL, index string) (team map[string]string, sidecar map[string]map[string]json.RawMessage) {
	t.Helper()
	var res struct {
		Hits struct {
			Hits []struct {
				ID     string                     `json:"_id"`
				Source map[string]json.RawMessage `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	esDo(t, http.MethodPost, esURL+"/"+index+"/_search?size=1000", "application/json", []byte(`{"query":{"match_all":{}}}`), &res)
	team, sidecar = map[string]string{}, map[string]map[string]json.RawMessage{}
	for _, h := range res.Hits.Hits {
		own := map[string]json.RawMessage{}
		for k, v := range h.Source {
			if strings.HasPrefix(k, "icicle_") {
				own[k] = v
				delete(h.Source, k)
			}
		}
		b, _ := json.Marshal(h.Source) // map keys sorted: a canonical form of the team's fields
		team[h.ID], sidecar[h.ID] = string(b), own
	}
	return team, sidecar
}

// TestTeamIndex plugs the sidecar into an index it did not make: its fields are added, an enrichment
// interrupted halfway and run again gives every document its summary, vector and seen flag once and leaves
// the team's fields byte-identical, and /v1/search, /v1/rerank and the drop-in rank it by its own fields.
func TestTeamIndex(t *testing.T) {
	esURL, lib := os.Getenv("ICICLE_ES_URL"), os.Getenv("ICICLE_ORT_LIB")
	if esURL == "" || lib == "" {
		testenv.Missing(t, "ICICLE_ES_URL and ICICLE_ORT_LIB must be set (scripts/test.sh sets both)")
	}
	require.NoError(t, ort.Init(lib))
	t.Cleanup(func() { _ = ort.Shutdown() })
	enc, err := loader.OpenEncoder(encoderDir(t), loader.EncoderOptions{Runtime: ort.Options{Threads: 2}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = enc.Close() })

	index := teamIndex(t, esURL, 60)
	before, _ := teamSources(t, esURL, index)
	require.Len(t, before, 60)
	es, err := adapter.New(adapter.Options{Addresses: []string{esURL}, Index: index, VectorDims: enc.Dims(), Fields: teamFields}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = es.Close() })
	require.NoError(t, es.EnsureIndex(t.Context()), "the sidecar's fields are added to the team's mapping")
	var mapping map[string]struct {
		Mappings struct {
			Properties map[string]struct {
				Type string `json:"type"`
			} `json:"properties"`
		} `json:"mappings"`
	}
	esDo(t, http.MethodGet, esURL+"/"+index+"/_mapping", "application/json", nil, &mapping)
	props := mapping[index].Mappings.Properties
	require.Equal(t, "text", props["icicle_summary"].Type)
	require.Equal(t, "boolean", props["icicle_seen"].Type)
	require.Equal(t, "dense_vector", props["icicle_vector"].Type)

	embedded := map[string]int{}
	embed := func(ctx context.Context, docs []adapter.Doc) ([][]float32, error) {
		texts := make([]string, len(docs))
		for i, d := range docs {
			embedded[d.DocID]++
			texts[i] = dense.PassageText(d.Title, d.Text)
		}
		return enc.Passages(ctx, texts)
	}
	pages := 0
	interrupted := errors.New("interrupted")
	summarize := func(_ context.Context, docs []adapter.Doc) ([]string, error) {
		if pages == 2 {
			return nil, interrupted // the run stops here, as a killed `icicle enrich` would
		}
		pages++
		out := make([]string, len(docs))
		for i, d := range docs {
			out[i] = compress.Extractive(d.Text)
		}
		return out, nil
	}
	seen := map[string]bool{}
	opts := adapter.EnrichOptions{Embed: embed, VectorModel: enc.Name(), Summarize: summarize, Seen: seen, PageSize: 16}
	rep, err := es.Enrich(t.Context(), opts)
	require.ErrorIs(t, err, interrupted)
	require.Equal(t, 60, rep.Needed)
	require.Equal(t, 32, rep.Written)
	esDo(t, http.MethodPost, esURL+"/"+index+"/_refresh", "application/json", nil, nil)
	pages = -100 // no more interruptions
	rep, err = es.Enrich(t.Context(), opts)
	require.NoError(t, err)
	require.Equal(t, 28, rep.Needed, "the second run does only the rest")
	require.Equal(t, 28, rep.Written)
	require.Len(t, embedded, 60)
	for d, n := range embedded {
		require.Equal(t, 1, n, "%q embedded once over both runs", d)
	}
	after, own := teamSources(t, esURL, index)
	require.Equal(t, before, after, "the team's own fields are byte-identical")
	for id, o := range own {
		require.Contains(t, o, "icicle_summary", id)
		require.JSONEq(t, "false", string(o["icicle_seen"]), id)
		require.JSONEq(t, `"`+enc.Name()+`"`, string(o["icicle_vector_model"]), id)
	}

	// The sidecar on the team's index.
	lm, err := loader.Open(defaultModelDir(), loader.Options{Runtime: ort.Options{Threads: 2}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lm.Close() })
	stage, err := retrieve.New(es, enc, retrieve.DefaultParams, nil)
	require.NoError(t, err)
	srv := newSidecar(es, lm.Engine, sidecarOptions{MaxBodyBytes: 4 << 20, RequestTimeout: 30 * time.Second,
		ESBudgetFraction: 0.1, MaxQueryChars: 1024, MaxHits: 1000, MaxCandidates: 10, Decode: inference.Options{BeamWidth: 10},
		MaxInflight: 1, QueueSize: 4, MinTopScore: -1e9, Policy: "model", FirstStage: stage,
		Fields:         dropin.SourceFields{DocID: teamFields.DocID, Title: teamFields.Title, Summary: teamFields.Summary},
		AllowedIndices: []string{index}, Model: plugin.ModelInfo{Name: lm.Manifest.Name}})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	const query = "similarity laws for models of heated high speed aircraft"

	first := postSearch(t, hs.URL, plugin.SearchRequest{Query: query, Size: 5, Policy: plugin.PolicyFirstStage})
	require.Equal(t, retrieve.BaselineHybrid, first.Baseline.Kind)
	for _, r := range first.Results {
		require.NotEmpty(t, r.Title, "titles come from the team's name field")
		require.Equal(t, r.ID, r.DocID, "the docid is the _id")
		require.NotNil(t, r.DenseScore)
	}
	resp := postSearch(t, hs.URL, plugin.SearchRequest{Query: query, Size: 5})
	require.Equal(t, plugin.ModeReranked, resp.Mode, "the model ranks the team's documents")
	require.NotEmpty(t, resp.Context)

	var raw struct {
		Hits struct {
			Hits []json.RawMessage `json:"hits"`
		} `json:"hits"`
	}
	esDo(t, http.MethodPost, esURL+"/"+index+"/_search?size=5", "application/json",
		[]byte(`{"query":{"match":{"body":"`+query+`"}},"_source":["name","icicle_summary"]}`), &raw)
	var hits []plugin.ESHit
	for _, h := range raw.Hits.Hits {
		var e plugin.ESHit
		require.NoError(t, json.Unmarshal(h, &e))
		hits = append(hits, e)
	}
	body, _ := json.Marshal(plugin.RerankRequest{Query: query, Hits: hits, Size: 5})
	rr := postResponse(t, hs.URL+"/v1/rerank", body)
	require.Equal(t, plugin.ModeReranked, rr.Mode, "/v1/rerank reads the team's fields")
	require.Equal(t, retrieve.BaselineHybrid, rr.Baseline.Kind)

	var dropin struct {
		Icicle dropin.Info `json:"icicle"`
	}
	esDo(t, http.MethodPost, hs.URL+"/"+index+"/_search", "application/json", []byte(`{"query":{"match":{"body":"`+query+`"}},"size":3}`), &dropin)
	require.Equal(t, plugin.ModeReranked, dropin.Icicle.Mode, "the drop-in reranks the team's index, reason %q", dropin.Icicle.Reason)
}

// TestTeamIndexRefusesConflictingFields: a team index whose field already has another type under the
// name the sidecar was given is refused, naming the field, and nothing is added.
func TestTeamIndexRefusesConflictingFields(t *testing.T) {
	esURL := os.Getenv("ICICLE_ES_URL")
	if esURL == "" {
		testenv.Missing(t, "ICICLE_ES_URL must be set (scripts/test.sh sets it)")
	}
	index := teamIndex(t, esURL, 3)
	esDo(t, http.MethodPut, esURL+"/"+index+"/_mapping", "application/json", []byte(`{"properties":{"icicle_seen":{"type":"keyword"}}}`), nil)
	es, err := adapter.New(adapter.Options{Addresses: []string{esURL}, Index: index, VectorDims: 8, Fields: teamFields}, nil)
	require.NoError(t, err)
	defer es.Close()
	err = es.EnsureIndex(t.Context())
	require.ErrorIs(t, err, adapter.ErrMappingMismatch)
	require.ErrorContains(t, err, "icicle_seen")
	require.ErrorContains(t, err, `type is "keyword"`)
	var mapping map[string]struct {
		Mappings struct {
			Properties map[string]any `json:"properties"`
		} `json:"mappings"`
	}
	esDo(t, http.MethodGet, esURL+"/"+index+"/_mapping", "application/json", nil, &mapping)
	require.NotContains(t, mapping[index].Mappings.Properties, "icicle_summary", "nothing added when refused")
	_, err = es.Ingest(t.Context(), nil, adapter.IngestOptions{})
	require.ErrorIs(t, err, adapter.ErrInvalidArgument, "ingest never writes a team's index")
}
