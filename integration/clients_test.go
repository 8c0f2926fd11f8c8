//go:build integration && ort && tokenizers

package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clientReport is what integration/testdata/clients/check.{py,js} print: what one official client saw.
type clientReport struct {
	Client string `json:"client"`
	Info   struct {
		Status  int    `json:"status"`
		Version string `json:"version"`
		Product string `json:"product"`
	} `json:"info"`
	Ping   bool `json:"ping"`
	Count  int  `json:"count"`
	Search struct {
		Hits        []clientHit `json:"hits"`
		Took        float64     `json:"took"`
		ClientMS    float64     `json:"client_ms"`
		TotalMS     *float64    `json:"total_ms"`
		Mode        *string     `json:"mode"`
		ContentType string      `json:"content_type"`
	} `json:"search"`
	SearchNoIndex struct {
		Hits    []clientHit `json:"hits"`
		Indices []string    `json:"indices"`
		Mode    *string     `json:"mode"`
	} `json:"search_no_index"`
	SourceFilter struct {
		Hits []clientHit `json:"hits"`
		Mode *string     `json:"mode"`
	} `json:"source_filter"`
	Pages      [][]clientHit   `json:"pages"`
	Aggs       json.RawMessage `json:"aggs"`
	OtherIndex clientError     `json:"other_index"`
	Wildcard   clientError     `json:"wildcard"`
}

type clientHit struct {
	ID         string   `json:"id"`
	SourceKeys []string `json:"source_keys"`
	Provenance *string  `json:"provenance"`
	Score      *float64 `json:"score"`
}

type clientError struct {
	Status int    `json:"status"`
	Error  string `json:"error"`
	Type   string `json:"type"`
}

func ids(hits []clientHit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.ID
	}
	return out
}

// runClient runs one client script against base and decodes its report. A client that cannot run fails
// the test: scripts/clients.sh installs them and scripts/test.sh exports where.
func runClient(t *testing.T, lang, base, index, other, query string) clientReport {
	t.Helper()
	var cmd *exec.Cmd
	switch lang {
	case "python":
		py := os.Getenv("ICICLE_CLIENTS_PYTHON")
		require.NotEmpty(t, py, "ICICLE_CLIENTS_PYTHON is not set: run eval \"$(scripts/clients.sh)\" (scripts/test.sh does)")
		cmd = exec.CommandContext(t.Context(), py, filepath.Join("testdata", "clients", "check.py"), base, index, other, query)
	case "javascript":
		nodePath := os.Getenv("ICICLE_CLIENTS_NODE_PATH")
		require.NotEmpty(t, nodePath, "ICICLE_CLIENTS_NODE_PATH is not set: run eval \"$(scripts/clients.sh)\" (scripts/test.sh does)")
		cmd = exec.CommandContext(t.Context(), "node", filepath.Join("testdata", "clients", "check.js"), base, index, other, query)
		cmd.Env = append(os.Environ(), "NODE_PATH="+nodePath)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "%s client against %s: %s", lang, base, stderr.String())
	var rep clientReport
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep), stdout.String())
	t.Logf("%s against %s: took %v ms, client measured %.1f ms", rep.Client, base, rep.Search.Took, rep.Search.ClientMS)
	return rep
}

