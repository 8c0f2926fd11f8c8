package adapter

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/elastic/go-elasticsearch/v8/esapi"
)

// MaxK is the largest k SearchNew and SearchAll accept: Elasticsearch's default index.max_result_window.
const MaxK = 10000

// Hit is one document returned by a search or a lookup.
type Hit struct {
	// ID is the Elasticsearch _id, DocumentID(DocID).
	ID string
	// DocID is the document identifier (the title in NQ/BEIR corpora).
	DocID string
	// Title is the document title.
	Title string
	// Summary is the stored compressed summary; empty if none was ingested.
	Summary string
	// Score is the score of the list the hit is in: the BM25 score of a BM25 search, the cosine of a dense
	// search, the fused score of the first stage (package retrieve); 0 for Resolve.
	Score float64
	// Rank is the 1-based position in the result list; 0 for Resolve.
	Rank int
	// BM25 and BM25Rank are the document's BM25 score and 1-based rank when BM25 found it (BM25Rank 0 when
	// it did not, e.g. a document only the kNN search found). A BM25 search sets them to Score and Rank.
	BM25     float64
	BM25Rank int
	// Dense is the cosine of the query's and the document's vectors; HasDense is false when unknown (no
	// encoder, or the document has no vector).
	Dense    float64
	HasDense bool
	// Seen is the document's seen flag; set by the lean searches (SearchLean, Dense), which also leave
	// Title and Summary empty until Sources fills them.
	Seen bool
}

// SearchNew returns the top k documents by BM25 among those the deployed model was not trained on
// (seen=false), best first. See the package doc for the query.
func (a *Adapter) SearchNew(ctx context.Context, query string, k int) ([]Hit, error) {
	hits, err := a.search(ctx, query, k, true)
	if err != nil {
		return nil, fmt.Errorf("search new %q: %w", a.index, err)
	}
	return hits, nil
}

// SearchAll returns the top k documents by BM25 over the whole index, best first.
func (a *Adapter) SearchAll(ctx context.Context, query string, k int) ([]Hit, error) {
	hits, err := a.search(ctx, query, k, false)
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", a.index, err)
	}
	return hits, nil
}

// leanHit is a hit of a lean search: its doc values (Fields.leanFields) instead of _source, what the first
// stage ranks and filters by without Elasticsearch loading and filtering each document's stored text.
type leanHit struct {
	ID     string                     `json:"_id"`
	Score  *float64                   `json:"_score"`
	Fields map[string]json.RawMessage `json:"fields"`
}

func (a *Adapter) leanHit(h leanHit, rank int) Hit {
	out := Hit{ID: h.ID, Rank: rank}
	out.DocID, out.Seen = a.f.readLean(h.ID, h.Fields)
	if h.Score != nil {
		out.Score = *h.Score
	}
	return out
}

// sourceHit is a hit or a multi-get document with its _source (Fields.sourceFields).
type sourceHit struct {
	ID     string          `json:"_id"`
	Found  bool            `json:"found"`
	Score  *float64        `json:"_score"`
	Source json.RawMessage `json:"_source"`
}

func (a *Adapter) sourceHit(h sourceHit) Hit {
	out := Hit{ID: h.ID}
	out.DocID, out.Title, out.Summary = a.f.read(h.ID, h.Source)
	return out
}

// SearchLean is SearchAll (onlyNew false) or SearchNew without the stored documents: each hit has ID,
// DocID, Seen and its BM25 score and rank, read from doc values. The first stage ranks many more
// documents than it returns, and fetching every hit's _source would make Elasticsearch parse each stored
// text; Sources then reads title and summary of the few it returns.
func (a *Adapter) SearchLean(ctx context.Context, query string, k int, onlyNew bool) ([]Hit, error) {
	if strings.TrimSpace(query) == "" {
		return nil, fmt.Errorf("search %q: %w: empty query", a.index, ErrInvalidArgument)
	}
	if k < 1 || k > MaxK {
		return nil, fmt.Errorf("search %q: %w: k=%d, want 1..%d", a.index, ErrInvalidArgument, k, MaxK)
	}
	body := a.searchBody(query, k, onlyNew)
	body["_source"], body["docvalue_fields"] = false, a.f.leanFields()
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	var res struct {
		Hits struct {
			Hits []leanHit `json:"hits"`
		} `json:"hits"`
	}
	req := whole(esapi.SearchRequest{Index: []string{a.index}, Body: bytes.NewReader(b), Preference: preference([]byte(query))})
	if err := a.do(ctx, req, &res); err != nil {
		return nil, fmt.Errorf("search %q: %w", a.index, err)
	}
	hits := make([]Hit, len(res.Hits.Hits))
	for i, h := range res.Hits.Hits {
		hits[i] = a.leanHit(h, i+1)
		hits[i].BM25, hits[i].BM25Rank = hits[i].Score, i+1
	}
	return hits, nil
}

