package dropin

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Route is what the drop-in makes of a request to Elasticsearch's API: which action it is, which index it
// names, where it goes, and whether it is a search (Proxy.Search) rather than a request forwarded as it is
// (Proxy.Forward).
type Route struct {
	// Action is Elasticsearch's action name ("indices:data/read/count"), for messages.
	Action string
	// Index is the index expression the path names; "" for none.
	Index string
	// Path is the path sent to the cluster: index-less reads go to the configured index.
	Path []string
	// Search is true for an index-less _search, which Proxy.Search serves.
	Search bool
	// check checks the body of an API that names indices in it (_msearch, _mget); nil checks it for
	// scripts only.
	check func(p *Proxy, body []byte) error
}

// Route decides what a request to Elasticsearch's API (its method and unescaped path segments) is. An API
// the drop-in does not forward (writes, cluster administration) is a *ForbiddenError naming its action.
func (p *Proxy) Route(method string, segs []string) (Route, error) {
	r, ok := p.route(method, segs)
	if !ok {
		return r, &ForbiddenError{Reason: fmt.Sprintf("action [%s] is not allowed through the icicle sidecar: it proxies Elasticsearch's read APIs only (docs/api.md); write with /v1/ingest",
			r.Action)}
	}
	return r, nil
}

// route is Route with ok false for an API the drop-in does not forward.
func (p *Proxy) route(method string, segs []string) (Route, bool) {
	read := method == http.MethodGet || method == http.MethodHead
	search := read || method == http.MethodPost
	own := p.es.Index()
	if len(segs) == 0 {
		return Route{Action: "cluster:monitor/main"}, read
	}
	if strings.HasPrefix(segs[0], "_") {
		// Index-less APIs: reads go to the configured index (never to every index of the cluster); scroll
		// and point-in-time continuations carry the ids of searches opened on an allowed index.
		switch {
		case segs[0] == "_search" && len(segs) == 1 && search:
			return Route{Action: "indices:data/read/search", Path: segs, Search: true}, true
		case segs[0] == "_search" && len(segs) >= 2 && len(segs) <= 3 && segs[1] == "scroll" && (search || method == http.MethodDelete):
			return Route{Action: "indices:data/read/scroll", Path: segs}, true
		case segs[0] == "_pit" && len(segs) == 1 && method == http.MethodDelete:
			return Route{Action: "indices:data/read/close_point_in_time", Path: segs}, true
		case len(segs) == 1 && search && (segs[0] == "_count" || segs[0] == "_field_caps"):
			return Route{Action: "indices:data/read/" + strings.TrimPrefix(segs[0], "_"), Path: []string{own, segs[0]}}, true
		case len(segs) == 1 && search && segs[0] == "_msearch":
			return Route{Action: "indices:data/read/msearch", Path: []string{own, segs[0]}, check: (*Proxy).checkMsearch}, true
		case len(segs) == 1 && search && segs[0] == "_mget":
			return Route{Action: "indices:data/read/mget", Path: []string{own, segs[0]}, check: (*Proxy).checkMget}, true
		case segs[0] == "_mapping" && read:
			return Route{Action: "indices:admin/mappings/get", Path: append([]string{own}, segs...)}, true
		case len(segs) == 2 && segs[0] == "_validate" && segs[1] == "query" && search:
			return Route{Action: "indices:admin/validate/query", Path: append([]string{own}, segs...)}, true
		}
		return Route{Action: method + " /" + strings.Join(segs, "/")}, false
	}
	r := Route{Index: segs[0], Path: segs}
	if len(segs) == 1 {
		r.Action = "indices:admin/get"
		return r, read
	}
	switch api := segs[1]; {
	case len(segs) == 2 && search && (api == "_count" || api == "_field_caps" || api == "_termvectors"):
		r.Action = "indices:data/read/" + strings.TrimPrefix(api, "_")
		return r, true
	case len(segs) == 2 && search && api == "_msearch":
		r.Action, r.check = "indices:data/read/msearch", (*Proxy).checkMsearch
		return r, true
	case len(segs) == 2 && search && api == "_mget":
		r.Action, r.check = "indices:data/read/mget", (*Proxy).checkMget
		return r, true
	case len(segs) == 2 && method == http.MethodPost && api == "_pit":
		r.Action = "indices:data/read/open_point_in_time"
		return r, true
	case read && (api == "_mapping" || api == "_settings" || api == "_alias"):
		r.Action = "indices:admin/get"
		return r, true
	case len(segs) == 3 && api == "_validate" && segs[2] == "query" && search:
		r.Action = "indices:admin/validate/query"
		return r, true
	case len(segs) == 3 && api == "_explain" && search:
		r.Action = "indices:data/read/explain"
		return r, true
	case len(segs) == 3 && (api == "_doc" || api == "_source") && read:
		r.Action = "indices:data/read/get"
		return r, true
	case len(segs) == 3 && api == "_termvectors" && search:
		r.Action = "indices:data/read/tv"
		return r, true
	}
	r.Action = method + " /" + strings.Join(segs, "/")
	return r, false
}

// PathSegments splits a request's escaped path into unescaped segments; a trailing slash is ignored. A
// segment that does not unescape is an *InputError on "path".
func PathSegments(escapedPath string) ([]string, error) {
	p := strings.Trim(escapedPath, "/")
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
