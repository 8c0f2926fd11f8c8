package plugin

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/icicle-search/sidecar/adapter"
)

// The drop-in's proxy: everything of Elasticsearch's API that a search client reads, other than a reranked
// _search, goes to the cluster unchanged, and nothing else does (docs/api.md, "Drop-in: what is proxied").
// Every index the request names must be on the allow-list; request bodies may not carry scripts unless
// Options.AllowScripts.

// allowList is the set of index names the drop-in and /v1/search may address.
type allowList struct {
	names map[string]bool
	list  []string // sorted, for messages
}

func newAllowList(names []string) *allowList {
	a := &allowList{names: make(map[string]bool, len(names))}
	for _, n := range names {
		if n != "" && !a.names[n] {
			a.names[n] = true
			a.list = append(a.list, n)
		}
	}
	slices.Sort(a.list)
	return a
}

// denied returns the first part of the index expression expr ("a,b") that is not on the list, or "" when
// every part is. A wildcard, _all, an exclusion, date math or a remote cluster is never on the list: the
// list holds plain names, so such an expression could reach other indices and is refused.
func (a *allowList) denied(expr string) string {
	for _, part := range strings.Split(expr, ",") {
		if !a.names[part] {
			return cmp.Or(part, `""`)
		}
	}
	return ""
}

// allowed returns the current allow-list. The first request to need it resolves the default list (cmd's
// start-up readiness wait usually has done it through /readyz); until that succeeds it is the configured
// index alone.
func (s *Server) allowed() *allowList {
	if a := s.allow.Load(); a != nil {
		return a
	}
	s.refreshAllowList()
	if a := s.allow.Load(); a != nil {
		return a
	}
	return newAllowList([]string{s.es.Index()})
}

// refreshAllowList resolves the default allow-list (the configured index, the indices behind it and their
// aliases that point only at them) unless Options.AllowedIndices set it. On failure the last list stays.
// It is the sidecar's own work: it runs on a context of its own (2s), never with a caller's credentials
// or cancellation, whatever request needed it.
func (s *Server) refreshAllowList() {
	if len(s.opts.AllowedIndices) > 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	names, err := s.es.IndexNames(ctx)
	if err != nil {
		s.log.Warn("resolve the drop-in's allowed indices", "err", err)
		return
	}
	s.allow.Store(newAllowList(names))
}

// ForbiddenError is a request the sidecar refuses by policy: an index outside the allow-list, a script,
// an API it does not proxy. It is answered 403 with Elasticsearch's security_exception.
type ForbiddenError struct {
	// Field is the request field refused ("policy"); "" when the request as a whole is.
	Field  string
	Reason string
}

func (e *ForbiddenError) Error() string { return e.Reason }

// checkIndex refuses an index expression outside the allow-list.
func (s *Server) checkIndex(action, expr string) error {
	al := s.allowed()
	if bad := al.denied(expr); bad != "" {
		return &ForbiddenError{Reason: fmt.Sprintf("action [%s] is unauthorized for index [%s] through the icicle sidecar "+
			"(elasticsearch.allowed_indices)", action, bad)}
	}
	return nil
}

// scriptKeys are the request-body keys that run Painless (or another script language) on the cluster.
var scriptKeys = map[string]bool{
	"script": true, "script_fields": true, "runtime_mappings": true, "script_score": true, "_script": true,
	"scripted_metric": true, "bucket_script": true, "bucket_selector": true, "params_script": true,
}

// checkScripts refuses a body with scripts unless Options.AllowScripts.
func (s *Server) checkScripts(body []byte) error {
	if s.opts.AllowScripts || len(body) == 0 {
		return nil
	}
	if key := scriptKeyIn(body); key != "" {
		return &ForbiddenError{Reason: fmt.Sprintf("scripts are disabled through the icicle sidecar: the request body has [%s] (dropin.allow_scripts)", key)}
	}
	return nil
}

// scriptKeyIn walks every JSON value in body (one document, or NDJSON lines) for a key in scriptKeys.
func scriptKeyIn(body []byte) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		var v any
		if err := dec.Decode(&v); err != nil {
			return ""
		}
		if k := scriptKeyInValue(v); k != "" {
			return k
		}
	}
}

func scriptKeyInValue(v any) string {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if scriptKeys[k] {
				return k
			}
			if found := scriptKeyInValue(x); found != "" {
				return found
			}
		}
	case []any:
		for _, x := range v {
			if found := scriptKeyInValue(x); found != "" {
				return found
			}
		}
	}
	return ""
}

// proxyRoute is what the proxy makes of a request's method and path.
type proxyRoute struct {
	action string   // Elasticsearch's action name, for messages
	index  string   // the index expression the path names; "" for none
	path   []string // the path sent to the cluster (index-less reads are sent to the configured index)
	search bool     // a _search: the drop-in's search handler
	check  func(s *Server, body []byte) error
}

