package dropin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/rank"
)

// Cluster is what the drop-in needs from Elasticsearch (*adapter.Adapter satisfies it).
type Cluster interface {
	// Raw forwards a request (method, path, query string, media-type headers, body) unchanged and returns
	// Elasticsearch's status, headers and body, error statuses included; err is set only when no answer
	// came (wrapping adapter.ErrUnavailable, or the context's error).
	Raw(ctx context.Context, req adapter.RawRequest) (adapter.RawResponse, error)
	// IndexNames lists the names that address the configured index only (it, the indices behind it, their
	// aliases that point only at them): the default allow-list.
	IndexNames(ctx context.Context) ([]string, error)
	// Index is the configured index: where index-less reads go, and the _index of the documents the model
	// names from memory.
	Index() string
}

// Ranker ranks a rank window (*rank.Pipeline satisfies it).
type Ranker interface {
	// Run ranks the window's hits (rank.Request.Hits); its error is the client's cancellation or an
	// Elasticsearch failure of the first stage.
	Run(ctx context.Context, req rank.Request) (rank.Response, error)
	// WorkDeadline is when Elasticsearch and the reader must be done: the request's deadline less the reserve
	// held back for the answer.
	WorkDeadline(ctx context.Context) time.Time
	// Metrics receives the time spent in Elasticsearch (stage "es").
	Metrics() *rank.Metrics
}

// Options configure a Proxy; cmd/icicle fills them from config.
type Options struct {
	// Fields name the _source fields the model reads of a hit (default: the sidecar's layout, docid, title,
	// summary).
	Fields SourceFields
	// MaxQueryChars is the longest query text reranked; a longer one is passed through (ReasonQueryTooLong).
	MaxQueryChars int
	// RankWindowSize is how many of Elasticsearch's top hits a reranked search ranks when the request sets no
	// ext.icicle.rank_window_size (widened to the page size); 0 is DefaultRankWindowSize.
	RankWindowSize int
	// AllowedIndices are the index and alias names the drop-in (and /v1/search) may address (exact names, no
	// patterns); empty: Cluster.IndexNames, resolved when first needed and again on every RefreshAllowList.
	AllowedIndices []string
	// AllowScripts lets request bodies carry scripts (script, script_fields, runtime_mappings, script_score,
	// scripted_metric, ...); off, they are refused (a *ForbiddenError).
	AllowScripts bool
	// Logger receives the failures the answer does not show (a failed recall, an unresolved allow-list); nil
	// discards.
	Logger *slog.Logger
}

// Proxy is the drop-in: Elasticsearch's read API in front of the cluster, its searches reranked. Safe for
// concurrent use.
type Proxy struct {
	es   Cluster
	rank Ranker
	opts Options
	log  *slog.Logger
	// allow is the allow-list (access.go); nil until resolved: the configured index alone.
	allow atomic.Pointer[allowList]
}

// New returns the drop-in over es, ranking with r.
func New(es Cluster, r Ranker, opts Options) *Proxy {
	opts.Fields = opts.Fields.WithDefaults()
	opts.RankWindowSize = cmp.Or(opts.RankWindowSize, DefaultRankWindowSize)
	p := &Proxy{es: es, rank: r, opts: opts, log: opts.Logger}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if len(opts.AllowedIndices) > 0 {
		p.allow.Store(newAllowList(opts.AllowedIndices))
	}
	return p
}

// Request is one request to Elasticsearch's API as the drop-in takes it: the body read whole.
type Request struct {
	// Method is the request's method (Forward; a search goes to the cluster as a POST).
	Method string
	// Index is the path's index expression of a search; "" for an index-less /_search, which searches the
	// configured index (or, with a point in time, the point in time's indices).
	Index  string
	Params url.Values
	// Header is the request's: its media types and X-Opaque-Id go to the cluster (adapter.RawRequest).
	Header http.Header
	Body   []byte
	// RequestID and Model (the serving reader's name) go into a search's "icicle" object; Start is when the
	// request arrived, from which its took and timings.total_ms count.
	RequestID, Model string
	Start            time.Time
}

// Answer is Elasticsearch's answer as the drop-in passes it on.
type Answer struct {
	// Status, Header and Body are Elasticsearch's, the body reranked or passed through; ContentType is the
	// body's media type.
	Status      int
	Header      http.Header
	ContentType string
	Body        []byte
	// Mode and Reason say how a search was answered (Info's: a ranking mode, or ModePassthrough and a
	// Reason* constant; "es_error" for Elasticsearch's error status); Index is the index it searched.
	Mode, Reason, Index string
}

