package adapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
)

// EnrichOptions say what Enrich adds. Each of the three is optional; at least one is required.
type EnrichOptions struct {
	// Embed returns the vectors of docs (one each, in order): documents whose VectorModelField is not
	// VectorModel (or absent) get one.
	Embed func(ctx context.Context, docs []Doc) ([][]float32, error)
	// VectorModel names the encoder behind Embed. Required with Embed.
	VectorModel string
	// Summarize returns the summaries of docs (one each, in order): documents without a summary get one.
	Summarize func(ctx context.Context, docs []Doc) ([]string, error)
	// Seen, when set, marks documents without a seen flag: true for the docids it holds, false for others.
	Seen map[string]bool
	// PageSize is how many documents are read, enriched and written at once. Default 128.
	PageSize int
	// Progress, if set, is called after each page with the documents written so far and the total that
	// needed something when the run started.
	Progress func(done, total int)
	// Slice and Slices, with Slices > 1, limit the run to part Slice (0-based) of Slices disjoint parts of the
	// index (a sliced point in time), so that workers on several machines enrich one index together. Slices
	// may not exceed the index's primary shards: a part is then a fixed set of whole shards, a document's part
	// never changes, and rerunning a stopped worker's part finishes it. (With more parts than shards
	// Elasticsearch splits a shard by document position within each worker's point in time, and the updates of
	// one worker move documents between the others' parts: measured, four parts of one shard run one after
	// the other enriched 31 of 40 documents.) Every update is conditional on the version read, so no document
	// is written twice.
	Slice, Slices int
}

// EnrichReport says what Enrich did.
type EnrichReport struct {
	// Needed is how many documents lacked something when the run started.
	Needed int
	// Written counts documents enriched; Vectors, Summaries and SeenFlags count what they got.
	Written, Vectors, Summaries, SeenFlags int
	// Changed counts documents skipped because they were rewritten between the read and the update (the
	// next run picks their new version up).
	Changed int
	// Failed lists documents Elasticsearch refused, with the reason.
	Failed []Failure
	// Shards is the fewest primary shards of the indices searched, read on a sliced run (the most Slices
	// allowed). 0 on an unsliced run.
	Shards int
}

// needsQuery selects the documents that lack something opts adds.
func (a *Adapter) needsQuery(opts EnrichOptions) map[string]any {
	var should []any
	if opts.Embed != nil {
		should = append(should, map[string]any{"bool": map[string]any{"must_not": []any{
			map[string]any{"term": map[string]any{a.f.VectorModel: opts.VectorModel}}}}})
	}
	if opts.Summarize != nil {
		should = append(should, map[string]any{"bool": map[string]any{"must_not": []any{
			map[string]any{"exists": map[string]any{"field": a.f.Summary}}}}})
	}
	if opts.Seen != nil {
		should = append(should, map[string]any{"bool": map[string]any{"must_not": []any{
			map[string]any{"exists": map[string]any{"field": a.f.Seen}}}}})
	}
	return map[string]any{"bool": map[string]any{"should": should, "minimum_should_match": 1}}
}

// CountWithoutVector counts the documents that have no vector of the encoder named model.
func (a *Adapter) CountWithoutVector(ctx context.Context, model string) (int, error) {
	return a.count(ctx, a.needsQuery(EnrichOptions{Embed: func(context.Context, []Doc) ([][]float32, error) { return nil, nil }, VectorModel: model}))
}

func (a *Adapter) count(ctx context.Context, query map[string]any) (int, error) {
	b, _ := json.Marshal(map[string]any{"query": query})
	var count struct {
		Count int `json:"count"`
	}
	if err := a.do(ctx, esapi.CountRequest{Index: []string{a.index}, Body: bytes.NewReader(b)}, &count); err != nil {
		return 0, fmt.Errorf("count %q: %w", a.index, err)
	}
	return count.Count, nil
}

