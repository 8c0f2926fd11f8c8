//go:build integration

package adapter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/elastic/go-elasticsearch/v8/esutil"

	"github.com/icicle-search/sidecar/adapter"
)

// BenchmarkIngestSeenPreserving compares the ways of writing the nq_qed corpus (7,248 documents) that keep
// a stored document's seen flag, against the plain "index" action that drops it, each into a fresh index
// (every document new) and again into the filled one (every document replaced):
//
//	ICICLE_ES_URL=$(scripts/es.sh url) go test -tags integration ./adapter -run '^$' \
//	    -bench BenchmarkIngestSeenPreserving -benchtime 1x -count 3
//
// index is IngestOptions{} (the action before issue 13: overwrites seen). keep_stored is
// IngestOptions{KeepStored: true}: a multi-get per 500 documents, then create/index with if_seq_no (what
// /v1/ingest and `icicle ingest` do; it also refuses a different text under a docid), and no write at all
// for a document stored as sent (its reingest here: the filled index holds the same documents). upsert is the bulk
// "update" action with a partial doc (no seen) and an upsert (seen false): it keeps seen in one request,
// but cannot refuse a different text (no scripting on this node).
func BenchmarkIngestSeenPreserving(b *testing.B) {
	url := benchURL(b)
	docs := benchCorpus(b)
	const index = "icicle-bench-keep"
	a := benchAdapter(b, url, index)
	b.Cleanup(func() { benchDelete(b, url, index) })
	ht := http.DefaultTransport.(*http.Transport).Clone()
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{url}, Transport: ht})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(ht.CloseIdleConnections)
	ingest := map[string]func(ctx context.Context) (int, error){
		"index": func(ctx context.Context) (int, error) {
			rep, err := a.Ingest(ctx, slices.Values(docs), adapter.IngestOptions{})
			return rep.Indexed + rep.Updated, err
		},
		"keep_stored": func(ctx context.Context) (int, error) {
			rep, err := a.Ingest(ctx, slices.Values(docs), adapter.IngestOptions{KeepStored: true})
			return rep.Indexed + rep.Updated + rep.Unchanged, err // unchanged: stored as sent, not written again
		},
		"upsert": func(ctx context.Context) (int, error) {
			var ok atomic.Int64
			bi, err := esutil.NewBulkIndexer(esutil.BulkIndexerConfig{Client: es, Index: index, NumWorkers: 2})
			if err != nil {
				return 0, err
			}
			now := time.Now().UTC()
			for _, d := range docs {
				doc := map[string]any{"docid": d.DocID, "title": d.Title, "text": d.Text, "summary": d.Summary, "ingested_at": now}
				up := map[string]any{"docid": d.DocID, "title": d.Title, "text": d.Text, "summary": d.Summary, "ingested_at": now, "seen": d.Seen}
				body, _ := json.Marshal(map[string]any{"doc": doc, "upsert": up})
				if err := bi.Add(ctx, esutil.BulkIndexerItem{Action: "update", DocumentID: adapter.DocumentID(d.DocID), Body: bytes.NewReader(body),
					OnSuccess: func(context.Context, esutil.BulkIndexerItem, esutil.BulkIndexerResponseItem) { ok.Add(1) }}); err != nil {
					return 0, err
				}
			}
			err = bi.Close(ctx)
			return int(ok.Load()), err
		},
	}
	for _, mode := range []string{"index", "keep_stored", "upsert"} {
		for _, fresh := range []bool{true, false} {
			name := mode + "/reingest"
			if fresh {
				name = mode + "/fresh"
			}
			b.Run(name, func(b *testing.B) {
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
					if !fresh {
						if _, err := ingest["index"](ctx); err != nil { // the filled index, whatever ran before
							b.Fatal(err)
						}
					}
					b.StartTimer()
					start := time.Now()
					n, err := ingest[mode](ctx)
					took += time.Since(start)
					if err != nil || n != len(docs) {
						b.Fatalf("%s: %d of %d accounted for, %v", mode, n, len(docs), err)
					}
				}
				b.ReportMetric(float64(len(docs)*b.N)/took.Seconds(), "docs/s")
			})
		}
	}
}
