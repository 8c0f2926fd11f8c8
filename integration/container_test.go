//go:build container

package integration

// TestContainerStack runs docker-compose.yml for real: scripts/container.sh builds the sidecar's image from
// the Dockerfile and brings the stack up with podman (Elasticsearch, then the one-shot ingest job, then the
// sidecar, as depends_on orders them), and the test talks to it over the published ports: the job's documents
// are in the index with their vectors, the sidecar finds them through the first stage (BM25 and the image's
// encoder), and a document posted to POST /v1/ingest is found too. The stack is removed afterwards, also when
// a check fails.
//
// It needs podman and podman-compose (scripts/container.sh install) and minutes (the image build); scripts/
// container.sh test runs it (build tag container):
//
//	scripts/container.sh test
//	go test -tags container -run TestContainer -v ./integration/    (after scripts/container.sh install)

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/internal/dataset"
	"github.com/icicle-search/sidecar/internal/testenv"
	"github.com/icicle-search/sidecar/plugin"
)

// The stack's corpus: the first containerDocs documents of data/cranfield; the ones after them are not
// ingested, and a search for one of them must not return it.
const containerDocs = 150

type corpusDoc struct {
	DocID string `json:"docid"`
	Title string `json:"title"`
	Text  string `json:"text"`
}

func TestContainerStack(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		testenv.Missing(t, "podman not found: run scripts/container.sh install "+
			"(this test builds and runs the compose stack with podman)")
	}
	root := repoRoot(t)
	docs := readCranfield(t, filepath.Join(root, "data", "cranfield", "corpus.jsonl.gz"), containerDocs+50)
	corpusDir := writeCorpus(t, docs[:containerDocs])
	token := randomHex(t, 16)
	esPort := envOr("ICICLE_CONTAINER_ES_PORT", "19200")
	port := envOr("ICICLE_CONTAINER_PORT", "18080")
	env := append(os.Environ(),
		"ICICLE_CONTAINER_ES_PORT="+esPort, "ICICLE_CONTAINER_PORT="+port,
		"CORPUS_DIR="+corpusDir, "CORPUS=corpus.jsonl", "ICICLE_SERVER_WRITE_TOKEN="+token)
	script := filepath.Join(root, "scripts", "container.sh")

	t.Cleanup(func() {
		if t.Failed() {
			containerScript(t, env, script, "compose", "logs", "--tail", "40")
		}
		if err := containerScript(t, env, script, "down"); err != nil {
			t.Errorf("scripts/container.sh down: %v", err)
		}
	})
	start := time.Now()
	require.NoError(t, containerScript(t, env, script, "up"), "scripts/container.sh up")
	t.Logf("stack up in %s", time.Since(start).Round(time.Second))

	es := "http://127.0.0.1:" + esPort
	base := "http://127.0.0.1:" + port
	warmStack(t, base)

	t.Run("the ingest job wrote the corpus with vectors", func(t *testing.T) {
		require.Equal(t, containerDocs, esCount(t, es, `{"query": {"match_all": {}}}`))
		require.Equal(t, containerDocs, esCount(t, es, `{"query": {"exists": {"field": "vector"}}}`),
			"every document carries the encoder's vector (the job embedded them in the container)")
	})

	t.Run("the sidecar is ready", func(t *testing.T) {
		resp, err := http.Get(base + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode, "/readyz: %s", body)
	})

	t.Run("a document of the job is found by the first stage", func(t *testing.T) {
		want := docs[containerDocs/2]
		res := containerSearch(t, base, strings.TrimSuffix(want.Title, " ."))
		requireFirstStage(t, res)
		require.NotEmpty(t, res.Results)
		require.Equal(t, want.DocID, res.Results[0].DocID, "the document whose title is the query comes first")
		require.Greater(t, res.HitsReceived, 1)
	})

	t.Run("a document outside the corpus is not found", func(t *testing.T) {
		outside := docs[containerDocs+10]
		res := containerSearch(t, base, strings.TrimSuffix(outside.Title, " ."))
		for _, r := range res.Results {
			require.NotEqual(t, outside.DocID, r.DocID, "only the job's corpus is in the index")
		}
	})

	t.Run("POST /v1/ingest needs the write token", func(t *testing.T) {
		resp, err := http.Post(base+"/v1/ingest", "application/x-ndjson",
			strings.NewReader(`{"docid":"x","title":"x","text":"x"}`))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	})

	t.Run("a document posted to the sidecar is found", func(t *testing.T) {
		doc := corpusDoc{
			DocID: "container-check-" + token[:8],
			Title: "quokka lattice resonance in a wind tunnel",
			Text: "quokka lattice resonance in a wind tunnel . a lattice of quokka-shaped vanes resonates at " +
				"a frequency set by the tunnel's speed; the measurements cover three speeds .",
		}
		line, err := json.Marshal(doc)
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, base+"/v1/ingest?refresh=true", bytes.NewReader(line))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-ndjson")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode, "POST /v1/ingest: %s", body)
		var ing plugin.IngestResponse
		require.NoError(t, json.Unmarshal(body, &ing), "%s", body)
		require.Equal(t, 1, ing.Indexed, "%s", body)
		require.Equal(t, 1, ing.Embedded, "the sidecar embedded it with the image's encoder: %s", body)
		require.NotEmpty(t, ing.VectorModel, "%s", body)

		res := containerSearch(t, base, "quokka lattice resonance")
		requireFirstStage(t, res)
		require.NotEmpty(t, res.Results)
		require.Equal(t, doc.DocID, res.Results[0].DocID, "words no other document has put it first")
		require.NotNil(t, res.Results[0].BM25Rank)
		require.Equal(t, 1, *res.Results[0].BM25Rank)
		require.Equal(t, containerDocs+1, esCount(t, es, `{"query": {"exists": {"field": "vector"}}}`))
	})
}

