//go:build integration && ort && tokenizers

package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/config"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/internal/compress"
	"github.com/icicle-search/sidecar/internal/gate"
	"github.com/icicle-search/sidecar/plugin"
)

// TestConfiguredDefaultIsTheGate runs `icicle serve` as a user would, with no config file (config.Load's
// defaults) against the real node and the real model, and checks the configured default: policy gate,
// BM25 over the whole index as the baseline, the gate loaded from the model directory (or the safe
// default without gate.json, under which the model is not run), the gate's report in every response and its
// decisions in /metrics.
func TestConfiguredDefaultIsTheGate(t *testing.T) {
	bin, esURL, lib := realServeParts(t)

	modelDir, err := filepath.Abs(defaultModelDir())
	require.NoError(t, err)
	index := fmt.Sprintf("icicle-gate-%d", time.Now().UnixNano())
	es := ingestForGate(t, esURL, index, modelDir, 200)

	queries := []string{"who sang the theme song for the office", "when was the last time a wildcard team won the superbowl",
		"what is the medical term for webbed toes"}

	// A model directory without gate.json: the default gate never overrides BM25.
	noGate := linkModel(t, modelDir)
	url := serveDefault(t, bin, esURL, index, noGate, lib)
	var info plugin.ModelInfo
	getJSON(t, url+"/v1/model", &info)
	require.NotNil(t, info.Gate)
	require.True(t, info.Gate.Never)
	require.Contains(t, info.Gate.Source, "default")
	for _, q := range queries {
		resp := searchDefault(t, url, q)
		require.Equal(t, plugin.ModeGated, resp.Mode, "the configured default policy is gate")
		require.NotNil(t, resp.Gate)
		require.Equal(t, plugin.GateKeep, resp.Gate.Decision)
		require.Equal(t, bm25All(t, es, q, 10), docIDs(resp.Results), "without a gate the answer is BM25 over the whole index")
		require.Equal(t, plugin.ReasonGateIdle, resp.Gate.Reason, "a gate that never promotes: the model is not run")
		require.Empty(t, resp.Gate.ModelTop)
		require.Nil(t, resp.RouterProb)
		require.Zero(t, resp.Timings.Model)
		require.Zero(t, resp.CandidatesInContext)
	}
	metrics := getText(t, url+"/metrics")
	require.Contains(t, metrics, fmt.Sprintf(`icicle_gate_decisions_total{decision="keep_first_stage"} %d`, len(queries)))
	require.Contains(t, metrics, `icicle_gate_decisions_total{decision="promote_model"} 0`)

	// A gate.json that always promotes: the model's top first, then BM25 over the whole index without it.
	always := linkModel(t, modelDir)
	n := len(gate.FeatureNames)
	ones := slices.Repeat([]float64{1}, n)
	g := &gate.Gate{Version: gate.Version, Features: gate.FeatureNames, Mean: make([]float64, n), Scale: ones,
		Weights: make([]float64, n), Bias: 10, Threshold: 0.5}
	_, err = g.Save(always)
	require.NoError(t, err)
	url = serveDefault(t, bin, esURL, index, always, lib)
	getJSON(t, url+"/v1/model", &info)
	require.False(t, info.Gate.Never)
	require.Equal(t, filepath.Join(always, gate.FileName), info.Gate.Source)
	for _, q := range queries {
		resp := searchDefault(t, url, q)
		require.Equal(t, plugin.ModeGated, resp.Mode)
		require.NotNil(t, resp.RouterProb, "a gate that can promote: the model runs")
		base := bm25All(t, es, q, 10)
		if resp.Gate.ModelTop == base[0] {
			require.Equal(t, plugin.GateKeep, resp.Gate.Decision)
			require.Equal(t, base, docIDs(resp.Results))
			continue
		}
		require.Equal(t, plugin.GatePromote, resp.Gate.Decision)
		require.Equal(t, resp.Gate.ModelTop, resp.Results[0].DocID)
		require.Contains(t, []plugin.Provenance{plugin.FromCopy, plugin.FromParametric}, resp.Results[0].Provenance)
		rest := slices.DeleteFunc(slices.Clone(base), func(d string) bool { return d == resp.Gate.ModelTop })
		require.Equal(t, rest[:9], docIDs(resp.Results)[1:])
	}
}

// ingestForGate indexes every seen document of the model and newDocs others.
func ingestForGate(t *testing.T, esURL, index, modelDir string, newDocs int) *adapter.Adapter {
	t.Helper()
	es, err := adapter.New(adapter.Options{Addresses: []string{esURL}, Index: index}, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = http.DefaultClient.Do(mustReq(t, http.MethodDelete, esURL+"/"+index))
		_ = es.Close()
	})
	require.NoError(t, es.EnsureIndex(t.Context()))
	seen, err := inference.ReadDocIDs(filepath.Join(modelDir, "seen_docids.txt"))
	require.NoError(t, err)
	isSeen := make(map[string]bool, len(seen))
	for _, d := range seen {
		isSeen[d] = true
	}
	r, err := adapter.OpenCorpus(filepath.Join("..", "data", "nq_qed", "corpus.jsonl.gz"), adapter.CorpusLimits{})
	require.NoError(t, err)
	defer r.Close()
	var docs []adapter.Doc
	for d := range r.All() {
		d.Seen = isSeen[d.DocID]
		if !d.Seen {
			if newDocs == 0 {
				continue
			}
			newDocs--
		}
		d.Summary = compress.Extractive(d.Text)
		docs = append(docs, d)
	}
	rep, err := es.Ingest(t.Context(), slices.Values(docs), adapter.IngestOptions{Refresh: true})
	require.NoError(t, err)
	require.Empty(t, rep.Failed)
	return es
}

