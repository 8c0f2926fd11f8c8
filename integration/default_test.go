//go:build integration && ort && tokenizers

package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/plugin"
)

// TestDefaultServesTheFirstStage runs `icicle serve` as a team first does, with no model directory and no
// config file: the first stage (BM25 fused with the default encoder) answers every request and says that no
// reader is configured. Documents sent to POST /v1/ingest get the encoder's vector as they are written, so a
// new document is found by a query that shares no word with it: by meaning, at once, with no `icicle enrich`.
func TestDefaultServesTheFirstStage(t *testing.T) {
	bin, esURL, lib := realServeParts(t)
	index := fmt.Sprintf("icicle-default-%d", time.Now().UnixNano())
	const token = "integration-write-token-0123"
	url := serveDefault(t, bin, esURL, index, "", lib, "ICICLE_SERVER_WRITE_TOKEN="+token)

	var model plugin.ModelEndpoint
	getJSON(t, url+"/v1/model", &model)
	require.False(t, model.Reader, "the default serves no reader")
	require.Equal(t, "gate", model.Policy.Mode)
	require.NotEmpty(t, model.FirstStage.Encoder, "the default first stage fuses BM25 with the encoder")
	require.Contains(t, getText(t, url+"/readyz"), `"model":"none"`)

	// Distractors share the query's words; the document it asks for shares none of them.
	docs := []map[string]string{
		{"docid": "Green Day", "title": "Green Day", "text": "Green Day is an American rock band formed in 1987; how they make records is the subject of a documentary."},
		{"docid": "Leaves (band)", "title": "Leaves (band)", "text": "Leaves is an Icelandic rock band formed in Reykjavik in 2001, using guitars and synthesizers on their albums."},
		{"docid": "Food Network", "title": "Food Network", "text": "Food Network is an American cable television channel about food and cooking, owned by a media company."},
		{"docid": "Photosynthesis", "title": "Photosynthesis", "text": "Plants, algae and some bacteria convert light energy into chemical energy stored as sugars, releasing oxygen taken out of water."},
	}
	const query = "how do green leaves make their food using sunshine"
	target := docs[3]
	for _, w := range strings.Fields(query) {
		require.NotContains(t, strings.ToLower(target["title"]+" "+target["text"]), " "+w+" ", "the query shares no word with the document")
	}
	var body bytes.Buffer
	for _, d := range docs {
		line, err := json.Marshal(d)
		require.NoError(t, err)
		body.Write(append(line, '\n'))
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/ingest?refresh=wait_for", &body)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusOK, res.StatusCode, string(b))
	var ing plugin.IngestResponse
	require.NoError(t, json.Unmarshal(b, &ing))
	require.Equal(t, len(docs), ing.Indexed)
	require.Equal(t, len(docs), ing.Embedded, "every document got its vector on the way in")
	require.Equal(t, model.FirstStage.Encoder, ing.VectorModel)

	resp := searchDefault(t, url, query)
	require.Equal(t, plugin.ModeFirstStage, resp.Mode)
	require.Equal(t, plugin.SkipNoModel, resp.ModelSkipped, "every answer says why no model ran")
	require.Empty(t, resp.FallbackReason)
	require.NotNil(t, resp.Baseline)
	require.Equal(t, "hybrid", resp.Baseline.Kind)
	require.NotEmpty(t, resp.Results)
	require.Equal(t, target["docid"], resp.Results[0].DocID, "found by meaning: %v", docIDs(resp.Results))
	require.Equal(t, plugin.FromFirstStage, resp.Results[0].Provenance)
	require.Nil(t, resp.Results[0].BM25Rank, "BM25 alone does not find it")
	require.NotNil(t, resp.Results[0].DenseScore)

	// Asking for a reader's policy is refused without policy.allow_override, naming the field.
	raw, _ := json.Marshal(plugin.SearchRequest{Query: query, Policy: "model"})
	res, err = http.Post(url+"/v1/search", "application/json", bytes.NewReader(raw))
	require.NoError(t, err)
	b, _ = io.ReadAll(res.Body)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusForbidden, res.StatusCode, string(b))
	require.Contains(t, string(b), `"field":"policy"`)
}
