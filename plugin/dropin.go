package plugin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/rank"
)

// ModePassthrough is the drop-in's answer when it did not rerank: Elasticsearch's response unchanged, hits
// in Elasticsearch's order, with DropinInfo.Reason saying why.
const ModePassthrough Mode = "passthrough"

// Passthrough reasons of the drop-in (DropinInfo.Reason with ModePassthrough), in the order they are
// checked. docs/api.md explains each.
const (
	// ReasonScroll: the request opens a scroll (scroll parameter); its later pages must follow the same order.
	ReasonScroll = "scroll"
	// ReasonPaginated: from > 0 or search_after; a page reranked on its own would repeat or skip documents.
	ReasonPaginated = "paginated"
	// ReasonSorted: a sort other than _score descending; the caller asked for that order.
	ReasonSorted = "sorted"
	// ReasonAggregationsOnly: size 0 with aggregations; there are no hits to rerank.
	ReasonAggregationsOnly = "aggregations_only"
	// ReasonSizeZero: size 0 without aggregations (a count, suggestions).
	ReasonSizeZero = "size_zero"
	// ReasonNoQueryText: neither ext.icicle.query nor a single match, match_phrase or multi_match query.
	ReasonNoQueryText = "no_query_text"
	// ReasonQueryTooLong: the query text has more characters than the server accepts (server.max_query_chars).
	ReasonQueryTooLong = "query_too_long"
	// ReasonHitsWithoutTitle: the response has no hits.hits, or a hit has no _source.title (source filtering,
	// filter_path, an index of another layout); the title is the docid the model ranks.
	ReasonHitsWithoutTitle = "hits_without_title"
)

// DropinInfo is the "icicle" object the drop-in adds to Elasticsearch's search response.
type DropinInfo struct {
	RequestID string `json:"request_id"`
	// Mode is first_stage, gated, reranked, fused, first_stage_fallback or passthrough.
	Mode Mode `json:"mode"`
	// Reason says why Mode is first_stage_fallback (as Response.FallbackReason) or passthrough (Reason*
	// constants).
	Reason string `json:"reason,omitempty"`
	// ModelSkipped says why the model was not run although nothing failed (as Response.ModelSkipped).
	ModelSkipped string `json:"model_skipped,omitempty"`
	// QueryFrom names where the query text was found: "ext.icicle.query" or the query's JSON path, such as
	// "query.bool.must.match.title". Empty when none was.
	QueryFrom string `json:"query_from,omitempty"`
	// HitsReceived is the number of hits in Elasticsearch's response (hits.hits).
	HitsReceived int `json:"hits_received"`
	// CandidatesInContext is how many of them were in the model's prompt.
	CandidatesInContext int  `json:"candidates_in_context"`
	CandidatesTruncated bool `json:"candidates_truncated,omitempty"`
	TitleOnlyCandidates int  `json:"title_only_candidates,omitempty"`
	Snippets            int  `json:"snippets,omitempty"`
	// RouterProb is p([COPY]) at the first decoding step; absent when the model did not run.
	RouterProb *float64 `json:"router_prob,omitempty"`
	// Rerouted: experimental.route_by_first_stage put the model's other route's answer first.
	Rerouted bool `json:"rerouted,omitempty"`
	// Unresolved counts parametric docids that were not found in the index and so are not among the hits.
	Unresolved int `json:"unresolved,omitempty"`
	// RankWindowSize is how many of Elasticsearch's top hits were reranked (once) to cut this page from;
	// absent when the answer was passed through unchanged.
	RankWindowSize int     `json:"rank_window_size,omitempty"`
	Timings        Timings `json:"timings"`
	Model          string  `json:"model,omitempty"`
}

// DropinHit is the "_icicle" object the drop-in adds to each hit it placed.
type DropinHit struct {
	// Provenance is copy (a context hit the model copied), parametric (a seen-corpus document the model
	// generated; the hit was inserted, with _score null) or bm25 (placed by its Elasticsearch rank).
	Provenance Provenance `json:"provenance"`
	// Score is the model's log-probability (copy, parametric), the fusion score (mode fused) or the
	// Elasticsearch score (bm25).
	Score float64 `json:"score"`
	// BM25Rank is the 1-based position in Elasticsearch's hits, absent for an inserted parametric document.
	BM25Rank *int `json:"bm25_rank,omitempty"`
}

