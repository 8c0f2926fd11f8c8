package plugin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzRerankRequest feeds arbitrary bodies to /v1/rerank: the server must answer 200 (ranked or fallback),
// 400 or 413, never panic or 5xx.
func FuzzRerankRequest(f *testing.F) {
	f.Add(rerankBody(threeHits(), "q"))
	f.Add(`{"query": "q", "hits": [{"_id": "1", "_source": {"title": "T"}}]}`)
	f.Add(`{"query": "", "hits": null}`)
	f.Add(`{"query": "q", "hits": [{"_source": 5}]}`)
	f.Add("{\"query\": \"\xff\"}")
	f.Add(`[]`)
	s := newServer(&fakeSearcher{}, &fakeReranker{rank: copyBeta}, testOptions{Options: Options{MaxBodyBytes: 1 << 16, RequestTimeout: 1e9, MaxQueryChars: 200, MaxHits: 50},
		MinTopScore: -1e9})
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/v1/rerank", strings.NewReader(body))
		s.Handler().ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d for body %q: %s", rec.Code, body, rec.Body)
		}
	})
}