// sidecarPaths are the first path segments of the sidecar's own API: an unknown route under them is a 404,
// never a request to the cluster.
var sidecarPaths = map[string]bool{"v1": true, "healthz": true, "readyz": true, "metrics": true, "openapi.yaml": true}

// routeProxy decides what a request that no sidecar route matched is. ok is false for an API the proxy
// does not forward (writes, cluster administration); the caller answers 403.
func (s *Server) routeProxy(method string, segs []string) (proxyRoute, bool) {
	read := method == http.MethodGet || method == http.MethodHead
	search := read || method == http.MethodPost
	own := s.es.Index()
	if len(segs) == 0 {
		return proxyRoute{action: "cluster:monitor/main"}, read
	}
	if strings.HasPrefix(segs[0], "_") {
		// Index-less APIs: reads go to the configured index (never to every index of the cluster); scroll
		// and point-in-time continuations carry the ids of searches opened on an allowed index.
		switch {
		case segs[0] == "_search" && len(segs) == 1 && search:
			return proxyRoute{action: "indices:data/read/search", path: segs, search: true}, true
		case segs[0] == "_search" && len(segs) >= 2 && len(segs) <= 3 && segs[1] == "scroll" && (search || method == http.MethodDelete):
			return proxyRoute{action: "indices:data/read/scroll", path: segs}, true
		case segs[0] == "_pit" && len(segs) == 1 && method == http.MethodDelete:
			return proxyRoute{action: "indices:data/read/close_point_in_time", path: segs}, true
		case len(segs) == 1 && search && (segs[0] == "_count" || segs[0] == "_field_caps"):
			return proxyRoute{action: "indices:data/read/" + strings.TrimPrefix(segs[0], "_"), path: []string{own, segs[0]}}, true
		case len(segs) == 1 && search && segs[0] == "_msearch":
			return proxyRoute{action: "indices:data/read/msearch", path: []string{own, segs[0]}, check: (*Server).checkMsearch}, true
		case len(segs) == 1 && search && segs[0] == "_mget":
			return proxyRoute{action: "indices:data/read/mget", path: []string{own, segs[0]}, check: (*Server).checkMget}, true
		case segs[0] == "_mapping" && read:
			return proxyRoute{action: "indices:admin/mappings/get", path: append([]string{own}, segs...)}, true
		case len(segs) == 2 && segs[0] == "_validate" && segs[1] == "query" && search:
			return proxyRoute{action: "indices:admin/validate/query", path: append([]string{own}, segs...)}, true
		}
		return proxyRoute{action: method + " /" + strings.Join(segs, "/")}, false
	}
	r := proxyRoute{index: segs[0], path: segs}
	if len(segs) == 1 {
		r.action = "indices:admin/get"
		return r, read
	}
	switch api := segs[1]; {
	case len(segs) == 2 && search && (api == "_count" || api == "_field_caps" || api == "_termvectors"):
		r.action = "indices:data/read/" + strings.TrimPrefix(api, "_")
		return r, true
	case len(segs) == 2 && search && api == "_msearch":
		r.action, r.check = "indices:data/read/msearch", (*Server).checkMsearch
		return r, true
	case len(segs) == 2 && search && api == "_mget":
		r.action, r.check = "indices:data/read/mget", (*Server).checkMget
		return r, true
	case len(segs) == 2 && method == http.MethodPost && api == "_pit":
		r.action = "indices:data/read/open_point_in_time"
		return r, true
	case read && (api == "_mapping" || api == "_settings" || api == "_alias"):
		r.action = "indices:admin/get"
		return r, true
	case len(segs) == 3 && api == "_validate" && segs[2] == "query" && search:
		r.action = "indices:admin/validate/query"
		return r, true
	case len(segs) == 3 && api == "_explain" && search:
		r.action = "indices:data/read/explain"
		return r, true
	case len(segs) == 3 && (api == "_doc" || api == "_source") && read:
		r.action = "indices:data/read/get"
		return r, true
	case len(segs) == 3 && api == "_termvectors" && search:
		r.action = "indices:data/read/tv"
		return r, true
	}
	r.action = method + " /" + strings.Join(segs, "/")
	return r, false
}

// checkMsearch checks every header line of an _msearch body against the allow-list (a header without
// an index uses the path's, which was checked) and every search line for scripts.
func (s *Server) checkMsearch(body []byte) error {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), len(body)+1)
	header := true
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if header {
			var h struct {
				Index json.RawMessage `json:"index"`
			}
			if json.Unmarshal(line, &h) == nil && h.Index != nil {
				var one string
				var many []string
				switch {
				case json.Unmarshal(h.Index, &one) == nil:
					many = []string{one}
				case json.Unmarshal(h.Index, &many) == nil:
				default:
					many = []string{string(h.Index)}
				}
				if err := s.checkIndex("indices:data/read/msearch", strings.Join(many, ",")); err != nil {
					return err
				}
			}
		} else if err := s.checkScripts(line); err != nil {
			return err
		}
		header = !header
	}
	return nil
}