// Sources fills in the title and summary (and docid, when empty) of hits from their stored documents,
// by _id, in one multi-get. A hit whose document is gone keeps what it had.
func (a *Adapter) Sources(ctx context.Context, hits []Hit) error {
	if len(hits) == 0 {
		return nil
	}
	ids := make([]string, 0, len(hits))
	seen := make(map[string]bool, len(hits))
	for _, h := range hits {
		if h.ID != "" && !seen[h.ID] {
			seen[h.ID] = true
			ids = append(ids, h.ID)
		}
	}
	body, err := json.Marshal(map[string]any{"ids": ids})
	if err != nil {
		return err
	}
	var res struct {
		Docs []sourceHit `json:"docs"`
	}
	if err := a.do(ctx, esapi.MgetRequest{Index: a.index, Body: bytes.NewReader(body), SourceIncludes: a.f.sourceFields()}, &res); err != nil {
		return fmt.Errorf("read sources %q: %w", a.index, err)
	}
	byID := make(map[string]Hit, len(res.Docs))
	for _, d := range res.Docs {
		if d.Found {
			byID[d.ID] = a.sourceHit(d)
		}
	}
	for i := range hits {
		if src, ok := byID[hits[i].ID]; ok {
			hits[i].Title, hits[i].Summary = src.Title, src.Summary
			if hits[i].DocID == "" {
				hits[i].DocID = src.DocID
			}
		}
	}
	return nil
}

// searchBody is the one BM25 query: best_fields multi_match with tie_breaker 0.5 over Fields.Search (by
// default title and text: the BEIR baseline's query), optionally filtered to the
// documents not marked seen. The filter does not change scores. Total hit counting is off: callers only
// need the top k.
func (a *Adapter) searchBody(query string, k int, onlyNew bool) map[string]any {
	match := map[string]any{"multi_match": map[string]any{
		"query":       query,
		"type":        "best_fields",
		"fields":      a.f.Search,
		"tie_breaker": 0.5,
	}}
	q := match
	if onlyNew {
		q = map[string]any{"bool": map[string]any{
			"must":   match,
			"filter": []any{a.f.notSeen()},
		}}
	}
	return map[string]any{
		"size":             k,
		"query":            q,
		"_source":          a.f.sourceFields(),
		"track_total_hits": false,
	}
}

func (a *Adapter) search(ctx context.Context, query string, k int, onlyNew bool) ([]Hit, error) {
	if strings.TrimSpace(query) == "" {
		return nil, fmt.Errorf("%w: empty query", ErrInvalidArgument)
	}
	if k < 1 || k > MaxK {
		return nil, fmt.Errorf("%w: k=%d, want 1..%d", ErrInvalidArgument, k, MaxK)
	}
	body, err := json.Marshal(a.searchBody(query, k, onlyNew))
	if err != nil {
		return nil, err
	}
	var res struct {
		Took int `json:"took"`
		Hits struct {
			Hits []sourceHit `json:"hits"`
		} `json:"hits"`
	}
	req := whole(esapi.SearchRequest{Index: []string{a.index}, Body: bytes.NewReader(body), Preference: preference([]byte(query))})
	if err := a.do(ctx, req, &res); err != nil {
		return nil, err
	}
	hits := make([]Hit, len(res.Hits.Hits))
	for i, h := range res.Hits.Hits {
		hits[i] = a.sourceHit(h)
		hits[i].Rank, hits[i].BM25Rank = i+1, i+1
		if h.Score != nil {
			hits[i].Score, hits[i].BM25 = *h.Score, *h.Score
		}
	}
	a.log.Debug("search", "index", a.index, "only_new", onlyNew, "query", query, "k", k, "hits", len(hits), "took_ms", res.Took)
	return hits, nil
}

// whole asks Elasticsearch to fail a search that some of the index's shards could not answer (no copy of a
// shard reachable: a node lost with no replica, a red index behind an alias), instead of its default, an
// answer from the other shards flagged only in _shards.failed. A ranking built from part of the index would
// look like any other; a failed search is retried, and then answered as unavailable (503, Retry-After).
func whole(req esapi.SearchRequest) esapi.SearchRequest {
	no := false
	req.AllowPartialSearchResults = &no
	return req
}

// preference names the shard copies that answer a ranking search: the same string for the same query, so that
// Elasticsearch sends a query to the same copy of each shard every time (while the shard's copies stay where
// they are). Two copies of a shard can score the same document differently: each merges on its own, and until a
// copy merges away its deleted documents they still count in its BM25 statistics (and its kNN graph is its own).
// Without it a repeated query could be answered by other copies, and its order change from one request to
// the next. A hash of the query (its text, or its vector for a kNN search), not one fixed string, so that
// different queries still spread over the copies.
func preference(key []byte) string {
	h := fnv.New64a()
	_, _ = h.Write(key)
	return "icicle-" + strconv.FormatUint(h.Sum64(), 36)
}