// Search serves Elasticsearch's search API: the body and query string go to the cluster unchanged (less
// ext.icicle, and with from/size widened to the rank window when reranking), and a successful answer comes
// back in Elasticsearch's shape with the rank window reranked by the pipeline, the page cut from it and an
// "icicle" object (Info) added, or passed through with mode passthrough and a reason. Elasticsearch's error
// statuses are answers, passed through with its body. The error is the sidecar's own: a body refused
// (*DuplicateKeyError, *ForbiddenError, *InputError), Elasticsearch unreachable (rank.ErrUpstream), the
// client gone; the answer's Header is Elasticsearch's whenever it answered. Callers check req.Index
// against the allow-list first (CheckIndex), before they read the body.
func (p *Proxy) Search(ctx context.Context, req Request) (Answer, error) {
	// The body is planned (and forwarded) re-encoded, which would keep the last of two equal keys where
	// Elasticsearch refuses the body: refuse it as Elasticsearch does, at the place in the caller's body.
	if err := CheckDuplicateKeys(req.Body); err != nil {
		return Answer{}, err
	}
	if err := p.checkScripts(req.Body); err != nil {
		return Answer{}, err
	}
	pl, err := planSearch(req.Params, req.Body, p.opts.MaxQueryChars, p.opts.RankWindowSize)
	if err != nil {
		return Answer{}, err
	}
	index := req.Index
	path := []string{index, "_search"}
	switch {
	case index != "":
	case hasPIT(req.Body):
		path = []string{"_search"} // a point in time names its indices; Elasticsearch refuses a path index
	default:
		index, path = p.es.Index(), []string{p.es.Index(), "_search"}
	}
	// Reranking keeps the answer's reserve at the end, as /v1/search does; a passthrough is all
	// Elasticsearch's.
	esDeadline, _ := ctx.Deadline()
	if pl.reason == "" {
		esDeadline = p.rank.WorkDeadline(ctx)
	}
	esCtx, esCancel := context.WithDeadline(ctx, esDeadline)
	esStart := time.Now()
	res, err := p.es.Raw(esCtx, adapter.RawRequest{Method: http.MethodPost, Path: path, Query: pl.params, Header: req.Header, Body: pl.body})
	esCancel()
	esDur := time.Since(esStart)
	p.rank.Metrics().ObserveStage("es", esDur.Seconds())
	if err != nil {
		return Answer{}, upstream(ctx, index, err)
	}
	ans := Answer{Status: res.Status, Header: res.Header, Index: index}
	var top map[string]json.RawMessage
	if res.Status/100 != 2 || json.Unmarshal(res.Body, &top) != nil || top == nil {
		// Elasticsearch's error, or an answer that is not a JSON object (format=yaml): as it is.
		ans.Mode = string(ModePassthrough)
		if res.Status/100 != 2 {
			ans.Mode = "es_error"
		}
		ans.ContentType, ans.Body = cmp.Or(res.Header.Get("Content-Type"), "application/json"), res.Body
		return ans, nil
	}

	info := Info{Mode: ModePassthrough, Reason: pl.reason, QueryFrom: pl.from, Model: req.Model}
	info.Timings.ES = ms(esDur)
	hitsObj, raw, ok := esHits(top)
	info.HitsReceived = len(raw)
	if pl.reason == "" && !ok {
		info.Reason = ReasonHitsWithoutTitle
	}
	if pl.fetch > 0 && ok {
		window := raw[:min(pl.window, len(raw))]
		placed := make([]json.RawMessage, 0, len(raw))
		if info.Reason == "" {
			hits, err := p.windowHits(ctx, window, pl.sourceFiltered())
			if err != nil {
				info.Reason = ReasonHitsWithoutTitle
			} else {
				resp, err := p.rank.Run(ctx, rank.Request{Query: pl.query, Size: min(len(hits), 100), Hits: hits, Searched: esDur})
				if err != nil {
					return ans, err
				}
				recalled := p.recall(ctx, pl, req, resp.Results, raw)
				var unresolved int
				placed, unresolved = placeHits(resp.Results, raw, recalled, pl.fetch)
				info.ranked(resp, unresolved)
			}
		}
		if info.Reason != "" && info.Mode == ModePassthrough {
			placed = raw // no ranking: Elasticsearch's order, still cut into the page asked for
		}
		page := placed[min(pl.pageFrom, len(placed)):min(pl.pageFrom+pl.pageSize, len(placed))]
		hitsObj["hits"] = mustJSON(page)
		top["hits"] = mustJSON(hitsObj)
		info.RankWindowSize = pl.window
	}
	info.RequestID = req.RequestID
	total := time.Since(req.Start)
	info.Timings.Total = ms(total)
	var esTook int64
	if json.Unmarshal(top["took"], &esTook) == nil && top["took"] != nil {
		// took is the whole request as the sidecar served it, Elasticsearch's part included.
		top["took"] = mustJSON(max(esTook, int64(math.Ceil(float64(total.Microseconds())/1000))))
	}
	top["icicle"] = mustJSON(info)
	ans.Mode, ans.Reason = string(info.Mode), info.Reason
	ans.ContentType, ans.Body = jsonContentType(res.Header), mustJSON(top)
	return ans, nil
}

