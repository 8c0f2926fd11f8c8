package plugin

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

func TestCheckDuplicateKeys(t *testing.T) {
	tests := []struct {
		body      string
		key, path string
		line, col int
	}{
		// Elasticsearch 8.14's own answers for these bodies: [1:47] and [1:43].
		{body: `{"size": 1, "query": {"match_all": {}}, "size": 2}`, key: "size", line: 1, col: 47},
		{body: `{"query": {"match": {"title": "a", "title": "b"}}}`, key: "title", path: "query.match", line: 1, col: 43},
		{body: "{\n  \"query\": {\"bool\": {\"should\": [{\"term\": {\"a\": 1}}, {\"term\": {\"a\": 2, \"a\": 3}}]}}\n}",
			key: "a", path: "query.bool.should[1].term", line: 2, col: 74},
		{body: `{"a": {"x": 1}, "b": {"x": 1}, "c": [{"x": 1}, {"x": 2}]}`},
		{body: `{"a": [1, {"b": 2}], "b": 3}`},
		{body: `{"a": "x", `}, // not JSON: the decoder that reads it says so
		{body: ``},
	}
	for _, tt := range tests {
		err := checkDuplicateKeys([]byte(tt.body))
		if tt.key == "" {
			require.NoError(t, err, tt.body)
			continue
		}
		var dup *DuplicateKeyError
		require.ErrorAs(t, err, &dup, tt.body)
		require.Equal(t, DuplicateKeyError{Key: tt.key, Path: tt.path, Line: tt.line, Column: tt.col}, *dup, tt.body)
	}
}

// TestDuplicateKeysRefused: the drop-in answers a body with a repeated key as Elasticsearch does (400,
// x_content_parse_exception at the place in the caller's body) instead of forwarding the last value; the
// sidecar's own endpoints name the field.
func TestDuplicateKeysRefused(t *testing.T) {
	var sent []string
	s := newTestServer(t, recordingES(200, esSearchBody, &sent), &fakeReranker{rank: copyBeta}, nil)
	code, out, _ := do(t, s, "POST", "/icicle-docs/_search", `{"size": 1, "query": {"match_all": {}}, "size": 2}`)
	require.Equal(t, http.StatusBadRequest, code, out)
	e := out["error"].(map[string]any)
	require.Equal(t, "x_content_parse_exception", e["type"])
	require.Equal(t, "[1:47] Duplicate field 'size'", e["reason"])
	require.EqualValues(t, 400, out["status"])
	for _, b := range sent {
		require.NotContains(t, b, `"size"`, "nothing was searched")
	}

	es := &fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return threeHits(), nil }}
	s = newTestServer(t, es, &fakeReranker{rank: copyBeta}, nil)
	code, out, _ = do(t, s, "POST", "/v1/search", `{"query": "q", "size": 2, "size": 50}`)
	require.Equal(t, http.StatusBadRequest, code, out)
	require.Equal(t, "size", out["field"])
	require.Equal(t, "duplicate key (line 1, column 33)", out["error"])
}
