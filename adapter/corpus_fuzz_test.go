package adapter

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCorpusReader: any input yields documents with a docid, a title and valid UTF-8, or rejections;
// every line is either accepted or rejected, and nothing panics.
func FuzzCorpusReader(f *testing.F) {
	f.Add(`{"docid": "A", "title": "A", "text": "alpha"}` + "\n" + `{"_id": "B", "title": "B", "text": "b"}`)
	f.Add(`{"docid": "", "title": "x", "text": "y"}`)
	f.Add("{\"docid\": \"\xff\", \"title\": \"t\", \"text\": \"u\"}\n\n")
	f.Add(`not json`)
	f.Fuzz(func(t *testing.T, in string) {
		r := NewCorpusReader(strings.NewReader(in), CorpusLimits{})
		n := 0
		for d := range r.All() {
			n++
			if d.DocID == "" || d.Title == "" || !utf8.ValidString(d.DocID+d.Title+d.Text+d.Summary) {
				t.Fatalf("accepted a bad document: %+v", d)
			}
		}
		if r.Err() == nil && n+len(r.Rejected()) > r.Lines() {
			t.Fatalf("%d accepted + %d rejected > %d lines", n, len(r.Rejected()), r.Lines())
		}
	})
}
