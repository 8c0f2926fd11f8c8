//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/internal/testenv"
	"github.com/icicle-search/sidecar/plugin"
)

// TestBlockStoreFill runs `icicle serve` with block reading on (shared layout, int8 store) over a real index
// and the real model (issue 26): the store fills from the index's new documents in the background, /readyz
// says how far; once done, a search over those documents computes no block; a hot swap to a model with an
// empty store fills that one again while the sidecar serves; a store too small for the index stops the fill
// at its bound instead of evicting what it computed; a store kept in a file (experimental.block_dir) is read back by
// the next start, whose fill then computes nothing.
func TestBlockStoreFill(t *testing.T) {
	bin, esURL, lib := realServeParts(t)
	// The shipped default: block reading needs the manifest's rope_theta, which models/small predates.
	// reader135's gate never promotes, so policy gate runs its model only with run_model_when_gate_never.
	modelDir, err := filepath.Abs(filepath.Join("..", "models", "reader135"))
	require.NoError(t, err)
	index := fmt.Sprintf("icicle-blockfill-%d", time.Now().UnixNano())
	const newDocs = 40
	ingestForGate(t, esURL, index, modelDir, newDocs)

	const token = "block-fill-admin-token"
	url := serveDefault(t, bin, esURL, index, testenv.BlockModel(t, modelDir), lib, "ICICLE_EXPERIMENTAL_RUN_MODEL_WHEN_GATE_NEVER=true", "ICICLE_EXPERIMENTAL_BLOCK_READING=shared",
		"ICICLE_EXPERIMENTAL_BLOCK_PRECISION=int8", "ICICLE_SERVER_ADMIN_TOKEN="+token)
	first := waitFilled(t, url, newDocs)
	require.Equal(t, "int8", first.Precision)
	require.Equal(t, newDocs, first.Fill.Computed, "no request ran before: the fill computed every block")
	require.GreaterOrEqual(t, first.Blocks, newDocs+1, "the header and every new document's block")

	resp := searchDefault(t, url, "who sang the theme song for the office")
	require.NotZero(t, resp.CandidatesInContext)
	after := readyBlocks(t, url)
	require.Equal(t, first.Misses, after.Misses, "every block the search read was filled ahead of it")
	require.Greater(t, after.Hits, first.Hits)

	// A hot swap to another directory: a new, empty store, filled again in the background.
	body, _ := json.Marshal(map[string]string{"dir": testenv.BlockModel(t, modelDir)})
	req, err := http.NewRequest(http.MethodPost, url+"/v1/admin/model", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	swapped := waitFilled(t, url, newDocs)
	require.Less(t, swapped.Hits, after.Hits, "the swapped-in model has a store of its own")
	resp = searchDefault(t, url, "who sang the theme song for the office")
	require.NotZero(t, resp.CandidatesInContext)

	// A store bound below the index's new documents (int8 blocks of reader135 are about 0.4 MB): the fill
	// stops when the store would evict, says so, and the sidecar serves.
	url = serveDefault(t, bin, esURL, index, testenv.BlockModel(t, modelDir), lib, "ICICLE_EXPERIMENTAL_RUN_MODEL_WHEN_GATE_NEVER=true", "ICICLE_EXPERIMENTAL_BLOCK_READING=shared",
		"ICICLE_EXPERIMENTAL_BLOCK_PRECISION=int8", "ICICLE_EXPERIMENTAL_BLOCK_STORE_MB=4")
	var b plugin.BlocksInfo
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		if b = readyBlocks(t, url); b.Fill.State != "running" {
			break
		}
		require.True(t, time.Now().Before(deadline), "the fill is not over in 3 minutes: %+v", b.Fill)
	}
	require.Equal(t, "full", b.Fill.State, "%+v", b.Fill)
	require.Less(t, b.Fill.Documents, newDocs)
	require.LessOrEqual(t, b.Bytes, b.MaxBytes)
	require.Positive(t, b.Evicted, "the fill stops at the step that evicted")
	resp = searchDefault(t, url, "who sang the theme song for the office")
	require.NotZero(t, resp.CandidatesInContext)

	// A store in a file: the first start fills it, a restart on the same directory reads every block back
	// (the fill computes none, a search computes none).
	blockDir, fileModel := t.TempDir(), testenv.BlockModel(t, modelDir)
	fileEnv := []string{"ICICLE_EXPERIMENTAL_RUN_MODEL_WHEN_GATE_NEVER=true", "ICICLE_EXPERIMENTAL_BLOCK_READING=shared", "ICICLE_EXPERIMENTAL_BLOCK_PRECISION=int8", "ICICLE_EXPERIMENTAL_BLOCK_DIR=" + blockDir}
	url, stop := startServe(t, bin, esURL, index, fileModel, lib, fileEnv...)
	filled := waitFilled(t, url, newDocs)
	require.Equal(t, newDocs, filled.Fill.Computed)
	require.Equal(t, blockDir, filepath.Dir(filled.File), "the model's file in experimental.block_dir")
	require.Zero(t, filled.Loaded, "a new file")
	stop()
	url, _ = startServe(t, bin, esURL, index, fileModel, lib, fileEnv...)
	restarted := waitFilled(t, url, newDocs)
	require.Equal(t, filled.File, restarted.File)
	require.GreaterOrEqual(t, restarted.Loaded, newDocs+1, "the header and every new document's block, read back")
	require.Zero(t, restarted.Fill.Computed, "nothing left to compute")
	require.Zero(t, restarted.Misses, "not even the warm-up's blocks")
	resp = searchDefault(t, url, "who sang the theme song for the office")
	require.NotZero(t, resp.CandidatesInContext)
	require.Zero(t, readyBlocks(t, url).Misses, "the search read every block from the file")

	// Summaries for the first 3 candidates only: the fill keeps each document's block in both forms, and a
	// search of 20 candidates reads 17 by title alone, every block from the store.
	url = serveDefault(t, bin, esURL, index, testenv.BlockModel(t, modelDir), lib, "ICICLE_EXPERIMENTAL_RUN_MODEL_WHEN_GATE_NEVER=true",
		"ICICLE_EXPERIMENTAL_BLOCK_READING=shared", "ICICLE_EXPERIMENTAL_BLOCK_PRECISION=int8", "ICICLE_EXPERIMENTAL_SUMMARY_CANDIDATES=3",
		"ICICLE_DECODE_MAX_CANDIDATES=20")
	both := waitFilled(t, url, newDocs)
	require.Equal(t, 2*newDocs, both.Fill.Computed, "a block with its summary and one by title alone, for every new document")
	resp = searchDefault(t, url, "who sang the theme song for the office")
	require.Equal(t, 20, resp.CandidatesInContext)
	require.Equal(t, 17, resp.TitleOnlyCandidates)
	require.Equal(t, both.Misses, readyBlocks(t, url).Misses, "both forms were filled ahead of the search")
}

// readyBlocks is /readyz's block store.
func readyBlocks(t *testing.T, url string) plugin.BlocksInfo {
	t.Helper()
	var ready struct {
		Blocks *plugin.BlocksInfo `json:"blocks"`
	}
	getJSON(t, url+"/readyz", &ready)
	require.NotNil(t, ready.Blocks, "a model reading by blocks reports its store")
	return *ready.Blocks
}

// waitFilled waits until /readyz says the store's fill is done, with docs documents passed.
func waitFilled(t *testing.T, url string, docs int) plugin.BlocksInfo {
	t.Helper()
	var b plugin.BlocksInfo
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		b = readyBlocks(t, url)
		require.NotNil(t, b.Fill, "a fill starts with the model")
		require.NotEqual(t, "failed", b.Fill.State, b.Fill.Error)
		require.LessOrEqual(t, b.Fill.Documents, docs)
		if b.Fill.State == "done" {
			break
		}
		require.True(t, time.Now().Before(deadline), "the fill is not done in 3 minutes: %+v", b.Fill)
	}
	require.Equal(t, docs, b.Fill.Documents, "every new document of the index")
	require.Zero(t, b.Evicted)
	return b
}
