package dataset

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReadLabelled(t *testing.T) {
	dir := t.TempDir()
	queries := filepath.Join(dir, "queries.jsonl")
	require.NoError(t, os.WriteFile(queries, []byte(`{"qid": "1", "query": "one", "split": "dev"}
{"qid": "2", "query": "two", "split": "train"}
{"qid": "3", "query": "three", "split": "dev"}
{"_id": "4", "text": "four", "split": "dev"}
{"qid": "5", "query": "five", "split": "dev"}
{"qid": "6", "query": "unlabelled", "split": "dev"}
{"qid": "7", "query": "seven", "split": "dev"}
`), 0o644))
	qrelsPath := filepath.Join(dir, "qrels.tsv")
	require.NoError(t, os.WriteFile(qrelsPath, []byte("qid\tdocid\trelevance\n1\tA\t1\n2\tB\t1\n3\tS\t1\n4\tC\t1\n5\tS2\t1\n7\tD\t0\n"), 0o644))
	qrels, err := ReadQrels(qrelsPath)
	require.NoError(t, err)
	require.NotContains(t, qrels, "7", "relevance 0 is not relevant")
	seen := map[string]bool{"S": true, "S2": true}

	qs, err := ReadLabelled(queries, "dev", 1, qrels, seen)
	require.NoError(t, err)
	require.Len(t, qs, 2, "one per subset")
	require.Equal(t, []string{"1", "3"}, []string{qs[0].ID, qs[1].ID})
	require.Equal(t, []string{"new", "seen"}, []string{qs[0].Subset, qs[1].Subset})

	qs, err = ReadLabelled(queries, "dev", 5, qrels, seen)
	require.NoError(t, err)
	var ids []string
	for _, q := range qs {
		ids = append(ids, q.ID)
	}
	require.Equal(t, []string{"1", "3", "4", "5"}, ids, "BEIR _id/text keys; train, unlabelled and relevance-0 queries left out")
	require.Equal(t, "four", qs[2].Text)
}