// dropinPlan is what the request asks of the drop-in, decided before Elasticsearch is called.
type dropinPlan struct {
	query  string     // the query text to rank with; empty when reason is set
	from   string     // where query came from
	reason string     // a passthrough reason, or empty to rerank
	body   []byte     // the body to forward: the request's, without ext.icicle
	params url.Values // the query string to forward
	// The page and the rank window, when reranking: Elasticsearch is asked for the top fetch hits (from 0),
	// the first window of them are reranked once, and the page is hits [pageFrom, pageFrom+pageSize) of the
	// result, so that consecutive pages cut the same ranking.
	pageFrom, pageSize, window, fetch int
}

// DefaultRankWindowSize is the rank window when neither the request (ext.icicle.rank_window_size) nor
// Options.RankWindowSize sets one: Elasticsearch's default for text_similarity_reranker.
const DefaultRankWindowSize = 10

// dropin serves GET and POST /{index}/_search.
func (s *Server) dropin(c *gin.Context) { s.dropinSearch(c, c.Param("index")) }

// dropinSearch serves Elasticsearch's search API: the body and query string go to the cluster unchanged
// (less ext.icicle, and with from/size widened to the rank window when reranking), and a successful answer
// comes back in Elasticsearch's shape with the rank window reranked by the same path as /v1/rerank, the
// page cut from it and an "icicle" object added, or passed through with mode passthrough and a reason.
// Elasticsearch's error statuses pass through with its body; the sidecar's own errors have its shape.
// index is the path's index expression, "" for an index-less /_search, which searches the configured
// index (or, with a point in time, the PIT's indices).
func (s *Server) dropinSearch(c *gin.Context, index string) {
	start := time.Now()
	if index != "" {
		if err := s.checkIndex("indices:data/read/search", index); err != nil {
			s.failES(c, "dropin", err)
			return
		}
	}
	body, err := s.readBody(c)
	if err != nil {
		s.failES(c, "dropin", err)
		return
	}
	// The body is planned (and forwarded) re-encoded, which would keep the last of two equal keys where
	// Elasticsearch refuses the body: refuse it as Elasticsearch does, at the place in the caller's body.
	if err := checkDuplicateKeys(body); err != nil {
		s.failES(c, "dropin", err)
		return
	}
	if err := s.checkScripts(body); err != nil {
		s.failES(c, "dropin", err)
		return
	}
	plan, err := planDropin(c.Request.URL.Query(), body, s.opts.MaxQueryChars, cmp.Or(s.opts.RankWindowSize, DefaultRankWindowSize))
	if err != nil {
		s.failES(c, "dropin", err)
		return
	}
	path := []string{index, "_search"}
	switch {
	case index != "":
	case hasPIT(body):
		path = []string{"_search"} // a point in time names its indices; Elasticsearch refuses a path index
	default:
		index, path = s.es.Index(), []string{s.es.Index(), "_search"}
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.opts.RequestTimeout)
	defer cancel()
	// Reranking keeps the answer's reserve at the end, as /v1/search does; a passthrough is all
	// Elasticsearch's.
	esDeadline, _ := ctx.Deadline()
	if plan.reason == "" {
		esDeadline = s.pipe.WorkDeadline(ctx)
	}
	esCtx, esCancel := context.WithDeadline(ctx, esDeadline)
	esStart := time.Now()
	res, err := s.es.Raw(esCtx, adapter.RawRequest{Method: http.MethodPost, Path: path, Query: plan.params, Header: c.Request.Header, Body: plan.body})
	esCancel()
	esDur := time.Since(esStart)
	s.pipe.Metrics().ObserveStage("es", esDur.Seconds())
	if err != nil {
		s.failES(c, "dropin", s.upstream(c, index, err))
		return
	}
	status, hdr, esBody := res.Status, res.Header, res.Body
	copyHeaders(c, hdr, false)
	var top map[string]json.RawMessage
	if status/100 != 2 || json.Unmarshal(esBody, &top) != nil || top == nil {
		// Elasticsearch's error, or an answer that is not a JSON object (format=yaml): as it is.
		mode := string(ModePassthrough)
		if status/100 != 2 {
			mode = "es_error"
		}
		s.finish(c, start, index, status, mode, "")
		c.Data(status, cmp.Or(hdr.Get("Content-Type"), "application/json"), esBody)
		return
	}

	info := DropinInfo{Mode: ModePassthrough, Reason: plan.reason, QueryFrom: plan.from, Model: s.modelInfo().Name}
	info.Timings.ES = ms(esDur)
	hitsObj, raw, ok := esHits(top)
	info.HitsReceived = len(raw)
	if plan.reason == "" && !ok {
		info.Reason = ReasonHitsWithoutTitle
	}
	if plan.fetch > 0 && ok {
		window := raw[:min(plan.window, len(raw))]
		placed := make([]json.RawMessage, 0, len(raw))
		if info.Reason == "" {
			hits, err := s.windowHits(ctx, window, sourceFiltered(plan))
			if err != nil {
				info.Reason = ReasonHitsWithoutTitle
			} else {
				resp, err := s.pipe.Run(ctx, rank.Request{Query: plan.query, Size: min(len(hits), 100), Hits: hits, Searched: esDur})
				if err != nil {
					s.failES(c, "dropin", err)
					return
				}
				recalled := s.recall(ctx, c, plan, body, resp.Results, raw)
				var unresolved int
				placed, unresolved = placeHits(resp.Results, raw, recalled, plan.fetch)
				info.Mode, info.Reason, info.Timings = resp.Mode, resp.FallbackReason, resp.Timings
				info.ModelSkipped = resp.ModelSkipped
				info.CandidatesInContext, info.CandidatesTruncated = resp.CandidatesInContext, resp.CandidatesTruncated
				info.TitleOnlyCandidates, info.RouterProb, info.Rerouted, info.Unresolved = resp.TitleOnlyCandidates, resp.RouterProb, resp.Rerouted, unresolved
				info.Snippets = resp.Snippets
			}
		}
		if info.Reason != "" && info.Mode == ModePassthrough {
			placed = raw // no ranking: Elasticsearch's order, still cut into the page asked for
		}
		page := placed[min(plan.pageFrom, len(placed)):min(plan.pageFrom+plan.pageSize, len(placed))]
		hitsObj["hits"] = mustJSON(page)
		top["hits"] = mustJSON(hitsObj)
		info.RankWindowSize = plan.window
	}
	info.RequestID = requestID(c)
	total := time.Since(start)
	info.Timings.Total = ms(total)
	var esTook int64
	if json.Unmarshal(top["took"], &esTook) == nil && top["took"] != nil {
		// took is the whole request as the sidecar served it, Elasticsearch's part included.
		top["took"] = mustJSON(max(esTook, int64(math.Ceil(float64(total.Microseconds())/1000))))
	}
	top["icicle"] = mustJSON(info)
	s.finish(c, start, index, status, string(info.Mode), info.Reason)
	c.Data(status, jsonContentType(hdr), mustJSON(top))
}

