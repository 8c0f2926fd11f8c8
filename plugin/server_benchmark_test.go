package plugin

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/inference"
)

// BenchmarkRerankOverhead measures the sidecar's own cost per /v1/rerank request (decode and validate
// the body, build candidates, breaker, results, JSON response) with a model that answers instantly, so
// ns/op is the overhead on top of model time. Target: < 5 ms p50 at 100 hits.
//
//	go test -run '^$' -bench RerankOverhead -count 6 ./plugin
func BenchmarkRerankOverhead(b *testing.B) {
	for _, n := range []int{10, 100} {
		hits := make([]adapter.Hit, n)
		for i := range hits {
			hits[i] = adapter.Hit{ID: fmt.Sprint(i), DocID: fmt.Sprintf("Document %d", i), Title: fmt.Sprintf("Document %d", i),
				Summary: strings.Repeat("summary words of a compressed document ", 20), Score: float64(n - i)}
		}
		body := rerankBody(hits, "who appoints the chair of the federal reserve system")
		model := &fakeReranker{rank: func(_ context.Context, _ string, cands []inference.Candidate) (inference.Result, error) {
			beams := make([]inference.Beam, 10)
			for i := range beams {
				beams[i] = inference.Beam{DocID: cands[i*len(cands)/10].Title, Route: inference.RouteCopy, Score: -float64(i), Candidate: i * len(cands) / 10}
			}
			return inference.Result{Beams: beams, PCopy: 0.9, InContext: len(cands)}, nil
		}}
		s := newServer(&fakeSearcher{}, model, testOptions{Options: Options{MaxBodyBytes: 4 << 20, RequestTimeout: 1e9, MaxQueryChars: 1024, MaxHits: 1000},
			MaxCandidates: 100, MinTopScore: -1e9})
		h := s.Handler()
		b.Run(fmt.Sprintf("hits=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/rerank", strings.NewReader(body)))
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
}