// Forward sends a request that route (Route) says is forwarded to the cluster unchanged, once its body
// has passed the route's checks (the allow-list for the indices an _msearch or _mget body names, scripts),
// and returns Elasticsearch's answer, error statuses included. The error is the sidecar's own, as
// Search's. Callers check route.Index against the allow-list first (CheckIndex), before they read the body.
func (p *Proxy) Forward(ctx context.Context, route Route, req Request) (Answer, error) {
	check := route.check
	if check == nil {
		check = (*Proxy).checkScripts
	}
	if err := check(p, req.Body); err != nil {
		return Answer{}, err
	}
	res, err := p.es.Raw(ctx, adapter.RawRequest{Method: req.Method, Path: route.Path, Query: req.Params, Header: req.Header, Body: req.Body})
	if err != nil {
		return Answer{}, upstream(ctx, strings.Join(route.Path, "/"), err)
	}
	return Answer{Status: res.Status, Header: res.Header, ContentType: res.Header.Get("Content-Type"), Body: res.Body,
		Mode: string(ModePassthrough), Index: route.Index}, nil
}

// upstream classifies an error of a forwarded request: a path Elasticsearch cannot have (an *InputError), or
// Elasticsearch unreachable (rank.ErrUpstream; the client's cancellation when it went away).
func upstream(ctx context.Context, what string, err error) error {
	if errors.Is(err, adapter.ErrInvalidArgument) {
		return &InputError{Field: "path", Problem: fmt.Sprintf("%q is not an Elasticsearch path", what)}
	}
	return rank.UpstreamError(ctx, what, err)
}

// windowHits reads the rank window's hits as /v1/rerank reads its request's. When the request shaped
// _source (filtered), or a hit has no title, the window's docids, titles and summaries are read in one
// _mget by _index and _id, so that the model ranks the same candidates whatever the filter; the hits the
// caller gets keep the caller's filter.
func (p *Proxy) windowHits(ctx context.Context, window []json.RawMessage, filtered bool) ([]adapter.Hit, error) {
	if !filtered {
		if hits, err := p.opts.Fields.rawHits(window); err == nil {
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
	res, err := p.es.Raw(ctx, adapter.RawRequest{Method: http.MethodPost, Path: []string{"_mget"},
		Query: url.Values{"_source": {strings.Join(p.opts.Fields.read(), ",")}}, Body: mustJSON(map[string]any{"docs": refs})})
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
	return p.opts.Fields.Hits(es)
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
func (p *Proxy) recall(ctx context.Context, pl plan, req Request, results []rank.Result, raw []json.RawMessage) map[string]json.RawMessage {
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
	var body map[string]json.RawMessage
	_ = json.Unmarshal(req.Body, &body) // a JSON object: the plan reranks only those
	q := map[string]any{"query": map[string]any{"ids": map[string]any{"values": ids}}, "size": len(ids), "track_total_hits": false}
	for _, k := range recallBodyKeys {
		if body[k] != nil {
			q[k] = body[k]
		}
	}
	params := url.Values{}
	for _, k := range recallParams {
		if v, ok := pl.params[k]; ok {
			params[k] = v
		}
	}
	res, err := p.es.Raw(ctx, adapter.RawRequest{Method: http.MethodPost, Path: []string{p.es.Index(), "_search"}, Query: params,
		Header: req.Header, Body: mustJSON(q)})
	if err != nil || res.Status != http.StatusOK {
		p.log.Warn("recall parametric documents", "ids", len(ids), "status", res.Status, "err", err)
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