// TestOfficialClients drives the official Python and JavaScript clients (8.19) against the drop-in on a
// real node and the real model, and against the node itself, and compares: the table, row by row.
func TestOfficialClients(t *testing.T) {
	s := newStack(t, 300)
	esURL := os.Getenv("ICICLE_ES_URL")
	index := s.es.Index()
	query := "who appoints the chair of the federal reserve system"

	// Another index on the same cluster, which the sidecar must not serve.
	other := fmt.Sprintf("icicle-other-%d", time.Now().UnixNano())
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, esURL+"/"+other+"/_doc/1?refresh=true",
		strings.NewReader(`{"title":"secret","text":"the chair of the federal reserve system is secret"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusCreated, res.StatusCode)
	t.Cleanup(func() { _, _ = http.DefaultClient.Do(mustReq(t, http.MethodDelete, esURL+"/"+other)) })

	for _, lang := range []string{"python", "javascript"} {
		t.Run(lang, func(t *testing.T) {
			es := runClient(t, lang, esURL, index, other, query)
			sc := runClient(t, lang, s.url, index, other, query)
			require.Contains(t, sc.Client, "8.19.")

			// info, ping, count: Elasticsearch's answers.
			require.Equal(t, 200, sc.Info.Status)
			require.Equal(t, es.Info.Version, sc.Info.Version)
			require.Equal(t, "Elasticsearch", sc.Info.Product)
			require.True(t, sc.Ping)
			require.Positive(t, es.Count)
			require.Equal(t, es.Count, sc.Count)

			// search with an index: reranked, Elasticsearch's media type, took covers the sidecar's time.
			require.NotNil(t, sc.Search.Mode)
			require.Len(t, sc.Search.Hits, 10)
			require.Contains(t, sc.Search.ContentType, "json")
			require.Equal(t, es.Search.ContentType, sc.Search.ContentType, "the media type the client asked for")
			require.NotNil(t, sc.Search.TotalMS)
			require.GreaterOrEqual(t, sc.Search.Took, float64(int(*sc.Search.TotalMS)), "took includes the sidecar's own time")
			require.LessOrEqual(t, sc.Search.Took, sc.Search.ClientMS+1, "took is not more than the client waited")

			// search without an index: the configured index, reranked.
			require.NotNil(t, sc.SearchNoIndex.Mode)
			require.NotEqual(t, "passthrough", *sc.SearchNoIndex.Mode)
			require.NotEmpty(t, sc.SearchNoIndex.Hits)
			require.Equal(t, []string{index}, sc.SearchNoIndex.Indices, "an index-less search reads the configured index only")
			require.Equal(t, ids(sc.Search.Hits), ids(sc.SearchNoIndex.Hits), "the same ranking as with the index named")

			// _source filter: every hit, recalled ones included, has _source {title} only; still reranked.
			require.NotNil(t, sc.SourceFilter.Mode)
			require.NotEqual(t, "passthrough", *sc.SourceFilter.Mode)
			for i, h := range sc.SourceFilter.Hits {
				require.Equal(t, []string{"title"}, h.SourceKeys, "hit %d (%v)", i, h.Provenance)
			}
			require.Equal(t, ids(sc.Search.Hits), ids(sc.SourceFilter.Hits), "the filter does not change the ranking (modes %s, %s)",
				*sc.Search.Mode, *sc.SourceFilter.Mode)

			// paging: pages 1 and 2 are the first 10 of the window, no document twice over three pages, and
			// every one of Elasticsearch's top 10 is on one of them.
			require.Len(t, sc.Pages, 3)
			seen := append(append(ids(sc.Pages[0]), ids(sc.Pages[1])...), ids(sc.Pages[2])...)
			require.Equal(t, ids(sc.Search.Hits), seen[:10], "page 1 + page 2 == the first 10 of the window")
			compact := slices.Clone(seen)
			slices.Sort(compact)
			require.Len(t, slices.Compact(compact), len(seen), "no document on two pages: %v", seen)
			esTop := append(ids(es.Pages[0]), ids(es.Pages[1])...)
			for _, id := range esTop {
				require.Contains(t, seen, id, "Elasticsearch's top-10 document %s is on one of the first three pages", id)
			}

			// aggregations: Elasticsearch's.
			require.JSONEq(t, string(es.Aggs), string(sc.Aggs))

			// an index outside the allow-list, and a wildcard: 403 security_exception, as the client's own error.
			wantErr := map[string]string{"python": "AuthorizationException", "javascript": "ResponseError"}[lang]
			for name, e := range map[string]clientError{"other index": sc.OtherIndex, "wildcard": sc.Wildcard} {
				require.Equal(t, 403, e.Status, name)
				require.Equal(t, wantErr, e.Error, name)
				require.Equal(t, "security_exception", e.Type, name)
			}
			require.Equal(t, 200, es.OtherIndex.Status, "the cluster itself would have answered")
		})
	}
}
