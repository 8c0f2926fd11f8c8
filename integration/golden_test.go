//go:build integration && ort && tokenizers

package integration

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/internal/dataset"
	"github.com/icicle-search/sidecar/internal/testenv"
	"github.com/icicle-search/sidecar/plugin"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite integration/testdata/golden_rankings.json.gz")

// goldenSets are the sets whose rankings the golden file pins: each with its fitted first stage and its
// precomputed vectors, searched with its evaluation queries.
var goldenSets = []struct{ name, split string }{{"nq_qed", "dev"}, {"cranfield", ""}, {"cacm", ""}}

// goldenFile holds, per set and per query, the top 10 docids of the first stage alone (policy first_stage)
// and of the served default (no reader: the same order, which the file records separately so that a default
// that starts to differ shows).
type goldenFile map[string]map[string]goldenRanking

type goldenRanking struct {
	FirstStage []string `json:"first_stage"`
	Default    []string `json:"default"`
}

// TestGoldenRankings: through `icicle ingest` and `icicle serve`, as a team runs them, the first stage's and the
// served default's top 10 for every evaluation query of nq_qed (dev), cranfield and cacm are the committed
// ones: a change that moves any ranking fails here and must be intended (go test -run TestGoldenRankings
// -update-golden rewrites the file; ICICLE_GOLDEN_BIN names another build of icicle to record with, such as
// the code before a change). ICICLE_GOLDEN_QUERIES=N checks N queries per set, spread evenly over its
// evaluation queries (make test checks 40 per set: all 1,632 at two requests each take over half an hour on
// two slow cores; make test-full checks all of them).
func TestGoldenRankings(t *testing.T) {
	sample := 0
	if v := os.Getenv("ICICLE_GOLDEN_QUERIES"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "ICICLE_GOLDEN_QUERIES must be a number of queries per set")
		require.Positive(t, n, "ICICLE_GOLDEN_QUERIES must be a number of queries per set")
		require.False(t, *updateGolden, "-update-golden records every query: unset ICICLE_GOLDEN_QUERIES")
		sample = n
	}
	bin, esURL, lib := realServeParts(t)
	if other := os.Getenv("ICICLE_GOLDEN_BIN"); other != "" {
		bin = other
	}
	path := filepath.Join("testdata", goldenName())
	want := goldenFile{}
	if !*updateGolden {
		want = readGolden(t, path)
	}
	got := goldenFile{}
	encoderDir, err := filepath.Abs(filepath.Join("..", "models", "bge-small-en-v15-q"))
	require.NoError(t, err)
	for _, set := range goldenSets {
		t.Run(set.name, func(t *testing.T) {
			data := filepath.Join("..", "data", set.name)
			index := fmt.Sprintf("icicle-golden-%s-%d", set.name, time.Now().UnixNano())
			t.Cleanup(func() { _, _ = http.DefaultClient.Do(mustReq(t, http.MethodDelete, esURL+"/"+index)) })
			// The same index every run: the sidecar's mapping, the documents written in corpus order by one
			// bulk writer and made searchable once (one segment, no merges), so that the approximate kNN's graph,
			// built in insertion order, is the same graph each time.
			es, err := adapter.New(adapter.Options{Addresses: []string{esURL}, Index: index, VectorDims: 384}, nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = es.Close() })
			require.NoError(t, es.EnsureIndex(t.Context()))
			settings, err := http.NewRequestWithContext(t.Context(), http.MethodPut, esURL+"/"+index+"/_settings",
				strings.NewReader(`{"index": {"refresh_interval": "-1"}}`))
			require.NoError(t, err)
			settings.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(settings)
			require.NoError(t, err)
			require.NoError(t, res.Body.Close())
			require.Equal(t, http.StatusOK, res.StatusCode)
			ingest := exec.Command(bin, "ingest", "-corpus", filepath.Join(data, "corpus.jsonl.gz"),
				"-vectors", filepath.Join(data, "vectors.bge-small-en-v1.5-q.gz"), "-quiet", "-workers", "1", "-refresh=false")
			ingest.Env = append(os.Environ(), "ICICLE_ELASTICSEARCH_ADDRESSES="+esURL, "ICICLE_ELASTICSEARCH_INDEX="+index,
				"ICICLE_ORT_LIB="+lib, "ICICLE_FIRST_STAGE_ENCODER_DIR="+encoderDir, "ICICLE_MODEL_DIR=")
			out, err := ingest.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "0 embedded", "every vector came from the set's file: %s", out)
			res, err = http.DefaultClient.Do(mustReq(t, http.MethodPost, esURL+"/"+index+"/_refresh"))
			require.NoError(t, err)
			require.NoError(t, res.Body.Close())

			params, err := filepath.Abs(filepath.Join(data, "first_stage.json"))
			require.NoError(t, err)
			url := serveDefault(t, bin, esURL, index, "", lib, "ICICLE_FIRST_STAGE_PARAMS_FILE="+params)
			qrels, err := dataset.ReadQrels(filepath.Join(data, "qrels.tsv"))
			require.NoError(t, err)
			qs, err := dataset.ReadLabelled(filepath.Join(data, "queries.jsonl.gz"), set.split, 1<<20, qrels, nil)
			require.NoError(t, err)
			require.NotEmpty(t, qs)
			if !*updateGolden {
				require.Len(t, qs, len(want[set.name]), "the same queries")
			}
			if sample > 0 && sample < len(qs) {
				picked := make([]dataset.Labelled, sample)
				for i := range picked {
					picked[i] = qs[i*len(qs)/sample]
				}
				qs = picked
			}
			// Four requests at a time: a request spends most of its time waiting on the node and the
			// encoder's session, so this is faster than one at a time on two cores, and the rankings do not
			// depend on it.
			rankings := make([]goldenRanking, len(qs))
			var wg sync.WaitGroup
			next := make(chan int)
			for range 4 {
				wg.Go(func() {
					for i := range next {
						first, err := searchPolicy(url, qs[i].Text, plugin.PolicyFirstStage)
						if err == nil {
							var def plugin.Response
							if def, err = searchPolicy(url, qs[i].Text, ""); err == nil && def.Mode != plugin.ModeFirstStage {
								err = fmt.Errorf("the default answered mode %s, not the first stage's order", def.Mode)
							}
							rankings[i] = goldenRanking{FirstStage: docIDs(first.Results), Default: docIDs(def.Results)}
						}
						if err != nil {
							t.Errorf("query %s: %v", qs[i].ID, err)
						}
					}
				})
			}
			for i := range qs {
				next <- i
			}
			close(next)
			wg.Wait()
			require.False(t, t.Failed())
			byQID := make(map[string]goldenRanking, len(qs))
			for i, q := range qs {
				byQID[q.ID] = rankings[i]
			}
			got[set.name] = byQID
			if *updateGolden {
				return
			}
			var moved []string
			for _, q := range qs {
				w, ok := want[set.name][q.ID]
				require.True(t, ok, "query %s is in the golden file", q.ID)
				g := byQID[q.ID]
				if strings.Join(g.FirstStage, "\x00") != strings.Join(w.FirstStage, "\x00") ||
					strings.Join(g.Default, "\x00") != strings.Join(w.Default, "\x00") {
					moved = append(moved, q.ID)
				}
			}
			require.Empty(t, moved, "queries whose top 10 moved")
		})
	}
	if *updateGolden {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		require.NoError(t, json.NewEncoder(zw).Encode(got))
		require.NoError(t, zw.Close())
		require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
	}
}

