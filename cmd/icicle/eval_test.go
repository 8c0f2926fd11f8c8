package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseInts(t *testing.T) {
	got, err := parseInts(" 100,3, 10,3,", 1, 100)
	require.NoError(t, err)
	require.Equal(t, []int{3, 10, 100}, got)
	got, err = parseInts("", 1, 100)
	require.NoError(t, err)
	require.Empty(t, got)
	for _, bad := range []string{"0", "101", "x", "3;10"} {
		_, err := parseInts(bad, 1, 100)
		require.Error(t, err, bad)
	}
}

func TestReadQueryTexts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.txt")
	require.NoError(t, os.WriteFile(path, []byte("plain query\n\n{\"query\": \"json query\"}\n{\"text\": \"beir text\"}\nlast\n"), 0o644))
	got, err := readQueryTexts(path, 3)
	require.NoError(t, err)
	require.Equal(t, []string{"plain query", "json query", "beir text"}, got)
}

func TestSameIndex(t *testing.T) {
	require.NoError(t, sameIndex("icicle-docs", "icicle-docs"))
	require.NoError(t, sameIndex("", "icicle-docs"), "a sidecar that does not say its index")
	err := sameIndex("icicle-cranfield-v", "icicle-docs")
	require.ErrorContains(t, err, `the sidecar serves index "icicle-cranfield-v" and this eval's BM25 arm would search "icicle-docs"`)
	require.ErrorContains(t, err, "ICICLE_ELASTICSEARCH_INDEX=icicle-cranfield-v")
}
