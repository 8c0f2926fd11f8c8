//go:build integration

package adapter_test

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/internal/compress"
)

// Benchmarks against the real node on the whole data/nq_qed corpus (7,248 documents):
//
//	ICICLE_ES_URL=$(scripts/es.sh url) go test -tags integration ./adapter -run '^$' \
//	    -bench 'BenchmarkIngest|BenchmarkSearch' -benchtime 1x -count 6     # ingest: one corpus per op
//	... -bench BenchmarkSearch -benchtime 2s -count 6                        # search latency
//
// BenchmarkIngest writes the corpus into a fresh index each op (fresh: every document new) and again into
// the filled index (reingest: every document replaced), as `icicle ingest` does (summaries computed by the
// extractive compressor before the clock starts, default workers and flush size, no refresh wait).
// BenchmarkSearch runs real NQ queries in turn at k=100 (the sidecar's max_candidates) over the corpus with
// the tiny model's 200 seen documents marked; it reports the per-run median and p99 too. The search index,
// icicle-bench-nqqed, is built once and left on the node for the next run.

func benchRoot(b *testing.B) string {
	b.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

func benchURL(b *testing.B) string {
	b.Helper()
	u := os.Getenv("ICICLE_ES_URL")
	if u == "" {
		b.Skip("ICICLE_ES_URL is not set: start a node with scripts/es.sh start and export ICICLE_ES_URL=$(scripts/es.sh url)")
	}
	return u
}

// benchCorpus is the whole nq_qed corpus as `icicle ingest` sends it: summaries computed when absent, the
// tiny model's seen documents marked.
func benchCorpus(b *testing.B) []adapter.Doc {
	b.Helper()
	root := benchRoot(b)
	seen := map[string]bool{}
	f, err := os.Open(filepath.Join(root, "models", "tiny", "seen_docids.txt"))
	if err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			seen[line] = true
		}
	}
	f.Close()
	cr, err := adapter.OpenCorpus(filepath.Join(root, "data", "nq_qed", "corpus.jsonl.gz"), adapter.CorpusLimits{})
	if err != nil {
		b.Fatal(err)
	}
	defer cr.Close()
	var docs []adapter.Doc
	for d := range cr.All() {
		if d.Summary == "" {
			d.Summary = compress.Extractive(d.Text)
		}
		d.Seen = seen[d.DocID]
		docs = append(docs, d)
	}
	if cr.Err() != nil || len(cr.Rejected()) > 0 || len(docs) != 7248 {
		b.Fatalf("corpus: %d documents, %d rejected, err %v", len(docs), len(cr.Rejected()), cr.Err())
	}
	return docs
}

func benchQueries(b *testing.B) []string {
	b.Helper()
	f, err := os.Open(filepath.Join(benchRoot(b), "data", "nq_qed", "queries.jsonl.gz"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		b.Fatal(err)
	}
	var qs []string
	dec := json.NewDecoder(zr)
	for dec.More() {
		var q struct {
			Query string `json:"query"`
		}
		if err := dec.Decode(&q); err != nil {
			b.Fatal(err)
		}
		qs = append(qs, q.Query)
	}
	return qs
}

func benchDelete(b *testing.B, url, index string) {
	b.Helper()
	req, _ := http.NewRequest(http.MethodDelete, url+"/"+index+"?ignore_unavailable=true", nil)
	res, err := plain.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	res.Body.Close()
}

func benchAdapter(b *testing.B, url, index string) *adapter.Adapter {
	b.Helper()
	a, err := adapter.New(adapter.Options{Addresses: []string{url}, Index: index, RequestTimeout: time.Minute}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	return a
}

func BenchmarkIngest(b *testing.B) {
	url := benchURL(b)
	docs := benchCorpus(b)
	const index = "icicle-bench-ingest"
	a := benchAdapter(b, url, index)
	b.Cleanup(func() { benchDelete(b, url, index) })
	for _, fresh := range []bool{true, false} {
		name := "reingest"
		if fresh {
			name = "fresh"
		}
		b.Run(name+"/docs=7248", func(b *testing.B) {
			b.ReportAllocs()
			ctx := b.Context()
			var took time.Duration
			for b.Loop() {
				b.StopTimer()
				if fresh {
					benchDelete(b, url, index)
				}
				if err := a.EnsureIndex(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				rep, err := a.Ingest(ctx, slices.Values(docs), adapter.IngestOptions{})
				took += time.Since(start)
				if err != nil || len(rep.Failed) > 0 || rep.Total() != len(docs) || fresh && rep.Indexed != len(docs) {
					b.Fatalf("ingest: %+v, %v", rep, err)
				}
			}
			b.ReportMetric(float64(len(docs)*b.N)/took.Seconds(), "docs/s")
		})
	}
}

func BenchmarkSearch(b *testing.B) {
	url := benchURL(b)
	const index = "icicle-bench-nqqed"
	a := benchAdapter(b, url, index)
	ctx := b.Context()
	// Build the index unless a previous run left it complete.
	if n, err := a.SeenCount(ctx); err != nil || n != 200 {
		docs := benchCorpus(b)
		benchDelete(b, url, index)
		if err := a.EnsureIndex(ctx); err != nil {
			b.Fatal(err)
		}
		rep, err := a.Ingest(ctx, slices.Values(docs), adapter.IngestOptions{Refresh: true})
		if err != nil || rep.Indexed != len(docs) {
			b.Fatalf("ingest: %+v, %v", rep, err)
		}
		res, err := plain.Post(url+"/"+index+"/_forcemerge?max_num_segments=1", "application/json", nil)
		if err != nil {
			b.Fatal(err)
		}
		res.Body.Close()
	}
	queries := benchQueries(b)
	for _, bm := range []struct {
		name   string
		search func(a *adapter.Adapter) func(query string) ([]adapter.Hit, error)
	}{
		{"SearchNew", func(a *adapter.Adapter) func(string) ([]adapter.Hit, error) {
			return func(q string) ([]adapter.Hit, error) { return a.SearchNew(ctx, q, 100) }
		}},
		{"SearchAll", func(a *adapter.Adapter) func(string) ([]adapter.Hit, error) {
			return func(q string) ([]adapter.Hit, error) { return a.SearchAll(ctx, q, 100) }
		}},
		// Issue 14: /v1/search needs both (the baseline and the model's context); plugin runs them at once.
		{"SearchAll+SearchNew_sequential", func(a *adapter.Adapter) func(string) ([]adapter.Hit, error) {
			return func(q string) ([]adapter.Hit, error) {
				if _, err := a.SearchNew(ctx, q, 100); err != nil {
					return nil, err
				}
				return a.SearchAll(ctx, q, 100)
			}
		}},
		{"SearchAll+SearchNew_concurrent", func(a *adapter.Adapter) func(string) ([]adapter.Hit, error) {
			return func(q string) ([]adapter.Hit, error) {
				var newErr error
				done := make(chan struct{})
				go func() { defer close(done); _, newErr = a.SearchNew(ctx, q, 100) }()
				hits, err := a.SearchAll(ctx, q, 100)
				<-done
				return hits, errors.Join(err, newErr)
			}
		}},
	} {
		b.Run(bm.name+"/k=100", func(b *testing.B) {
			b.ReportAllocs()
			search := bm.search(a)
			var lat []time.Duration
			i := 0
			for b.Loop() {
				q := queries[i%len(queries)]
				i++
				start := time.Now()
				hits, err := search(q)
				lat = append(lat, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				if len(hits) == 0 {
					b.Fatalf("no hits for %q", q)
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}
