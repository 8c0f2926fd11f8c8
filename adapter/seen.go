package adapter

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
)

// SeenPageSize is the number of docids ListSeen reads per request: the most one search may return under
// Elasticsearch's default index.max_result_window, so 100K seen documents take 10 requests.
const SeenPageSize = 10000

// SeenDiffExamples is how many docids a SeenDiff lists on each side; its counts are always exact.
const SeenDiffExamples = 20

// pitKeepAlive is how long the listing's point in time lives between two page requests.
const pitKeepAlive = "1m"

// ListSeen calls fn with the docids of every document marked seen=true, in pages of at most SeenPageSize,
// in docid byte order. All pages come from one point in time of the index, so documents written during the
// listing neither appear twice nor shift a page. Only the docid is read, from its doc values (the sort
// key), never _source. fn owns each page and may keep it; an error from fn stops the listing and is
// returned as it is. A shard that fails is an error, never a silently shorter list.
func (a *Adapter) ListSeen(ctx context.Context, fn func(docids []string) error) error {
	q := map[string]any{"term": map[string]any{a.f.Seen: true}}
	err := a.listPIT(ctx, q, false, a.seenPageSize, func(hits []pitHit) error {
		page := make([]string, len(hits))
		for i, h := range hits {
			if a.f.DocID == IDField {
				page[i] = h.ID
				continue
			}
			if len(h.Sort) == 0 || json.Unmarshal(h.Sort[0], &page[i]) != nil {
				return fmt.Errorf("decode response: hit %d has no docid sort value", i)
			}
		}
		return fn(page)
	})
	if err != nil {
		return fmt.Errorf("list seen %q: %w", a.index, err)
	}
	return nil
}

// ListNew calls fn with the documents not marked seen (the model's candidates), each with its ID, DocID,
// Title and Summary, in pages of pageSize (at most SeenPageSize), from one point in time of the index as
// ListSeen, in docid order. fn owns each page; an error from fn stops the listing and is returned as it is.
func (a *Adapter) ListNew(ctx context.Context, pageSize int, fn func(docs []Hit) error) error {
	if pageSize < 1 || pageSize > SeenPageSize {
		return fmt.Errorf("list new %q: %w: page size %d, want 1..%d", a.index, ErrInvalidArgument, pageSize, SeenPageSize)
	}
	err := a.listPIT(ctx, a.f.notSeen(), true, pageSize, func(hits []pitHit) error {
		page := make([]Hit, len(hits))
		for i, h := range hits {
			page[i] = a.sourceHit(sourceHit{ID: h.ID, Source: h.Source})
		}
		return fn(page)
	})
	if err != nil {
		return fmt.Errorf("list new %q: %w", a.index, err)
	}
	return nil
}

// pitHit is a hit of a point-in-time listing.
type pitHit struct {
	ID     string            `json:"_id"`
	Sort   []json.RawMessage `json:"sort"`
	Source json.RawMessage   `json:"_source"`
}

// listPIT pages through the documents matching query in docid order (listSort) from one point in time, size
// per page, with their title and summary when source is set, and calls fn with each page that is not empty.
func (a *Adapter) listPIT(ctx context.Context, query map[string]any, source bool, size int, fn func([]pitHit) error) error {
	var pit struct {
		ID string `json:"id"`
	}
	// No allow_partial_search_results here: 8.14 refuses the parameter on _pit; each page checks its shards.
	req := esapi.OpenPointInTimeRequest{Index: []string{a.index}, KeepAlive: pitKeepAlive}
	if err := a.do(ctx, req, &pit); err != nil {
		return fmt.Errorf("open point in time: %w", err)
	}
	defer func() {
		// Close even when ctx is done: an abandoned point in time pins segments until it expires.
		body, _ := json.Marshal(map[string]string{"id": pit.ID})
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := a.do(cctx, esapi.ClosePointInTimeRequest{Body: bytes.NewReader(body)}, nil); err != nil {
			a.log.Warn("close point in time", "index", a.index, "err", err)
		}
	}()
	var after []json.RawMessage
	for {
		hits, pitID, err := a.pitPage(ctx, pit.ID, after, query, source, size)
		if err != nil {
			return err
		}
		pit.ID = pitID // Elasticsearch may hand back a new id; the latest is the one to use and close
		if len(hits) > 0 {
			if err := fn(hits); err != nil {
				return err
			}
		}
		if len(hits) < size {
			return nil
		}
		after = hits[len(hits)-1].Sort
	}
}