// finish records the request's metrics and log line.
func (s *Server) finish(c *gin.Context, start time.Time, index string, status int, mode, reason string) {
	s.metrics.requests.WithLabelValues("dropin", strconv.Itoa(status), mode).Inc()
	s.metrics.duration.WithLabelValues("dropin").Observe(time.Since(start).Seconds())
	s.log.Info("dropin", "request_id", requestID(c), "index", index, "status", status, "mode", mode, "reason", reason,
		"took_ms", ms(time.Since(start)))
}

// jsonContentType is Elasticsearch's JSON media type of the answer (the vendor type when the client asked
// for it), or application/json.
func jsonContentType(h http.Header) string {
	if ct := h.Get("Content-Type"); strings.Contains(ct, "json") {
		return ct
	}
	return "application/json; charset=utf-8"
}

// hasPIT reports whether a search body searches a point in time.
func hasPIT(body []byte) bool {
	var req struct {
		PIT json.RawMessage `json:"pit"`
	}
	return json.Unmarshal(body, &req) == nil && req.PIT != nil
}

// failES records and writes the sidecar's own error in Elasticsearch's shape (writeESError).
func (s *Server) failES(c *gin.Context, endpoint string, err error) {
	writeESError(c, s.log, err)
	s.metrics.requests.WithLabelValues(endpoint, strconv.Itoa(c.Writer.Status()), "error").Inc()
}

// titleFields are what the model reads of a hit (Options.Fields).
func (s *Server) titleFields() []string {
	f := s.opts.Fields
	if f.DocID == adapter.IDField {
		return []string{f.Title, f.Summary}
	}
	return []string{f.DocID, f.Title, f.Summary}
}

