package adapter

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/elastic/go-elasticsearch/v8/esapi"
)

// Snippets replaces each hit's Summary with the passage of its body fields that best matches the query, about
// chars characters long, as Elasticsearch's unified highlighter picks it (the text split into sentences, long
// ones at a word boundary near chars, each scored by BM25 against the query; the best one), in one search by
// _id. A hit whose body matches none of the query's terms gets its body's first chars characters; a hit whose
// document is gone, or whose body fields are empty, keeps its Summary. The stored summary is what every
// query reads; a snippet is what this query's evidence looks like (docs/research/2026-11-readers.md, "Query snippets instead of stored summaries").
func (a *Adapter) Snippets(ctx context.Context, query string, hits []Hit, chars int) error {
	if len(hits) == 0 {
		return nil
	}
	if strings.TrimSpace(query) == "" {
		return fmt.Errorf("snippets %q: %w: empty query", a.index, ErrInvalidArgument)
	}
	if chars < 1 {
		return fmt.Errorf("snippets %q: %w: chars=%d, want at least 1", a.index, ErrInvalidArgument, chars)
	}
	ids := make([]string, 0, len(hits))
	for _, h := range hits {
		if h.ID != "" {
			ids = append(ids, h.ID)
		}
	}
	body, err := SnippetBody(query, ids, chars, a.f.Body)
	if err != nil {
		return err
	}
	var res struct {
		Hits struct {
			Hits []struct {
				ID        string              `json:"_id"`
				Highlight map[string][]string `json:"highlight"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := a.do(ctx, whole(esapi.SearchRequest{Index: []string{a.index}, Body: bytes.NewReader(body)}), &res); err != nil {
		return fmt.Errorf("snippets %q: %w", a.index, err)
	}
	best := make(map[string]string, len(res.Hits.Hits))
	for _, h := range res.Hits.Hits {
		for _, f := range a.f.Body { // the first body field with a fragment
			if frags := h.Highlight[f]; len(frags) > 0 && strings.TrimSpace(frags[0]) != "" {
				best[h.ID] = strings.TrimSpace(frags[0])
				break
			}
		}
	}
	for i := range hits {
		if s, ok := best[hits[i].ID]; ok {
			hits[i].Summary = s
		}
	}
	return nil
}

// SnippetBody is Snippets' search body: the documents ids by _id, each body field's best fragment of about chars
// characters (the first chars characters when nothing matches), highlighted without tags. The reader's training
// set asks the same of Elasticsearch (training/icicle/readerdata.py snippet_request), so that a reader trained on
// snippets reads what it is served; testdata/snippet_request.json holds the body both sides must produce.
func SnippetBody(query string, ids []string, chars int, bodyFields []string) ([]byte, error) {
	fields := map[string]any{}
	for _, f := range bodyFields {
		fields[f] = map[string]any{"fragment_size": chars, "number_of_fragments": 1, "no_match_size": chars}
	}
	return json.Marshal(map[string]any{
		"size":             len(ids),
		"_source":          false,
		"track_total_hits": false,
		"query":            map[string]any{"ids": map[string]any{"values": ids}},
		"highlight": map[string]any{
			"type": "unified", "order": "score", "pre_tags": []string{""}, "post_tags": []string{""},
			"highlight_query": map[string]any{"multi_match": map[string]any{"query": query, "fields": bodyFields}},
			"fields":          fields,
		},
	})
}