// goldenName is the golden file for this machine's kind of CPU (testenv.Int8Kind): the default encoder is int8,
// and without VNNI a few top 10s trade places (13 of 120 queries on an AVX2-only Zen 3; no top 1), so each kind
// pins its own rankings: golden_rankings.json.gz for VNNI, golden_rankings.<kind>.json.gz otherwise.
func goldenName() string {
	if k := testenv.Int8Kind(); k != "vnni" {
		return "golden_rankings." + k + ".json.gz"
	}
	return "golden_rankings.json.gz"
}

func readGolden(t *testing.T, path string) goldenFile {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err, "no golden rankings for this kind of CPU (goldenName); go test -tags 'integration ort tokenizers' -run TestGoldenRankings -update-golden ./integration/ writes them")
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	var g goldenFile
	require.NoError(t, json.NewDecoder(zr).Decode(&g))
	return g
}

// searchPolicy asks /v1/search for the top 10 under policy ("" the configured one); safe from any goroutine.
func searchPolicy(url, q, policy string) (plugin.Response, error) {
	body, _ := json.Marshal(plugin.SearchRequest{Query: q, Size: 10, Policy: policy})
	res, err := http.Post(url+"/v1/search", "application/json", bytes.NewReader(body))
	if err != nil {
		return plugin.Response{}, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return plugin.Response{}, fmt.Errorf("status %d: %s", res.StatusCode, b)
	}
	var resp plugin.Response
	return resp, json.NewDecoder(res.Body).Decode(&resp)
}