// linkModel makes a model directory of links to dir's files, without gate.json.
func linkModel(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() == gate.FileName {
			continue
		}
		require.NoError(t, os.Symlink(filepath.Join(dir, e.Name()), filepath.Join(out, e.Name())))
	}
	return out
}

// serveDefault starts `icicle serve` with no config file: config.Load's defaults plus the connection (and
// env, ICICLE_* settings of a test's own).
// realServeParts returns what a test that runs `icicle serve` needs: an icicle binary built with the native
// tags (buildIcicle), the real node's URL and the ONNX Runtime library (scripts/test.sh sets ICICLE_ES_URL and
// ICICLE_ORT_LIB; the test fails without them).
func realServeParts(t *testing.T) (bin, esURL, lib string) {
	t.Helper()
	esURL, lib = os.Getenv("ICICLE_ES_URL"), os.Getenv("ICICLE_ORT_LIB")
	if esURL == "" || lib == "" {
		t.Fatal("ICICLE_ES_URL and ICICLE_ORT_LIB must be set (scripts/test.sh sets both): this test needs the real node and model")
	}
	return buildIcicle(t), esURL, lib
}

// buildIcicle builds cmd/icicle with the native tags into the test's temporary directory.
func buildIcicle(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "icicle")
	out, err := exec.Command("go", "build", "-tags", "ort tokenizers", "-o", bin, "../cmd/icicle").CombinedOutput()
	require.NoError(t, err, "build icicle: %s", out)
	return bin
}

func serveDefault(t *testing.T, bin, esURL, index, modelDir, lib string, env ...string) string {
	t.Helper()
	url, _ := startServe(t, bin, esURL, index, modelDir, lib, env...)
	return url
}

// startServe is serveDefault that also returns a stop, which interrupts the sidecar and waits for it to exit
// (it runs at the test's end otherwise; a second call does nothing).
func startServe(t *testing.T, bin, esURL, index, modelDir, lib string, env ...string) (url string, stop func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	cmd := exec.Command(bin, "serve")
	env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "ICICLE_POLICY_") }), env...)
	// The policy is the configured default; only the connection is set, and the request timeout raised so
	// that a loaded CI machine does not turn the model's answer into a model_timeout fallback.
	// The default encoder, found from the repository root the way the configured relative path is. The
	// index's documents have no vectors, so the first stage ranks them by BM25 alone.
	encoderDir, err := filepath.Abs(filepath.Join("..", config.Default().FirstStage.EncoderDir))
	require.NoError(t, err)
	cmd.Env = append(env, "ICICLE_SERVER_REQUEST_TIMEOUT=20s", "ICICLE_SERVER_WRITE_TIMEOUT=60s", "ICICLE_ELASTICSEARCH_ADDRESSES="+esURL, "ICICLE_ELASTICSEARCH_INDEX="+index,
		"ICICLE_MODEL_DIR="+modelDir, "ICICLE_SERVER_ADDR="+addr, "ICICLE_ORT_LIB="+lib, "ICICLE_FIRST_STAGE_ENCODER_DIR="+encoderDir)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			_, _ = cmd.Process.Wait()
			if t.Failed() {
				t.Logf("icicle serve log:\n%s", logs.String())
			}
		})
	}
	t.Cleanup(stop)
	url = "http://" + addr
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if res, err := http.Get(url + "/readyz"); err == nil {
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "icicle serve not ready in 60 s:\n%s", logs.String())
	}
	require.Contains(t, logs.String(), "policy=gate", "the configured default policy")
	return url, stop
}

func searchDefault(t *testing.T, url, q string) plugin.Response {
	t.Helper()
	body, _ := json.Marshal(plugin.SearchRequest{Query: q, Size: 10})
	res, err := http.Post(url+"/v1/search", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	require.Equal(t, http.StatusOK, res.StatusCode, string(b))
	var resp plugin.Response
	require.NoError(t, json.Unmarshal(b, &resp))
	return resp
}

func bm25All(t *testing.T, es *adapter.Adapter, q string, k int) []string {
	t.Helper()
	hits, err := es.SearchAll(t.Context(), q, k)
	require.NoError(t, err)
	var out []string
	for _, h := range hits {
		out = append(out, h.DocID)
	}
	return out
}

func docIDs(rs []plugin.Result) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.DocID)
	}
	return out
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal([]byte(getText(t, url)), v))
}

func getText(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, string(b))
	return strings.TrimSpace(string(b))
}