// pitPage reads one page of listPIT after the sort values after (nil for the first page) and returns its hits
// and the point-in-time id to use next.
func (a *Adapter) pitPage(ctx context.Context, pitID string, after []json.RawMessage, query map[string]any, source bool, size int) ([]pitHit, string, error) {
	q := map[string]any{
		"size":             size,
		"_source":          false,
		"track_total_hits": false,
		"query":            query,
		// The docid field is unique per document (in the sidecar's layout it derives the _id); the point in
		// time adds its own tiebreaker. With the docid in _id (which cannot be sorted on), the shard order.
		"sort": a.listSort(),
		"pit":  map[string]any{"id": pitID, "keep_alive": pitKeepAlive},
	}
	if source {
		q["_source"] = a.f.sourceFields()
	}
	if after != nil {
		q["search_after"] = after
	}
	body, err := json.Marshal(q)
	if err != nil {
		return nil, "", err
	}
	var res struct {
		PitID    string `json:"pit_id"`
		TimedOut bool   `json:"timed_out"`
		Shards   struct {
			Failed int `json:"failed"`
		} `json:"_shards"`
		Hits struct {
			Hits []pitHit `json:"hits"`
		} `json:"hits"`
	}
	// No index in the path: a point-in-time search names its index through the id.
	if err := a.do(ctx, whole(esapi.SearchRequest{Body: bytes.NewReader(body)}), &res); err != nil {
		return nil, "", err
	}
	if res.TimedOut || res.Shards.Failed > 0 {
		return nil, "", fmt.Errorf("%w: page incomplete (timed out %t, %d shards failed)", ErrUnavailable, res.TimedOut, res.Shards.Failed)
	}
	return res.Hits.Hits, cmp.Or(res.PitID, pitID), nil
}

// SeenDiff compares the documents marked seen in the index with the deployed model's seen corpus. The
// counts are exact; the lists hold the first SeenDiffExamples docids of each side in byte order.
type SeenDiff struct {
	// IndexSeen is the number of documents marked seen=true in the index.
	IndexSeen int
	// ModelSeen is the number of distinct docids in the model's seen corpus.
	ModelSeen int
	// MissingInIndex lists docids of the model's seen corpus with no seen=true document in the index:
	// absent (a parametric answer that will not resolve) or marked new (a candidate that can also be
	// generated from memory).
	MissingInIndex []string
	// MissingInIndexCount is how many there are.
	MissingInIndexCount int
	// NotInModel lists seen=true docids the model does not know: SearchNew skips them and the model
	// cannot generate them, so no query can reach them.
	NotInModel []string
	// NotInModelCount is how many there are.
	NotInModelCount int
}

// Consistent reports whether the index's seen documents are exactly the model's seen corpus.
func (d SeenDiff) Consistent() bool { return d.MissingInIndexCount == 0 && d.NotInModelCount == 0 }

// SeenDiff lists the seen documents (ListSeen) and compares them with modelSeen, the model's seen
// corpus (duplicates count once). Memory is one set of modelSeen; the index side is streamed.
func (a *Adapter) SeenDiff(ctx context.Context, modelSeen []string) (SeenDiff, error) {
	want := make(map[string]bool, len(modelSeen)) // docid -> found in the index
	for _, d := range modelSeen {
		want[d] = false
	}
	diff := SeenDiff{ModelSeen: len(want)}
	err := a.ListSeen(ctx, func(page []string) error {
		diff.IndexSeen += len(page)
		for _, d := range page {
			if _, ok := want[d]; ok {
				want[d] = true
				continue
			}
			diff.NotInModelCount++
			if len(diff.NotInModel) < SeenDiffExamples {
				diff.NotInModel = append(diff.NotInModel, d) // pages come in byte order
			}
		}
		return nil
	})
	if err != nil {
		return SeenDiff{}, err
	}
	var missing []string
	for d, found := range want {
		if !found {
			missing = append(missing, d)
		}
	}
	slices.Sort(missing)
	diff.MissingInIndexCount = len(missing)
	// A copy, so a diff kept for a while (readiness) does not pin the whole list.
	diff.MissingInIndex = slices.Clone(missing[:min(len(missing), SeenDiffExamples)])
	a.log.Debug("seen diff", "index", a.index, "index_seen", diff.IndexSeen, "model_seen", diff.ModelSeen,
		"missing_in_index", diff.MissingInIndexCount, "not_in_model", diff.NotInModelCount)
	return diff, nil
}

// listSort is the listings' sort: by the docid field, or in shard order when the docid is the _id.
func (a *Adapter) listSort() []any {
	if a.f.DocID == IDField {
		return []any{map[string]any{"_shard_doc": "asc"}}
	}
	return []any{map[string]any{a.f.DocID: "asc"}}
}
