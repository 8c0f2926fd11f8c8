package adapter_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

func TestCorpusReader(t *testing.T) {
	long := strings.Repeat("a", 100)
	tests := []struct {
		name     string
		input    string
		limits   adapter.CorpusLimits
		want     []adapter.Doc
		rejected []adapter.RecordError
	}{
		{
			name: "valid records, extra keys ignored, BEIR _id accepted, CRLF and no final newline",
			input: `{"docid":"A","title":"Title A","text":"body a","n_paragraphs":3}` + "\r\n" +
				`{"_id":"B","title":"Title B","text":"body b","summary":"sum b"}` + "\n" +
				"\n" +
				`{"docid":"C","title":"Title C","text":"body c"}`,
			want: []adapter.Doc{
				{DocID: "A", Title: "Title A", Text: "body a"},
				{DocID: "B", Title: "Title B", Text: "body b", Summary: "sum b"},
				{DocID: "C", Title: "Title C", Text: "body c"},
			},
		},
		{
			name: "bad records are rejected with line numbers, the rest proceed",
			input: strings.Join([]string{
				`{"docid":"A","title":"Title A","text":"body a"}`,
				`{"docid":"B","text":"no title"}`,
				`{"docid":"C","title":"  ","text":"blank title"}`,
				`{"docid":"D","title":"Title D","text":"   "}`,
				`{"docid":"E","title":"Title E"}`,
				`{"title":"no id","text":"x"}`,
				`{"docid":"F","title":"Title F","text":"bad` + "\xff\xfe" + `"}`,
				`{"docid":"G","title":"Title G","text":`,
				`{"docid":"H","title":7,"text":"x"}`,
				`{"docid":"A","title":"Title A again","text":"dup"}`,
				`{"docid":"I","title":"Title I","text":"body i"}`,
			}, "\n") + "\n",
			want: []adapter.Doc{
				{DocID: "A", Title: "Title A", Text: "body a"},
				{DocID: "I", Title: "Title I", Text: "body i"},
			},
			rejected: []adapter.RecordError{
				{Line: 2, DocID: "B", Reason: "missing title"},
				{Line: 3, DocID: "C", Reason: "missing title"},
				{Line: 4, DocID: "D", Reason: "empty text"},
				{Line: 5, DocID: "E", Reason: "empty text"},
				{Line: 6, Reason: "missing docid"},
				{Line: 7, Reason: "invalid UTF-8 at byte 42"},
				{Line: 8, Reason: "invalid JSON: unexpected end of JSON input"},
				{Line: 9, Reason: `field "title" is a JSON number, want a string`},
				{Line: 10, DocID: "A", Reason: "duplicate docid, first on line 1"},
			},
		},
		{
			name: "oversized fields and lines",
			input: strings.Join([]string{
				`{"docid":"` + long + `","title":"t","text":"x"}`,
				`{"docid":"T","title":"` + long + `","text":"x"}`,
				`{"docid":"X","title":"t","text":"` + long + `"}`,
				`{"docid":"S","title":"t","text":"x","summary":"` + long + `"}`,
				`{"docid":"L","title":"t","text":"x","pad":"` + strings.Repeat("p", 5000) + `"}`,
				`{"docid":"OK","title":"t","text":"x"}`,
			}, "\n"),
			limits: adapter.CorpusLimits{MaxDocIDBytes: 50, MaxTitleBytes: 50, MaxTextBytes: 50, MaxSummaryBytes: 50, MaxLineBytes: 1000},
			want:   []adapter.Doc{{DocID: "OK", Title: "t", Text: "x"}},
			rejected: []adapter.RecordError{
				{Line: 1, DocID: long[:64] + "...", Reason: "docid is 100 bytes, limit 50"},
				{Line: 2, DocID: "T", Reason: "title is 100 bytes, limit 50"},
				{Line: 3, DocID: "X", Reason: "text is 100 bytes, limit 50"},
				{Line: 4, DocID: "S", Reason: "summary is 100 bytes, limit 50"},
				{Line: 5, Reason: "line longer than 1000 bytes"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cr := adapter.NewCorpusReader(strings.NewReader(tt.input), tt.limits)
			got := slices.Collect(cr.All())
			require.NoError(t, cr.Err())
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.rejected, cr.Rejected())
			require.Empty(t, slices.Collect(cr.All()), "the input is read once")
		})
	}
}

func TestCorpusReaderLongLineAtEOF(t *testing.T) {
	in := `{"docid":"A","title":"t","text":"x"}` + "\n" + `{"docid":"B","title":"t","text":"` + strings.Repeat("y", 300_000) + `"}`
	cr := adapter.NewCorpusReader(strings.NewReader(in), adapter.CorpusLimits{MaxLineBytes: 100_000})
	got := slices.Collect(cr.All())
	require.NoError(t, cr.Err())
	require.Len(t, got, 1)
	require.Equal(t, []adapter.RecordError{{Line: 2, Reason: "line longer than 100000 bytes"}}, cr.Rejected())
}

func TestOpenCorpusGzip(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write([]byte(`{"docid":"A","title":"t","text":"x"}` + "\n" + `{"docid":"B","title":"t","text":"y"}` + "\n"))
	require.NoError(t, err)
	require.NoError(t, zw.Close())

	t.Run("whole file", func(t *testing.T) {
		path := filepath.Join(dir, "c.jsonl.gz")
		require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
		cr, err := adapter.OpenCorpus(path, adapter.CorpusLimits{})
		require.NoError(t, err)
		require.Len(t, slices.Collect(cr.All()), 2)
		require.NoError(t, cr.Err())
		require.NoError(t, cr.Close())
		require.NoError(t, cr.Close())
	})
	t.Run("truncated file stops with an error", func(t *testing.T) {
		path := filepath.Join(dir, "cut.jsonl.gz")
		require.NoError(t, os.WriteFile(path, buf.Bytes()[:buf.Len()-10], 0o644))
		cr, err := adapter.OpenCorpus(path, adapter.CorpusLimits{})
		require.NoError(t, err)
		defer cr.Close()
		for range cr.All() {
		}
		require.Error(t, cr.Err())
		require.True(t, errors.Is(cr.Err(), gzip.ErrChecksum) || strings.Contains(cr.Err().Error(), "unexpected EOF"), "%v", cr.Err())
	})
	t.Run("missing file", func(t *testing.T) {
		_, err := adapter.OpenCorpus(filepath.Join(dir, "nope.jsonl"), adapter.CorpusLimits{})
		require.ErrorIs(t, err, os.ErrNotExist)
	})
}

// TestRepositoryCorpus reads the NQ-QED corpus shipped in data/: every record must pass.
func TestRepositoryCorpus(t *testing.T) {
	cr, err := adapter.OpenCorpus(filepath.Join(repoRoot(t), "data", "nq_qed", "corpus.jsonl.gz"), adapter.CorpusLimits{})
	require.NoError(t, err)
	defer cr.Close()
	n := 0
	for d := range cr.All() {
		require.NotEmpty(t, d.DocID)
		n++
	}
	require.NoError(t, cr.Err())
	require.Empty(t, cr.Rejected())
	require.Equal(t, 7248, n)
}
