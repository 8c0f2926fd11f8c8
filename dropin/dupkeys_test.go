package dropin

import (
	"testing"

	"github.com/stretchr/testify/require"
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
		err := CheckDuplicateKeys([]byte(tt.body))
		if tt.key == "" {
			require.NoError(t, err, tt.body)
			continue
		}
		var dup *DuplicateKeyError
		require.ErrorAs(t, err, &dup, tt.body)
		require.Equal(t, DuplicateKeyError{Key: tt.key, Path: tt.path, Line: tt.line, Column: tt.col}, *dup, tt.body)
	}
}