// requireFirstStage checks that an answer is the first stage's, as the image serves by default: BM25 fused
// with the image's dense encoder, and no reader model.
func requireFirstStage(t *testing.T, res plugin.Response) {
	t.Helper()
	require.Equal(t, plugin.ModeFirstStage, res.Mode, "the first stage's order")
	require.Equal(t, plugin.SkipNoModel, res.ModelSkipped, "because the image serves no reader model")
	require.Empty(t, res.FallbackReason)
	require.NotNil(t, res.Baseline, "the answer names its first stage")
	require.Equal(t, "hybrid", res.Baseline.Kind, "BM25 fused with the encoder (baseline %+v)", *res.Baseline)
	require.NotEmpty(t, res.Baseline.Encoder, "the encoder the image carries")
	require.Empty(t, res.Baseline.Reason)
	require.Zero(t, res.CandidatesInContext, "no reader model read candidates")
	require.Nil(t, res.RouterProb, "no reader model ran")
	for _, r := range res.Results {
		require.Equal(t, plugin.FromFirstStage, r.Provenance, "result %d (%s) placed by the first stage", r.Rank, r.DocID)
	}
}

func containerSearch(t *testing.T, base, query string) plugin.Response {
	t.Helper()
	body, err := json.Marshal(plugin.SearchRequest{Query: query, Size: 10})
	require.NoError(t, err)
	resp, err := http.Post(base+"/v1/search", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "/v1/search %q: %s", query, raw)
	var out plugin.Response
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	return out
}

// warmStack sends searches until one is answered, at most for a minute: a new node's first searches load the
// index's files and vector graph, and on slow cores they can outlast the sidecar's request_timeout (2 s), which
// it answers with a 504 as it should. The subtests then search a warm stack; what warming took is logged.
func warmStack(t *testing.T, base string) {
	t.Helper()
	body := `{"query": "warm up", "size": 10}`
	deadline := time.Now().Add(time.Minute)
	for i := 1; ; i++ {
		start := time.Now()
		resp, err := http.Post(base+"/v1/search", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Logf("stack warm: search %d answered in %s", i, time.Since(start).Round(time.Millisecond))
			return
		}
		require.Equal(t, http.StatusGatewayTimeout, resp.StatusCode, "warm-up search %d: %s", i, raw)
		require.True(t, time.Now().Before(deadline), "no search answered within a minute; the last: %s", raw)
		t.Logf("warm-up search %d: %d after %s (a cold node)", i, resp.StatusCode, time.Since(start).Round(time.Millisecond))
	}
}

// esCount is the index's _count for a query body, straight from Elasticsearch.
func esCount(t *testing.T, es, query string) int {
	t.Helper()
	resp, err := http.Post(es+"/icicle-docs/_count", "application/json", strings.NewReader(query))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "_count: %s", raw)
	var out struct{ Count int }
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	return out.Count
}

// containerScript runs scripts/container.sh with args, its output going to the test's stderr as it comes.
func containerScript(t *testing.T, env []string, script string, args ...string) error {
	t.Helper()
	cmd := exec.Command(script, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

func readCranfield(t *testing.T, path string, n int) []corpusDoc {
	t.Helper()
	out, err := dataset.ReadJSONL[corpusDoc](path, n)
	require.NoError(t, err)
	require.Len(t, out, n, "%s has fewer documents than the test reads", path)
	return out
}

// writeCorpus writes docs as BEIR JSONL into a directory the containers' users can read (the ingest job runs
// as an unprivileged user and gets the directory as a bind mount).
func writeCorpus(t *testing.T, docs []corpusDoc) string {
	t.Helper()
	dir := t.TempDir()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, d := range docs {
		require.NoError(t, enc.Encode(d))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "corpus.jsonl"), b.Bytes(), 0o644))
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