// checkMget checks the _index of every document an _mget body names.
func (s *Server) checkMget(body []byte) error {
	var req struct {
		Docs []struct {
			Index string `json:"_index"`
		} `json:"docs"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil // Elasticsearch will say what is wrong
	}
	for _, d := range req.Docs {
		if d.Index == "" {
			continue
		}
		if err := s.checkIndex("indices:data/read/mget", d.Index); err != nil {
			return err
		}
	}
	return nil
}

// pathSegments splits the request's escaped path into unescaped segments; a trailing slash is ignored.
func pathSegments(r *http.Request) ([]string, error) {
	p := strings.Trim(r.URL.EscapedPath(), "/")
	if p == "" {
		return nil, nil
	}
	parts := strings.Split(p, "/")
	for i, part := range parts {
		u, err := url.PathUnescape(part)
		if err != nil {
			return nil, &InputError{Field: "path", Problem: err.Error()}
		}
		parts[i] = u
	}
	return parts, nil
}

// proxy serves every request no route matched (gin's NoRoute): Elasticsearch's read APIs go to the
// cluster unchanged after the allow-list and script checks; index-less _search is the drop-in's search;
// the sidecar's own paths are 404; anything else is Elasticsearch's 403 security_exception.
func (s *Server) proxy(c *gin.Context) {
	start := time.Now()
	segs, err := pathSegments(c.Request)
	if err != nil {
		s.failES(c, "dropin_proxy", err)
		return
	}
	if len(segs) > 0 && sidecarPaths[segs[0]] {
		c.JSON(http.StatusNotFound, ErrorBody{Error: "no such endpoint", RequestID: requestID(c)})
		return
	}
	route, ok := s.routeProxy(c.Request.Method, segs)
	if !ok {
		s.failES(c, "dropin_proxy", &ForbiddenError{Reason: fmt.Sprintf("action [%s] is not allowed through the icicle sidecar: it proxies Elasticsearch's read APIs only (docs/api.md); write with /v1/ingest",
			route.action)})
		return
	}
	if route.search {
		s.dropinSearch(c, "")
		return
	}
	if route.index != "" {
		if err := s.checkIndex(route.action, route.index); err != nil {
			s.failES(c, "dropin_proxy", err)
			return
		}
	}
	body, err := s.readBody(c)
	if err != nil {
		s.failES(c, "dropin_proxy", err)
		return
	}
	if route.check != nil {
		if err := route.check(s, body); err != nil {
			s.failES(c, "dropin_proxy", err)
			return
		}
	} else if err := s.checkScripts(body); err != nil {
		s.failES(c, "dropin_proxy", err)
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.opts.RequestTimeout)
	defer cancel()
	res, err := s.es.Raw(ctx, adapter.RawRequest{Method: c.Request.Method, Path: route.path, Query: c.Request.URL.Query(),
		Header: c.Request.Header, Body: body})
	if err != nil {
		s.failES(c, "dropin_proxy", s.upstream(c, strings.Join(route.path, "/"), err))
		return
	}
	copyHeaders(c, res.Header, c.Request.Method == http.MethodHead)
	s.metrics.requests.WithLabelValues("dropin_proxy", fmt.Sprint(res.Status), string(ModePassthrough)).Inc()
	s.metrics.duration.WithLabelValues("dropin_proxy").Observe(time.Since(start).Seconds())
	s.log.Info("dropin proxy", "request_id", requestID(c), "method", c.Request.Method, "path", "/"+strings.Join(route.path, "/"),
		"status", res.Status, "took_ms", ms(time.Since(start)))
	c.Data(res.Status, res.Header.Get("Content-Type"), res.Body)
}

// upstream classifies an adapter error of a forwarded request for failES.
func (s *Server) upstream(c *gin.Context, what string, err error) error {
	if errors.Is(err, adapter.ErrInvalidArgument) {
		return &InputError{Field: "path", Problem: fmt.Sprintf("%q is not an Elasticsearch path", what)}
	}
	return upstreamError(c.Request.Context(), what, err)
}

// hopHeaders are not copied from Elasticsearch's answer: the sidecar's own connection sets them.
var hopHeaders = map[string]bool{"Connection": true, "Keep-Alive": true, "Transfer-Encoding": true, "Content-Length": true,
	"Content-Type": true, "X-Request-Id": true}

// copyHeaders copies Elasticsearch's response headers (X-Elastic-Product, Warning, ...). A HEAD answer
// keeps Content-Length, which is all it says besides the status.
func copyHeaders(c *gin.Context, h http.Header, head bool) {
	for k, vs := range h {
		if hopHeaders[http.CanonicalHeaderKey(k)] && !(head && http.CanonicalHeaderKey(k) == "Content-Length") {
			continue
		}
		for _, v := range vs {
			c.Writer.Header().Add(k, v)
		}
	}
}
