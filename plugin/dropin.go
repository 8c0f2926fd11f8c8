package plugin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/icicle-search/sidecar/adapter"
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
	// Mode is reranked, fused, bm25, bm25_fallback or passthrough.
	Mode Mode `json:"mode"`
	// Reason says why Mode is bm25_fallback (as Response.FallbackReason) or passthrough (Reason* constants).
	Reason string `json:"reason,omitempty"`
	// QueryFrom names where the query text was found: "ext.icicle.query" or the query's JSON path, such as
	// "query.bool.must.match.title". Empty when none was.
	QueryFrom string `json:"query_from,omitempty"`
	// HitsReceived is the number of hits in Elasticsearch's response (hits.hits).
	HitsReceived int `json:"hits_received"`
	// CandidatesInContext is how many of them were in the model's prompt.
	CandidatesInContext int  `json:"candidates_in_context"`
	CandidatesTruncated bool `json:"candidates_truncated,omitempty"`
	TitleOnlyCandidates int  `json:"title_only_candidates,omitempty"`
	// RouterProb is p([COPY]) at the first decoding step; absent when the model did not run.
	RouterProb *float64 `json:"router_prob,omitempty"`
	// Unresolved counts parametric docids that were not found in the index and so are not among the hits.
	Unresolved int     `json:"unresolved,omitempty"`
	Timings    Timings `json:"timings"`
	Model      string  `json:"model,omitempty"`
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
	query  string // the query text to rank with; empty when reason is set
	from   string // where query came from
	reason string // a passthrough reason, or empty to rerank
	body   []byte // the body to forward: the request's, without ext.icicle
}

// dropin serves GET and POST /{index}/_search, Elasticsearch's search API: the body and query string go to
// the cluster unchanged (less ext.icicle), and a successful answer comes back in Elasticsearch's shape with
// hits.hits reranked by the same path as /v1/rerank and an "icicle" object added, or passed through with
// mode passthrough and a reason. Elasticsearch's error statuses pass through with its body.
func (s *Server) dropin(c *gin.Context) {
	start := time.Now()
	index := c.Param("index")
	body, err := s.readBody(c)
	if err != nil {
		s.fail(c, "dropin", err)
		return
	}
	params := c.Request.URL.Query()
	plan, err := planDropin(params, body, s.opts.MaxQueryChars)
	if err != nil {
		s.fail(c, "dropin", err)
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.opts.RequestTimeout)
	defer cancel()
	// Reranking leaves the model the rest of the budget, as /v1/search does; a passthrough is all
	// Elasticsearch's.
	esBudget := s.opts.RequestTimeout
	if plan.reason == "" && s.opts.ESBudgetFraction > 0 {
		esBudget = time.Duration(float64(esBudget) * s.opts.ESBudgetFraction)
	}
	esCtx, esCancel := context.WithTimeout(ctx, esBudget)
	esStart := time.Now()
	status, hdr, esBody, err := s.es.RawSearch(esCtx, index, params, plan.body)
	esCancel()
	esDur := time.Since(esStart)
	s.metrics.stage.WithLabelValues("es").Observe(esDur.Seconds())
	switch {
	case errors.Is(err, adapter.ErrInvalidArgument):
		s.fail(c, "dropin", &InputError{Field: "index", Problem: fmt.Sprintf("%q is not an index expression", index)})
		return
	case err != nil:
		if c.Request.Context().Err() != nil {
			err = c.Request.Context().Err()
		}
		s.fail(c, "dropin", fmt.Errorf("search %q: %w: %w", index, ErrUpstream, err))
		return
	}
	for _, k := range []string{"X-Elastic-Product", "Warning", "Retry-After"} {
		for _, v := range hdr.Values(k) {
			c.Writer.Header().Add(k, v)
		}
	}
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

	info := DropinInfo{Mode: ModePassthrough, Reason: plan.reason, QueryFrom: plan.from, Model: s.opts.Model.Name}
	info.Timings.ES = ms(esDur)
	hitsObj, raw, ok := esHits(top)
	info.HitsReceived = len(raw)
	if plan.reason == "" && !ok {
		info.Reason = ReasonHitsWithoutTitle
	}
	if info.Reason == "" {
		hits, err := hitsFromRaw(raw)
		if err != nil {
			info.Reason = ReasonHitsWithoutTitle
		} else {
			resp, err := s.rank(ctx, plan.query, hits, min(len(hits), 100), esDur)
			if err != nil {
				s.fail(c, "dropin", err)
				return
			}
			placed, unresolved := s.placeHits(resp.Results, raw)
			hitsObj["hits"] = mustJSON(placed)
			top["hits"] = mustJSON(hitsObj)
			info.Mode, info.Reason, info.Timings = resp.Mode, resp.FallbackReason, resp.Timings
			info.CandidatesInContext, info.CandidatesTruncated = resp.CandidatesInContext, resp.CandidatesTruncated
			info.TitleOnlyCandidates, info.RouterProb, info.Unresolved = resp.TitleOnlyCandidates, resp.RouterProb, unresolved
		}
	}
	info.RequestID = requestID(c)
	info.Timings.Total = ms(time.Since(start))
	top["icicle"] = mustJSON(info)
	s.finish(c, start, index, status, string(info.Mode), info.Reason)
	c.Data(status, "application/json; charset=utf-8", mustJSON(top))
}