// Resolve looks documents up by docid in one request (a multi-get on their derived _ids) and returns the
// ones that exist, keyed by docid. Unknown docids are simply absent from the map; duplicates are fetched once.
func (a *Adapter) Resolve(ctx context.Context, docids []string) (map[string]Hit, error) {
	out := make(map[string]Hit, len(docids))
	if len(docids) == 0 {
		return out, nil
	}
	hits, err := a.byDocID(ctx, docids, a.f.sourceFields())
	if err != nil {
		return nil, fmt.Errorf("resolve %q: %w", a.index, err)
	}
	for _, h := range hits {
		out[h.DocID] = h
	}
	return out, nil
}

// mgetDoc is one document of a multi-get answer, its _source read as S.
type mgetDoc[S any] struct {
	ID          string          `json:"_id"`
	Found       bool            `json:"found"`
	SeqNo       int64           `json:"_seq_no"`
	PrimaryTerm int64           `json:"_primary_term"`
	Source      S               `json:"_source"`
	Error       json.RawMessage `json:"error"`
}

// mgetByDocID multi-gets the documents of docids (each once) from the adapter's index, with the _source
// fields given. A per-document error (a missing index behind an alias, a failed shard) fails the whole
// read as a *ResponseError: "not found" must mean "not in the corpus", never "could not tell".
func mgetByDocID[S any](ctx context.Context, a *Adapter, docids, fields []string) ([]mgetDoc[S], error) {
	ids := make([]string, 0, len(docids))
	seen := make(map[string]bool, len(docids))
	for _, d := range docids {
		if !seen[d] {
			seen[d] = true
			ids = append(ids, a.idOf(d))
		}
	}
	body, err := json.Marshal(map[string]any{"ids": ids})
	if err != nil {
		return nil, err
	}
	var res struct {
		Docs []mgetDoc[S] `json:"docs"`
	}
	if err := a.do(ctx, esapi.MgetRequest{Index: a.index, Body: bytes.NewReader(body), SourceIncludes: fields}, &res); err != nil {
		return nil, err
	}
	for _, d := range res.Docs {
		if len(d.Error) > 0 {
			var e ResponseError
			_ = json.Unmarshal(d.Error, &struct {
				Type   *string `json:"type"`
				Reason *string `json:"reason"`
			}{&e.Type, &e.Reason})
			e.Status = 500
			if e.Type == "index_not_found_exception" {
				e.Status = 404
			}
			return nil, &e
		}
	}
	return res.Docs, nil
}

// SeenCount returns how many documents are marked seen=true (D_train for the deployed model).
func (a *Adapter) SeenCount(ctx context.Context) (int, error) {
	body, _ := json.Marshal(map[string]any{"query": map[string]any{"term": map[string]any{a.f.Seen: true}}})
	var res struct {
		Count int `json:"count"`
	}
	if err := a.do(ctx, esapi.CountRequest{Index: []string{a.index}, Body: bytes.NewReader(body)}, &res); err != nil {
		return 0, fmt.Errorf("count seen %q: %w", a.index, err)
	}
	return res.Count, nil
}

// byDocID finds the documents of docids with the _source fields given, each once: a multi-get of their
// derived _ids in the sidecar's layout (DocumentID), of the docids themselves when the docid is the _id,
// else a terms query on the docid field. Unknown docids are absent.
func (a *Adapter) byDocID(ctx context.Context, docids, fields []string) ([]Hit, error) {
	if !a.team || a.f.DocID == IDField {
		docs, err := mgetByDocID[json.RawMessage](ctx, a, docids, fields)
		if err != nil {
			return nil, err
		}
		var out []Hit
		for _, d := range docs {
			if d.Found {
				out = append(out, a.sourceHit(sourceHit{ID: d.ID, Found: true, Source: d.Source}))
			}
		}
		return out, nil
	}
	uniq := slices.Compact(slices.Sorted(slices.Values(docids)))
	body, err := json.Marshal(map[string]any{"size": len(uniq), "_source": fields, "track_total_hits": false,
		"query": map[string]any{"terms": map[string]any{a.f.DocID: uniq}}})
	if err != nil {
		return nil, err
	}
	var res struct {
		Hits struct {
			Hits []sourceHit `json:"hits"`
		} `json:"hits"`
	}
	if err := a.do(ctx, whole(esapi.SearchRequest{Index: []string{a.index}, Body: bytes.NewReader(body)}), &res); err != nil {
		return nil, err
	}
	out := make([]Hit, 0, len(res.Hits.Hits))
	for _, h := range res.Hits.Hits {
		out = append(out, a.sourceHit(h))
	}
	return out, nil
}

// idOf is the _id of docid's document where it derives from the docid: DocumentID in the sidecar's layout,
// the docid itself when the docid is the _id. (A team's index with a docid field is read by byDocID.)
func (a *Adapter) idOf(docid string) string {
	if a.f.DocID == IDField {
		return docid
	}
	return DocumentID(docid)
}