// Enrich gives every document of the index what the sidecar needs and lacks: the encoder's vector, a
// summary, the seen flag. It pages through the documents that lack something (a point in time, in shard
// order, so it works whatever the docid field), computes only what each lacks from its title and body
// fields, and writes it with partial updates of the sidecar's fields alone, each over the version it
// read: the team's own fields never change, and a document rewritten meanwhile is not given stale data.
// Resumable by construction: a run that stops leaves what it wrote, and the next one selects only what is
// still missing.
// An update that Elasticsearch sheds for load is sent again as Ingest's documents are; one shed at every
// attempt is in Failed, retryable.
func (a *Adapter) Enrich(ctx context.Context, opts EnrichOptions) (EnrichReport, error) {
	var rep EnrichReport
	switch {
	case opts.Embed == nil && opts.Summarize == nil && opts.Seen == nil:
		return rep, fmt.Errorf("enrich %q: %w: nothing to add (Embed, Summarize or Seen)", a.index, ErrInvalidArgument)
	case opts.Embed != nil && (opts.VectorModel == "" || a.vectorDims <= 0):
		return rep, fmt.Errorf("enrich %q: %w: Embed needs VectorModel and an adapter with VectorDims", a.index, ErrInvalidArgument)
	case opts.Slices < 0:
		return rep, fmt.Errorf("enrich %q: %w: Slices %d: want 0 or more", a.index, ErrInvalidArgument, opts.Slices)
	case opts.Slices > 1 && (opts.Slice < 0 || opts.Slice >= opts.Slices):
		return rep, fmt.Errorf("enrich %q: %w: Slice %d: want 0..%d (Slices %d)", a.index, ErrInvalidArgument, opts.Slice, opts.Slices-1, opts.Slices)
	case opts.Slices <= 1 && opts.Slice != 0:
		return rep, fmt.Errorf("enrich %q: %w: Slice %d without Slices", a.index, ErrInvalidArgument, opts.Slice)
	}
	page := opts.PageSize
	if page <= 0 {
		page = 128
	}
	query := a.needsQuery(opts)
	var slice map[string]any
	if opts.Slices > 1 {
		slice = map[string]any{"id": opts.Slice, "max": opts.Slices}
		shards, err := a.fewestShards(ctx)
		if err != nil {
			return rep, fmt.Errorf("enrich: %w", err)
		}
		rep.Shards = shards
		if opts.Slices > shards {
			return rep, fmt.Errorf("enrich %q: %w: Slices %d is more than the index's %d primary shards: a part must be whole shards, "+
				"or the workers' updates move documents between parts and some are missed; run at most %d workers, or split the index into more shards (_split)",
				a.index, ErrInvalidArgument, opts.Slices, shards, shards)
		}
	}
	var pit struct {
		ID string `json:"id"`
	}
	if err := a.do(ctx, esapi.OpenPointInTimeRequest{Index: []string{a.index}, KeepAlive: "5m"}, &pit); err != nil {
		return rep, fmt.Errorf("enrich %q: open point in time: %w", a.index, err)
	}
	defer func() {
		body, _ := json.Marshal(map[string]string{"id": pit.ID})
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = a.do(cctx, esapi.ClosePointInTimeRequest{Body: bytes.NewReader(body)}, nil)
	}()
	{ // what needs something, counted in the point in time the pages read (the count API takes no slice)
		count := map[string]any{"size": 0, "query": query, "track_total_hits": true, "pit": map[string]any{"id": pit.ID, "keep_alive": "5m"}}
		if slice != nil {
			count["slice"] = slice
		}
		b, _ := json.Marshal(count)
		var res struct {
			Hits struct {
				Total struct {
					Value int `json:"value"`
				} `json:"total"`
			} `json:"hits"`
		}
		if err := a.do(ctx, whole(esapi.SearchRequest{Body: bytes.NewReader(b)}), &res); err != nil {
			return rep, fmt.Errorf("enrich %q: count: %w", a.index, err)
		}
		rep.Needed = res.Hits.Total.Value
	}
	fields := append([]string{a.f.Title, a.f.Summary, a.f.Seen, a.f.VectorModel}, a.f.Body...)
	if a.f.DocID != IDField {
		fields = append(fields, a.f.DocID)
	}
	var after []any
	for {
		body := map[string]any{
			"size": page, "query": query, "sort": []any{map[string]any{"_shard_doc": "asc"}},
			"_source": fields, "seq_no_primary_term": true, "track_total_hits": false,
			"pit": map[string]any{"id": pit.ID, "keep_alive": "5m"},
		}
		if after != nil {
			body["search_after"] = after
		}
		if slice != nil {
			body["slice"] = slice
		}
		b, _ := json.Marshal(body)
		var res struct {
			PitID string `json:"pit_id"`
			Hits  struct {
				Hits []struct {
					ID          string                     `json:"_id"`
					SeqNo       int64                      `json:"_seq_no"`
					PrimaryTerm int64                      `json:"_primary_term"`
					Source      map[string]json.RawMessage `json:"_source"`
					Sort        []any                      `json:"sort"`
				} `json:"hits"`
			} `json:"hits"`
		}
		if err := a.do(ctx, whole(esapi.SearchRequest{Body: bytes.NewReader(b)}), &res); err != nil {
			return rep, fmt.Errorf("enrich %q: read documents: %w (rerunning continues where this run stopped)", a.index, err)
		}
		if res.PitID != "" {
			pit.ID = res.PitID
		}
		hits := res.Hits.Hits
		if len(hits) == 0 {
			break
		}
		after = hits[len(hits)-1].Sort
		// What each document lacks, and its text.
		docs := make([]Doc, len(hits))
		updates := make([]map[string]any, len(hits))
		var embed, summarize []int
		for i, h := range hits {
			src, _ := json.Marshal(h.Source)
			docid, title, summary := a.f.read(h.ID, src)
			var body []string
			for _, f := range a.f.Body {
				if t := sourceString(h.Source, f); t != "" {
					body = append(body, t)
				}
			}
			docs[i] = Doc{DocID: docid, Title: title, Text: strings.Join(body, "\n"), Summary: summary}
			updates[i] = map[string]any{}
			var model string
			_ = json.Unmarshal(h.Source[a.f.VectorModel], &model)
			if opts.Embed != nil && model != opts.VectorModel {
				embed = append(embed, i)
			}
			if _, has := h.Source[a.f.Summary]; opts.Summarize != nil && !has {
				summarize = append(summarize, i)
			}
			if _, has := h.Source[a.f.Seen]; opts.Seen != nil && !has {
				updates[i][a.f.Seen] = opts.Seen[docid]
				rep.SeenFlags++
			}
		}
		if len(summarize) > 0 {
			sums, err := opts.Summarize(ctx, pick(docs, summarize))
			if err == nil && len(sums) != len(summarize) {
				err = fmt.Errorf("%d summaries for %d documents", len(sums), len(summarize))
			}
			if err != nil {
				return rep, fmt.Errorf("enrich %q: summarise: %w (rerunning continues where this run stopped)", a.index, err)
			}
			for j, i := range summarize {
				updates[i][a.f.Summary] = sums[j]
				rep.Summaries++
			}
		}
		if len(embed) > 0 {
			vs, err := embedDocs(ctx, opts.Embed, pick(docs, embed), a.vectorDims)
			if err != nil {
				return rep, fmt.Errorf("enrich %q: embed: %w (rerunning continues where this run stopped)", a.index, err)
			}
			for j, i := range embed {
				updates[i][a.f.Vector], updates[i][a.f.VectorModel] = vs[j], opts.VectorModel
				rep.Vectors++
			}
		}
		var actions []bulkAction
		var sent []int
		for i, h := range hits {
			if len(updates[i]) == 0 {
				continue
			}
			source, err := json.Marshal(map[string]any{"doc": updates[i]})
			if err != nil {
				return rep, fmt.Errorf("enrich %q: encode the update of %q: %w", a.index, docs[i].DocID, err)
			}
			sent = append(sent, i)
			actions = append(actions, bulkAction{op: "update", id: h.ID, seqNo: &h.SeqNo, primaryTerm: &h.PrimaryTerm, source: source})
		}
		if len(actions) > 0 {
			results, err := a.bulkAll(ctx, "", actions)
			if err != nil {
				return rep, fmt.Errorf("enrich %q: write: %w (rerunning continues where this run stopped)", a.index, err)
			}
			for k, r := range results {
				switch {
				case r.status == http.StatusConflict:
					rep.Changed++
				case r.failed():
					rep.Failed = append(rep.Failed, Failure{DocID: docs[sent[k]].DocID, Reason: r.reason(), Retryable: r.retryable()})
				default:
					rep.Written++
				}
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
		return rep, fmt.Errorf("enrich %q: refresh: %w", a.index, err)
	}
	a.log.Info("enrich", "index", a.index, "slice", opts.Slice, "slices", max(opts.Slices, 1), "needed", rep.Needed, "written", rep.Written, "vectors", rep.Vectors,
		"summaries", rep.Summaries, "seen_flags", rep.SeenFlags, "changed", rep.Changed, "failed", len(rep.Failed))
	return rep, nil
}

// fewestShards reads the fewest primary shards among the indices the adapter's index names (an alias may
// name several).
func (a *Adapter) fewestShards(ctx context.Context) (int, error) {
	var settings map[string]struct {
		Settings map[string]string `json:"settings"`
	}
	req := esapi.IndicesGetSettingsRequest{Index: []string{a.index}, Name: []string{"index.number_of_shards"}, FlatSettings: esapi.BoolPtr(true)}
	if err := a.do(ctx, req, &settings); err != nil {
		return 0, fmt.Errorf("read the shards of %q: %w", a.index, err)
	}
	fewest := 0
	for name, s := range settings {
		n, err := strconv.Atoi(s.Settings["index.number_of_shards"])
		if err != nil || n < 1 {
			return 0, fmt.Errorf("read the shards of %q: index %q says number_of_shards %q", a.index, name, s.Settings["index.number_of_shards"])
		}
		if fewest == 0 || n < fewest {
			fewest = n
		}
	}
	if fewest == 0 {
		return 0, fmt.Errorf("read the shards of %q: no index", a.index)
	}
	return fewest, nil
}

// embedDocs returns the vectors embed computes for docs, checked: one per document, each of dims dimensions.
func embedDocs(ctx context.Context, embed func(context.Context, []Doc) ([][]float32, error), docs []Doc, dims int) ([][]float32, error) {
	vs, err := embed(ctx, docs)
	if err != nil {
		return nil, err
	}
	if len(vs) != len(docs) {
		return nil, fmt.Errorf("%d vectors for %d documents", len(vs), len(docs))
	}
	for _, v := range vs {
		if len(v) != dims {
			return nil, fmt.Errorf("a vector of %d dims, the index has %d", len(v), dims)
		}
	}
	return vs, nil
}

// pick returns the documents of docs at the positions idx.
func pick(docs []Doc, idx []int) []Doc {
	out := make([]Doc, len(idx))
	for j, i := range idx {
		out[j] = docs[i]
	}
	return out
}
