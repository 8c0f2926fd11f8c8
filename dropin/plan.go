package dropin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/rank"
)

// ModePassthrough is the drop-in's answer when it did not rerank: Elasticsearch's response unchanged, hits
// in Elasticsearch's order, with Info.Reason saying why.
const ModePassthrough rank.Mode = "passthrough"

// Passthrough reasons of the drop-in (Info.Reason with ModePassthrough), in the order they are checked.
// docs/api.md explains each.
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

// DefaultRankWindowSize is the rank window when neither the request (ext.icicle.rank_window_size) nor
// Options.RankWindowSize sets one: Elasticsearch's default for text_similarity_reranker.
const DefaultRankWindowSize = 10

// plan is what a search request asks of the drop-in, decided before Elasticsearch is called.
type plan struct {
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

// planSearch decides from the request alone whether to rerank, with which query text and over which
// rank window. Only a malformed ext.icicle section (or a rank window smaller than the page) is an error
// (an *InputError); anything else Elasticsearch may judge is forwarded.
func planSearch(params url.Values, body []byte, maxQueryChars, defaultWindow int) (plan, error) {
	p := plan{body: body, params: params}
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

// sourceFiltered reports whether the request shapes _source (source filtering, stored_fields,
// filter_path), so that its hits may lack the docid, title or summary the model reads.
func (p plan) sourceFiltered() bool {
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

// hasPIT reports whether a search body searches a point in time.
func hasPIT(body []byte) bool {
	var req struct {
		PIT json.RawMessage `json:"pit"`
	}
	return json.Unmarshal(body, &req) == nil && req.PIT != nil
}
