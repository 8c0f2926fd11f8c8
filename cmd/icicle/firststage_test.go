package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/config"
)

// TestFieldsMismatch: a params file fitted with BM25 over other fields than the ones served is named with both
// lists; one fitted over the same fields, one whose record does not say, and no file at all are not.
func TestFieldsMismatch(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	params := `"method": "linear", "dense_weight": 0.9, "rrf_k": 60, "depth": 100, "knn": 10`
	old := write("old.json", `{`+params+`, "fit": {"queries": 800, "fields": ["title", "summary", "text"]}}`)
	same := write("same.json", `{`+params+`, "fit": {"fields": ["title", "text"]}}`)
	unsaid := write("unsaid.json", `{`+params+`, "fit": {"queries": 800}}`)
	bare := write("bare.json", `{`+params+`}`)
	served := []string{"title", "text"}

	warn := fieldsMismatch(config.FirstStage{ParamsFile: old}, served)
	require.Contains(t, warn, old)
	require.Contains(t, warn, "[title, summary, text]")
	require.Contains(t, warn, "fields.search is [title, text]")
	for _, p := range []string{same, unsaid, bare, ""} {
		require.Empty(t, fieldsMismatch(config.FirstStage{ParamsFile: p}, served), p)
	}
	require.NotEmpty(t, fieldsMismatch(config.FirstStage{ParamsFile: same}, []string{"title^2", "text"}), "a boost is another ranking")
}

// TestVectorIndexTypesAgree: the values config accepts for first_stage.vector_index are the ones the adapter
// maps (newAdapter passes the setting through).
func TestVectorIndexTypesAgree(t *testing.T) {
	require.Equal(t, adapter.VectorIndexTypes, config.VectorIndexTypes)
	require.Equal(t, adapter.DefaultVectorIndex, config.Default().FirstStage.VectorIndex)
}