// sourceFiltered reports whether the request shapes _source (source filtering, stored_fields,
// filter_path), so that its hits may lack the docid, title or summary the model reads.
func sourceFiltered(p dropinPlan) bool {
	for _, k := range []string{"_source", "_source_includes", "_source_excludes", "stored_fields", "filter_path"} {
		if p.params.Has(k) {
			return true
		}
	}
	var req map[string]json.RawMessage
	_ = json.Unmarshal(p.body, &req)
	src := strings.TrimSpace(string(req["_source"]))
	return req["stored_fields"] != nil || (src != "" && src != "true")
}

// windowHits reads the rank window's hits as /v1/rerank reads its request's. When the request shaped
// _source (filtered), or a hit has no title, the window's docids, titles and summaries are read in one
// _mget by _index and _id, so that the model ranks the same candidates whatever the filter; the hits the
// caller gets keep the caller's filter.
func (s *Server) windowHits(ctx context.Context, window []json.RawMessage, filtered bool) ([]adapter.Hit, error) {
	if !filtered {
		if hits, err := s.hitsFromRaw(window); err == nil {
			return hits, nil
		}
	}
	type ref struct {
		Index string `json:"_index"`
		ID    string `json:"_id"`
	}
	refs := make([]ref, len(window))
	scores := make([]*float64, len(window))
	for i, r := range window {
		var h struct {
			ref
			Score *float64 `json:"_score"`
		}
		if json.Unmarshal(r, &h) != nil || h.Index == "" || h.ID == "" {
			return nil, fmt.Errorf("hit %d has no _index and _id", i)
		}
		refs[i], scores[i] = h.ref, h.Score
	}
	res, err := s.es.Raw(ctx, adapter.RawRequest{Method: http.MethodPost, Path: []string{"_mget"},
		Query: url.Values{"_source": {strings.Join(s.titleFields(), ",")}}, Body: mustJSON(map[string]any{"docs": refs})})
	if err != nil || res.Status != http.StatusOK {
		return nil, fmt.Errorf("read the window's titles: status %d: %v", res.Status, err)
	}
	var got struct {
		Docs []struct {
			Found  bool            `json:"found"`
			Source json.RawMessage `json:"_source"`
		} `json:"docs"`
	}
	if err := json.Unmarshal(res.Body, &got); err != nil || len(got.Docs) != len(refs) {
		return nil, fmt.Errorf("read the window's titles: %d of %d documents: %v", len(got.Docs), len(refs), err)
	}
	es := make([]ESHit, len(refs))
	for i, d := range got.Docs {
		es[i] = ESHit{ID: refs[i].ID, Index: refs[i].Index, Score: scores[i], Source: d.Source}
	}
	return s.hitsFromES(es)
}

// recallBodyKeys and recallParams are the parts of a search that shape a hit (source filtering, fields,
// versions): recalled documents are fetched with the request's own, so they look as its hits do.
var (
	recallBodyKeys = []string{"_source", "fields", "docvalue_fields", "stored_fields", "script_fields", "runtime_mappings", "version", "seq_no_primary_term"}
	recallParams   = []string{"_source", "_source_includes", "_source_excludes", "stored_fields", "docvalue_fields", "version", "seq_no_primary_term"}
)

