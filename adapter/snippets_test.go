package adapter_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// The snippet search's body is the golden file's, which training/tests/test_reader.py holds the training set's
// request to as well: a change on one side that the other does not make fails here or there.
func TestSnippetBodyGolden(t *testing.T) {
	var golden struct {
		Query  string          `json:"query"`
		IDs    []string        `json:"ids"`
		Chars  int             `json:"chars"`
		Fields []string        `json:"fields"`
		Body   json.RawMessage `json:"body"`
	}
	raw, err := os.ReadFile("testdata/snippet_request.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &golden))
	got, err := adapter.SnippetBody(golden.Query, golden.IDs, golden.Chars, golden.Fields)
	require.NoError(t, err)
	require.JSONEq(t, string(golden.Body), string(got))
}