// finish records the request's metrics and log line.
func (s *Server) finish(c *gin.Context, start time.Time, index string, status int, mode, reason string) {
	s.metrics.requests.WithLabelValues("dropin", strconv.Itoa(status), mode).Inc()
	s.metrics.duration.WithLabelValues("dropin").Observe(time.Since(start).Seconds())
	s.log.Info("dropin", "request_id", requestID(c), "index", index, "status", status, "mode", mode, "reason", reason,
		"took_ms", ms(time.Since(start)))
}

// planDropin decides from the request alone whether to rerank, and with which query text. Only a malformed
// ext.icicle section is an error (an *InputError); anything else Elasticsearch may judge is forwarded.
func planDropin(params url.Values, body []byte, maxQueryChars int) (dropinPlan, error) {
	p := dropinPlan{body: body}
	var req map[string]json.RawMessage
	if len(bytes.TrimSpace(body)) > 0 && json.Unmarshal(body, &req) != nil {
		req = nil // not a JSON object: Elasticsearch will say what is wrong
	}
	extQuery, stripped, err := takeExtIcicle(req)
	if err != nil {
		return p, err
	}
	if stripped {
		// Elasticsearch rejects an ext section no plugin registered (x_content_parse_exception), so ours
		// never reaches it; the rest of the body is re-encoded as it was parsed.
		p.body = mustJSON(req)
	}
	switch {
	case params.Has("scroll"):
		p.reason = ReasonScroll
	case positive(params.Get("from")) || positive(string(req["from"])) || req["search_after"] != nil:
		p.reason = ReasonPaginated
	case !scoreSort(params["sort"], req["sort"]):
		p.reason = ReasonSorted
	case zero(params.Get("size")) || zero(string(req["size"])):
		p.reason = ReasonSizeZero
		if req["aggs"] != nil || req["aggregations"] != nil {
			p.reason = ReasonAggregationsOnly
		}
	case extQuery != "":
		p.query, p.from = extQuery, "ext.icicle.query"
	default:
		p.query, p.from = queryText(req["query"], "query")
		if strings.TrimSpace(p.query) == "" {
			p.query, p.from, p.reason = "", "", ReasonNoQueryText
		}
	}
	if p.reason == "" && utf8.RuneCountInString(p.query) > maxQueryChars {
		p.query, p.reason = "", ReasonQueryTooLong
	}
	return p, nil
}

// takeExtIcicle removes ext.icicle from req (and ext, when nothing else is left in it) and returns its
// query. ext.icicle is {"query": "text"}; an unknown key or a non-string query is an *InputError.
func takeExtIcicle(req map[string]json.RawMessage) (query string, stripped bool, err error) {
	var ext map[string]json.RawMessage
	if req["ext"] == nil || json.Unmarshal(req["ext"], &ext) != nil || ext["icicle"] == nil {
		return "", false, nil
	}
	var ic struct {
		Query *string `json:"query"`
	}
	dec := json.NewDecoder(bytes.NewReader(ext["icicle"]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ic); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return "", false, &InputError{Field: "ext.icicle." + te.Field, Problem: fmt.Sprintf("must be %s, got JSON %s", te.Type, te.Value)}
		}
		return "", false, &InputError{Field: "ext.icicle", Problem: `must be {"query": "text"}: ` + err.Error()}
	}
	if ic.Query == nil || strings.TrimSpace(*ic.Query) == "" {
		return "", false, &InputError{Field: "ext.icicle.query", Problem: "required"}
	}
	delete(ext, "icicle")
	if len(ext) == 0 {
		delete(req, "ext")
	} else {
		req["ext"] = mustJSON(ext)
	}
	return *ic.Query, true, nil
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
func hitsFromRaw(raw []json.RawMessage) ([]adapter.Hit, error) {
	es := make([]ESHit, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &es[i]); err != nil {
			return nil, err
		}
	}
	return hitsFromES(es)
}

// placeHits turns the ranking into hits.hits: each result that was a hit is that hit as Elasticsearch
// returned it, with "_icicle" added; a parametric result that was not is inserted as a hit built from its
// stored document (_score null); unresolved parametric docids have no document to show and are counted.
// Hits the ranking did not place follow in Elasticsearch's order (provenance bm25) until the page has as
// many hits as Elasticsearch returned.
func (s *Server) placeHits(results []Result, raw []json.RawMessage) ([]json.RawMessage, int) {
	used := make([]bool, len(raw))
	out := make([]json.RawMessage, 0, max(len(raw), len(results)))
	unresolved := 0
	for _, r := range results {
		info := DropinHit{Provenance: r.Provenance, Score: r.Score, BM25Rank: r.BM25Rank}
		switch {
		case r.BM25Rank != nil:
			j := *r.BM25Rank - 1
			if used[j] {
				continue
			}
			used[j] = true
			out = append(out, withField(raw[j], "_icicle", info))
		case !r.Resolved:
			unresolved++
		default:
			src := map[string]string{"docid": r.DocID, "title": r.Title}
			if r.Summary != "" {
				src["summary"] = r.Summary
			}
			out = append(out, mustJSON(map[string]any{"_index": s.es.Index(), "_id": r.ID, "_score": nil,
				"_source": src, "_icicle": info}))
		}
	}
	for j := range raw {
		if len(out) >= len(raw) {
			break
		}
		if used[j] {
			continue
		}
		var h ESHit
		_ = json.Unmarshal(raw[j], &h) // read before, by hitsFromRaw
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