// recall fetches the parametric documents the ranking placed that are not among Elasticsearch's hits, by
// _id from the configured index, with the request's source filter and fields; each comes back as
// Elasticsearch would return it, with _score null. A failed fetch leaves them out (counted unresolved).
func (s *Server) recall(ctx context.Context, c *gin.Context, plan dropinPlan, body []byte, results []Result, raw []json.RawMessage) map[string]json.RawMessage {
	inRaw := make(map[string]bool, len(raw))
	for _, r := range raw {
		var h struct {
			ID string `json:"_id"`
		}
		_ = json.Unmarshal(r, &h)
		inRaw[h.ID] = true
	}
	var ids []string
	for _, r := range results {
		if r.BM25Rank == nil && r.Resolved && r.ID != "" && !inRaw[r.ID] {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	var req map[string]json.RawMessage
	_ = json.Unmarshal(body, &req) // a JSON object: the plan reranks only those
	q := map[string]any{"query": map[string]any{"ids": map[string]any{"values": ids}}, "size": len(ids), "track_total_hits": false}
	for _, k := range recallBodyKeys {
		if req[k] != nil {
			q[k] = req[k]
		}
	}
	params := url.Values{}
	for _, k := range recallParams {
		if v, ok := plan.params[k]; ok {
			params[k] = v
		}
	}
	res, err := s.es.Raw(ctx, adapter.RawRequest{Method: http.MethodPost, Path: []string{s.es.Index(), "_search"}, Query: params,
		Header: c.Request.Header, Body: mustJSON(q)})
	if err != nil || res.Status != http.StatusOK {
		s.log.Warn("recall parametric documents", "ids", len(ids), "status", res.Status, "err", err)
		return nil
	}
	var top map[string]json.RawMessage
	_ = json.Unmarshal(res.Body, &top)
	_, hits, _ := esHits(top)
	out := make(map[string]json.RawMessage, len(hits))
	for _, h := range hits {
		var m map[string]json.RawMessage
		if json.Unmarshal(h, &m) != nil {
			continue
		}
		var id string
		_ = json.Unmarshal(m["_id"], &id)
		m["_score"] = json.RawMessage("null")
		out[id] = mustJSON(m)
	}
	return out
}

// planDropin decides from the request alone whether to rerank, with which query text and over which
// rank window. Only a malformed ext.icicle section (or a rank window smaller than the page) is an error
// (an *InputError); anything else Elasticsearch may judge is forwarded.
func planDropin(params url.Values, body []byte, maxQueryChars, defaultWindow int) (dropinPlan, error) {
	p := dropinPlan{body: body, params: params}
	var req map[string]json.RawMessage
	if len(bytes.TrimSpace(body)) > 0 && json.Unmarshal(body, &req) != nil {
		req = nil // not a JSON object: Elasticsearch will say what is wrong
	}
	ext, stripped, err := takeExtIcicle(req)
	if err != nil {
		return p, err
	}
	if stripped {
		// Elasticsearch rejects an ext section no plugin registered (x_content_parse_exception), so ours
		// never reaches it; the rest of the body is re-encoded as it was parsed.
		p.body = mustJSON(req)
	}
	// The query string's from and size win over the body's, as in Elasticsearch.
	from, fromOK := paging(params.Get("from"), req["from"], 0)
	size, sizeOK := paging(params.Get("size"), req["size"], 10)
	switch {
	case params.Has("scroll"):
		p.reason = ReasonScroll
	case req["search_after"] != nil || !fromOK || !sizeOK:
		p.reason = ReasonPaginated
	case !scoreSort(params["sort"], req["sort"]):
		p.reason = ReasonSorted
	case size == 0:
		p.reason = ReasonSizeZero
		if req["aggs"] != nil || req["aggregations"] != nil {
			p.reason = ReasonAggregationsOnly
		}
	case ext.query != "":
		p.query, p.from = ext.query, "ext.icicle.query"
	default:
		p.query, p.from = queryText(req["query"], "query")
		if strings.TrimSpace(p.query) == "" {
			p.query, p.from, p.reason = "", "", ReasonNoQueryText
		}
	}
	if p.reason == "" && utf8.RuneCountInString(p.query) > maxQueryChars {
		p.query, p.reason = "", ReasonQueryTooLong
	}
	if p.reason != "" {
		return p, nil
	}
	// The rank window: the request's, else the configured one widened to the page size (never to from,
	// so that every page of a query ranks the same window).
	p.window = max(defaultWindow, size)
	if ext.window > 0 {
		if ext.window < size {
			return p, &InputError{Field: "ext.icicle.rank_window_size", Problem: fmt.Sprintf("%d is smaller than size %d", ext.window, size)}
		}
		p.window = ext.window
	}
	p.pageFrom, p.pageSize, p.fetch = from, size, max(p.window, from+size)
	req["from"], req["size"] = json.RawMessage("0"), mustJSON(p.fetch)
	p.body = mustJSON(req)
	p.params = url.Values{}
	for k, v := range params {
		if k != "from" && k != "size" {
			p.params[k] = v
		}
	}
	return p, nil
}

// paging reads from or size: the query parameter when given, else the body's value, else def. ok is false
// for a value that is not a non-negative integer (Elasticsearch will say what is wrong).
func paging(param string, body json.RawMessage, def int) (int, bool) {
	v := strings.TrimSpace(param)
	if v == "" {
		v = strings.TrimSpace(string(body))
	}
	if v == "" || v == "null" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	return n, err == nil && n >= 0
}

// extIcicle is the request's ext.icicle section.
type extIcicle struct {
	query  string
	window int
}

// takeExtIcicle removes ext.icicle from req (and ext, when nothing else is left in it) and returns it.
// ext.icicle is {"query": "text", "rank_window_size": n}, either optional but not both; an unknown key or
// a wrong type is an *InputError.
func takeExtIcicle(req map[string]json.RawMessage) (extIcicle, bool, error) {
	var ext map[string]json.RawMessage
	if req["ext"] == nil || json.Unmarshal(req["ext"], &ext) != nil || ext["icicle"] == nil {
		return extIcicle{}, false, nil
	}
	var ic struct {
		Query          *string `json:"query"`
		RankWindowSize *int    `json:"rank_window_size"`
	}
	dec := json.NewDecoder(bytes.NewReader(ext["icicle"]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ic); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return extIcicle{}, false, &InputError{Field: "ext.icicle." + te.Field, Problem: fmt.Sprintf("must be %s, got JSON %s", te.Type, te.Value)}
		}
		return extIcicle{}, false, &InputError{Field: "ext.icicle", Problem: `must be {"query": "text", "rank_window_size": n}: ` + err.Error()}
	}
	var out extIcicle
	switch {
	case ic.Query != nil && strings.TrimSpace(*ic.Query) == "", ic.Query == nil && ic.RankWindowSize == nil:
		return extIcicle{}, false, &InputError{Field: "ext.icicle.query", Problem: "required"}
	case ic.Query != nil:
		out.query = *ic.Query
	}
	if ic.RankWindowSize != nil {
		if *ic.RankWindowSize < 1 || *ic.RankWindowSize > adapter.MaxK {
			return extIcicle{}, false, &InputError{Field: "ext.icicle.rank_window_size", Problem: fmt.Sprintf("%d outside 1..%d", *ic.RankWindowSize, adapter.MaxK)}
		}
		out.window = *ic.RankWindowSize
	}
	delete(ext, "icicle")
	if len(ext) == 0 {
		delete(req, "ext")
	} else {
		req["ext"] = mustJSON(ext)
	}
	return out, true, nil
}

// queryText finds the text of a single full-text query: match or match_phrase on one field (string or
// {"query": string}), multi_match with a string query, or a bool whose only scoring clause is one such
// must clause (filter and must_not are allowed; should is not). path is raw's JSON path; the second result
// is the path of the text's query.
func queryText(raw json.RawMessage, path string) (string, string) {
	var q map[string]json.RawMessage
	if json.Unmarshal(raw, &q) != nil || len(q) != 1 {
		return "", ""
	}
	for kind, v := range q {
		switch kind {
		case "match", "match_phrase":
			var fields map[string]json.RawMessage
			if json.Unmarshal(v, &fields) != nil || len(fields) != 1 {
				return "", ""
			}
			for field, fv := range fields {
				var text string
				if json.Unmarshal(fv, &text) == nil {
					return text, path + "." + kind + "." + field
				}
				var opts struct {
					Query string `json:"query"`
				}
				if json.Unmarshal(fv, &opts) == nil {
					return opts.Query, path + "." + kind + "." + field
				}
			}
		case "multi_match":
			var opts struct {
				Query string `json:"query"`
			}
			if json.Unmarshal(v, &opts) == nil {
				return opts.Query, path + ".multi_match"
			}
		case "bool":
			var b map[string]json.RawMessage
			if json.Unmarshal(v, &b) != nil {
				return "", ""
			}
			for k := range b {
				switch k {
				case "must", "filter", "must_not", "boost", "_name", "minimum_should_match":
				default: // should, or anything newer: the text is not one clause's
					return "", ""
				}
			}
			must := b["must"]
			var list []json.RawMessage
			if json.Unmarshal(must, &list) == nil {
				if len(list) != 1 {
					return "", ""
				}
				must = list[0]
			}
			return queryText(must, path+".bool.must")
		}
	}
	return "", ""
}

// scoreSort reports whether the sort (query parameter values, body field) is absent or by _score descending
// only, the order reranking replaces.
func scoreSort(param []string, body json.RawMessage) bool {
	for _, p := range param {
		for _, f := range strings.Split(p, ",") {
			if f != "_score" && f != "_score:desc" {
				return false
			}
		}
	}
	if body == nil {
		return true
	}
	var list []json.RawMessage
	if json.Unmarshal(body, &list) != nil {
		list = []json.RawMessage{body}
	}
	for _, item := range list {
		var name string
		if json.Unmarshal(item, &name) == nil {
			if name != "_score" {
				return false
			}
			continue
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(item, &obj) != nil || len(obj) != 1 || obj["_score"] == nil {
			return false
		}
		var order string
		var opts struct {
			Order string `json:"order"`
		}
		if json.Unmarshal(obj["_score"], &order) != nil && json.Unmarshal(obj["_score"], &opts) == nil {
			order = opts.Order
		}
		if order != "" && order != "desc" {
			return false
		}
	}
	return true
}

// positive reports whether s, a JSON value or query parameter, is a number greater than zero.
func positive(s string) bool {
	n, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	return err == nil && n > 0
}

// zero reports whether s, a JSON value or query parameter, is the number zero.
func zero(s string) bool {
	n, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	return err == nil && n == 0
}

// esHits returns the response's hits object and its hits.hits entries; ok is false when either is missing
// or malformed.
func esHits(top map[string]json.RawMessage) (hitsObj map[string]json.RawMessage, raw []json.RawMessage, ok bool) {
	if json.Unmarshal(top["hits"], &hitsObj) != nil || hitsObj == nil {
		return nil, nil, false
	}
	if json.Unmarshal(hitsObj["hits"], &raw) != nil || hitsObj["hits"] == nil {
		return hitsObj, nil, false
	}
	return hitsObj, raw, true
}

// hitsFromRaw reads the hits as /v1/rerank reads its request's.
func (s *Server) hitsFromRaw(raw []json.RawMessage) ([]adapter.Hit, error) {
	es := make([]ESHit, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &es[i]); err != nil {
			return nil, err
		}
	}
	return s.hitsFromES(es)
}

// placeHits turns the ranking into the ranked window: each result that was a hit is that hit as
// Elasticsearch returned it, with "_icicle" added; a parametric result that was not is its recalled hit
// (fetched with the request's source filter, _score null); unresolved parametric docids have no document
// to show and are counted. Hits the ranking did not place follow in Elasticsearch's order (provenance
// bm25), no document twice, until the list has limit hits (the number Elasticsearch was asked for: when
// it had fewer, every hit stays).
func placeHits(results []Result, raw []json.RawMessage, recalled map[string]json.RawMessage, limit int) ([]json.RawMessage, int) {
	ids := make([]string, len(raw))
	byID := make(map[string]int, len(raw))
	for j, r := range raw {
		var h struct {
			ID string `json:"_id"`
		}
		_ = json.Unmarshal(r, &h)
		ids[j] = h.ID
		if _, dup := byID[h.ID]; !dup {
			byID[h.ID] = j
		}
	}
	used := make([]bool, len(raw))
	placed := make(map[string]bool, len(raw))
	out := make([]json.RawMessage, 0, len(raw))
	unresolved := 0
	for _, r := range results {
		info := DropinHit{Provenance: r.Provenance, Score: r.Score, BM25Rank: r.BM25Rank}
		j, inRaw := byID[r.ID]
		switch {
		case r.BM25Rank != nil:
			j, inRaw = *r.BM25Rank-1, true
		case !r.Resolved:
			unresolved++
			continue
		}
		switch {
		case inRaw && j < len(raw):
			if used[j] || placed[ids[j]] {
				continue
			}
			used[j], placed[ids[j]] = true, true
			info.BM25Rank = ptr(j + 1)
			out = append(out, withField(raw[j], "_icicle", info))
		case recalled[r.ID] != nil && !placed[r.ID]:
			placed[r.ID] = true
			out = append(out, withField(recalled[r.ID], "_icicle", info))
		default:
			unresolved++
		}
	}
	for j := range raw {
		if len(out) >= limit {
			break
		}
		if used[j] || placed[ids[j]] {
			continue
		}
		placed[ids[j]] = true
		var h ESHit
		_ = json.Unmarshal(raw[j], &h)
		info := DropinHit{Provenance: FromBM25, BM25Rank: ptr(j + 1)}
		if h.Score != nil {
			info.Score = *h.Score
		}
		out = append(out, withField(raw[j], "_icicle", info))
	}
	return out, unresolved
}

// withField returns the JSON object obj with key set to v.
func withField(obj json.RawMessage, key string, v any) json.RawMessage {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(obj, &m) // an object: hitsFromRaw decoded it
	m[key] = mustJSON(v)
	return mustJSON(m)
}

// mustJSON encodes v, which is built of JSON values and plain types, without HTML escaping (Elasticsearch
// does not escape either).
func mustJSON(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("encode %T: %v", v, err)) // unreachable: values are already valid JSON
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
