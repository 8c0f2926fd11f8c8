package adapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/elastic/go-elasticsearch/v8/esapi"
)

// BackfillOptions tunes Backfill.
type BackfillOptions struct {
	// Embed returns the vectors of docs (one each, in order). Required.
	Embed func(ctx context.Context, docs []Doc) ([][]float32, error)
	// VectorModel names the encoder behind Embed. Documents whose VectorModelField differs (or is absent)
	// are the ones Backfill embeds. Required.
	VectorModel string
	// PageSize is how many documents are read, embedded and written at once. Default 128.
	PageSize int
	// Progress, if set, is called after each page with the documents written so far and the total that
	// needed a vector when the run started.
	Progress func(done, total int)
}

// BackfillReport says what Backfill did.
type BackfillReport struct {
	// Needed is how many documents lacked the encoder's vector when the run started.
	Needed int
	// Written counts documents that got their vector.
	Written int
	// Changed counts documents skipped because they were rewritten between the read and the update
	// (their new version is picked up by the next run).
	Changed int
	// Failed lists documents Elasticsearch refused, with the reason.
	Failed []Failure
}

// Backfill gives every document of the index the vector of opts.VectorModel: it pages through the
// documents without it (in docid order, search_after), embeds each page and writes the vectors with
// partial updates (only VectorField and VectorModelField change; no script is needed), each over the
// version it read, so a document rewritten meanwhile is not given a stale vector. It is resumable by
// construction: a run that stops (interrupted, or the cluster down) leaves the written vectors in place,
// and the next run embeds only what is still missing.
func (a *Adapter) Backfill(ctx context.Context, opts BackfillOptions) (BackfillReport, error) {
	var rep BackfillReport
	if opts.Embed == nil || opts.VectorModel == "" || a.vectorDims <= 0 {
		return rep, fmt.Errorf("backfill %q: %w: Embed, VectorModel and an adapter with VectorDims are required", a.index, ErrInvalidArgument)
	}
	page := opts.PageSize
	if page <= 0 {
		page = 128
	}
	missing := map[string]any{"bool": map[string]any{"must_not": []any{
		map[string]any{"term": map[string]any{VectorModelField: opts.VectorModel}},
	}}}
	n, err := a.CountWithoutVector(ctx, opts.VectorModel)
	if err != nil {
		return rep, fmt.Errorf("backfill: %w", err)
	}
	rep.Needed = n
	var after []any
	for {
		body := map[string]any{
			"size": page, "query": missing, "sort": []any{map[string]any{"docid": "asc"}},
			"_source": []string{"docid", "title", "text"}, "seq_no_primary_term": true, "track_total_hits": false,
		}
		if after != nil {
			body["search_after"] = after
		}
		b, _ := json.Marshal(body)
		var res struct {
			Hits struct {
				Hits []struct {
					ID          string `json:"_id"`
					SeqNo       int64  `json:"_seq_no"`
					PrimaryTerm int64  `json:"_primary_term"`
					Source      struct {
						DocID string `json:"docid"`
						Title string `json:"title"`
						Text  string `json:"text"`
					} `json:"_source"`
					Sort []any `json:"sort"`
				} `json:"hits"`
			} `json:"hits"`
		}
		if err := a.do(ctx, esapi.SearchRequest{Index: []string{a.index}, Body: bytes.NewReader(b)}, &res); err != nil {
			return rep, fmt.Errorf("backfill %q: read documents without vectors: %w", a.index, err)
		}
		hits := res.Hits.Hits
		if len(hits) == 0 {
			break
		}
		after = hits[len(hits)-1].Sort
		docs := make([]Doc, len(hits))
		for i, h := range hits {
			docs[i] = Doc{DocID: h.Source.DocID, Title: h.Source.Title, Text: h.Source.Text}
		}
		vs, err := opts.Embed(ctx, docs)
		if err == nil && len(vs) != len(docs) {
			err = fmt.Errorf("%d vectors for %d documents", len(vs), len(docs))
		}
		if err != nil {
			return rep, fmt.Errorf("backfill %q: embed: %w (rerunning continues where this run stopped)", a.index, err)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for i, h := range hits {
			if len(vs[i]) != a.vectorDims {
				return rep, fmt.Errorf("backfill %q: embed: a vector of %d dims, the index has %d", a.index, len(vs[i]), a.vectorDims)
			}
			_ = enc.Encode(map[string]any{"update": map[string]any{"_id": h.ID, "if_seq_no": h.SeqNo, "if_primary_term": h.PrimaryTerm}})
			_ = enc.Encode(map[string]any{"doc": map[string]any{VectorField: vs[i], VectorModelField: opts.VectorModel}})
		}
		var bulk bulkUpdates
		if err := a.do(ctx, esapi.BulkRequest{Index: a.index, Body: &buf}, &bulk); err != nil {
			return rep, fmt.Errorf("backfill %q: write vectors: %w (rerunning continues where this run stopped)", a.index, err)
		}
		if len(bulk.Items) != len(hits) {
			return rep, fmt.Errorf("backfill %q: bulk update answered %d items for %d documents", a.index, len(bulk.Items), len(hits))
		}
		for i, item := range bulk.Items {
			r := item["update"]
			switch {
			case r.Status == http.StatusConflict:
				rep.Changed++
			case r.Error.Type != "":
				rep.Failed = append(rep.Failed, Failure{DocID: docs[i].DocID, Reason: r.Error.Type + ": " + r.Error.Reason, Retryable: retryable(r.Status)})
			default:
				rep.Written++
			}
		}
		if opts.Progress != nil {
			opts.Progress(rep.Written, rep.Needed)
		}
		if len(hits) < page {
			break
		}
	}
	if err := a.do(ctx, esapi.IndicesRefreshRequest{Index: []string{a.index}}, nil); err != nil && !errors.Is(err, context.Canceled) {
		return rep, fmt.Errorf("backfill %q: refresh: %w", a.index, err)
	}
	a.log.Info("backfill", "index", a.index, "model", opts.VectorModel, "needed", rep.Needed, "written", rep.Written,
		"changed", rep.Changed, "failed", len(rep.Failed))
	return rep, nil
}

// CountWithoutVector counts the documents that have no vector of the encoder named model.
func (a *Adapter) CountWithoutVector(ctx context.Context, model string) (int, error) {
	b, _ := json.Marshal(map[string]any{"query": map[string]any{"bool": map[string]any{"must_not": []any{
		map[string]any{"term": map[string]any{VectorModelField: model}}}}}})
	var count struct {
		Count int `json:"count"`
	}
	if err := a.do(ctx, esapi.CountRequest{Index: []string{a.index}, Body: bytes.NewReader(b)}, &count); err != nil {
		return 0, fmt.Errorf("count documents without vectors %q: %w", a.index, err)
	}
	return count.Count, nil
}
