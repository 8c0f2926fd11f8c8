package adapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/elastic/go-elasticsearch/v8/esapi"
)

// MaxRawResponseBytes bounds the body RawSearch reads: a search answer larger than this (a huge page with
// full _source) is an error rather than an unbounded allocation.
const MaxRawResponseBytes = 64 << 20

// RawSearch forwards a search to /{index}/_search as the caller wrote it: the query string and body are
// sent unchanged (as a POST, which Elasticsearch treats as GET), and the answer comes back as it is, with
// its status, headers and body. index is the path segment, which may name several indices, aliases or
// patterns ("a,b", "logs-*"); it need not be the adapter's own index.
//
// Every HTTP answer is returned with a nil error, error statuses included (429, 502, 503 and 504 only
// after the adapter's retries, which re-send the same body): the caller passes Elasticsearch's own error
// through. err is set only when there is no answer to pass on: it wraps ErrUnavailable when the cluster
// cannot be reached or does not answer within Options.RequestTimeout (then it also matches
// context.DeadlineExceeded), is the caller's context error when that ended first, is ErrClosed after
// Close, or wraps ErrInvalidArgument for an index that is not one path segment.
func (a *Adapter) RawSearch(ctx context.Context, index string, query url.Values, body []byte) (int, http.Header, []byte, error) {
	if index == "" || index == "." || index == ".." || strings.Contains(index, "/") {
		// One path segment only: anything else would address another endpoint than _search.
		return 0, nil, nil, fmt.Errorf("raw search: %w: index %q", ErrInvalidArgument, index)
	}
	res, err := a.Raw(ctx, RawRequest{Method: http.MethodPost, Path: []string{index, "_search"}, Query: query, Body: body})
	if err != nil {
		return 0, nil, nil, err
	}
	return res.Status, res.Header, res.Body, nil
}

// RawRequest is one request forwarded to the cluster as a caller wrote it.
type RawRequest struct {
	// Method is the HTTP method; empty is GET.
	Method string
	// Path is the path's segments, unescaped ({"icicle-docs", "_search"}; none for "/"). Each is escaped
	// when sent, so a segment can never address another endpoint.
	Path []string
	// Query is sent as the query string, unchanged.
	Query url.Values
	// Header holds the caller's headers; only ForwardedHeaders are sent. Authorization is never copied
	// from here: the transport sets the configured credentials (or the caller's, carried in ctx).
	Header http.Header
	// Body is sent as it is; nil sends none.
	Body []byte
}

// RawResponse is the cluster's answer to a RawRequest: status, headers and body as they came.
type RawResponse struct {
	Status int
	Header http.Header
	Body   []byte
}

// ForwardedHeaders are the request headers Raw passes on: the media types (the official clients send
// Elasticsearch's vendor type, application/vnd.elasticsearch+json; compatible-with=8, and get it back),
// the caller's opaque id and trace context.
var ForwardedHeaders = []string{"Content-Type", "Accept", "X-Opaque-Id", "Traceparent", "Tracestate"}

// Raw forwards req to the cluster and returns its answer with status, headers and body; the drop-in
// proxies everything that is not a reranked search with it. As RawSearch, every HTTP answer comes back
// with a nil error (429, 502, 503 and 504 after the adapter's retries, which re-send the same body), and
// err is set only when there is no answer: ErrUnavailable, the caller's context error, ErrClosed, or
// ErrInvalidArgument for a path segment that is empty, "." or "..". Bodies over MaxRawResponseBytes are
// an error. A HEAD answer has no body.
func (a *Adapter) Raw(ctx context.Context, req RawRequest) (RawResponse, error) {
	if a.closed.Load() {
		return RawResponse{}, ErrClosed
	}
	what := "/" + strings.Join(req.Path, "/")
	for _, seg := range req.Path {
		if seg == "" || seg == "." || seg == ".." {
			return RawResponse{}, fmt.Errorf("raw request %q: %w: path segment %q", what, ErrInvalidArgument, seg)
		}
	}
	rctx, cancel := a.withTimeout(ctx)
	defer cancel()
	res, err := rawRequest(req).Do(rctx, a.rt)
	if err != nil {
		return RawResponse{}, fmt.Errorf("raw request %q: %w", what, a.noAnswer(ctx, rctx, err))
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, MaxRawResponseBytes+1))
	if err != nil {
		return RawResponse{}, fmt.Errorf("raw request %q: read response: %w", what, a.noAnswer(ctx, rctx, err))
	}
	if len(b) > MaxRawResponseBytes {
		return RawResponse{}, fmt.Errorf("raw request %q: response larger than %d bytes", what, MaxRawResponseBytes)
	}
	a.log.Debug("raw request", "method", req.Method, "path", what, "status", res.StatusCode, "bytes", len(b))
	return RawResponse{Status: res.StatusCode, Header: res.Header, Body: b}, nil
}

// IndexNames returns the names that address the configured index and nothing else: the index (or alias)
// itself, the concrete indices it resolves to, and every alias of those indices that points only at them
// (an alias that also covers another index is left out). The drop-in's default allow-list is this set.
func (a *Adapter) IndexNames(ctx context.Context) ([]string, error) {
	aliasesOf := func(path []string) (map[string]map[string]bool, error) {
		res, err := a.Raw(ctx, RawRequest{Path: path})
		if err != nil {
			return nil, err
		}
		if res.Status/100 != 2 {
			return nil, fmt.Errorf("%s: %w", strings.Join(path, "/"), responseError(res))
		}
		var byIndex map[string]struct {
			Aliases map[string]json.RawMessage `json:"aliases"`
		}
		if err := json.Unmarshal(res.Body, &byIndex); err != nil {
			return nil, fmt.Errorf("decode %s: %w", strings.Join(path, "/"), err)
		}
		out := make(map[string]map[string]bool, len(byIndex))
		for idx, v := range byIndex {
			out[idx] = make(map[string]bool, len(v.Aliases))
			for al := range v.Aliases {
				out[idx][al] = true
			}
		}
		return out, nil
	}
	own, err := aliasesOf([]string{a.index, "_alias"})
	if err != nil {
		return nil, fmt.Errorf("index names of %q: %w", a.index, err)
	}
	names := map[string]bool{a.index: true}
	var candidates []string
	for idx, als := range own {
		names[idx] = true
		for al := range als {
			if !names[al] {
				candidates = append(candidates, al)
			}
		}
	}
	if len(candidates) > 0 {
		sort.Strings(candidates)
		holders, err := aliasesOf([]string{"_alias", strings.Join(slices.Compact(candidates), ",")})
		if err != nil {
			return nil, fmt.Errorf("index names of %q: %w", a.index, err)
		}
		for _, al := range candidates {
			only := true
			for idx, als := range holders {
				if als[al] && own[idx] == nil {
					only = false
				}
			}
			if only {
				names[al] = true
			}
		}
	}
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// responseError reads Elasticsearch's error body of a raw answer.
func responseError(res RawResponse) error {
	e := &ResponseError{Status: res.Status}
	var body struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(res.Body, &body) == nil {
		e.Type, e.Reason = errorFields(body.Error)
	}
	return e
}

// noAnswer classifies a request that got no answer (do, RawSearch). The retrier's outage (a deadline that
// ended retries of connection failures or overload answers) stays ErrUnavailable without a deadline, as the
// cluster is down rather than slow. Otherwise the adapter's own timeout is an outage together with
// context.DeadlineExceeded (there but not answering), and the caller's context error is returned as it is.
func (a *Adapter) noAnswer(ctx, rctx context.Context, err error) error {
	switch {
	case errors.Is(err, ErrUnavailable) && !errors.Is(ctx.Err(), context.Canceled):
		return err
	case ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded):
		// Our RequestTimeout fired, not the caller's deadline: the cluster is there but not answering,
		// which callers must be able to tell from bad input or their own budget running out.
		return fmt.Errorf("%w: no answer within %s: %w", ErrUnavailable, a.timeout, context.DeadlineExceeded)
	}
	return transportError(rctx, err)
}

// rawRequest is an esapi request whose path, query string and headers are the caller's, not a typed
// parameter set: the esapi requests would drop or re-spell parameters they do not model.
type rawRequest RawRequest

// Do implements the esapi request contract; the transport fills in the node's scheme, host and auth.
func (r rawRequest) Do(ctx context.Context, transport esapi.Transport) (*esapi.Response, error) {
	var body io.Reader
	if len(r.Body) > 0 {
		body = bytes.NewReader(r.Body) // sets GetBody, so retries re-send it
	}
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost/", body)
	if err != nil {
		return nil, err
	}
	// Set after parsing: a segment may hold characters a URL string would misread ('#', '?').
	req.URL.Path = "/" + strings.Join(r.Path, "/")
	esc := make([]string, len(r.Path))
	for i, seg := range r.Path {
		esc[i] = url.PathEscape(seg)
	}
	req.URL.RawPath = "/" + strings.Join(esc, "/")
	req.URL.RawQuery = r.Query.Encode()
	for _, k := range ForwardedHeaders {
		for _, v := range r.Header.Values(k) {
			req.Header.Add(k, v)
		}
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := transport.Perform(req)
	if err != nil {
		return nil, err
	}
	return &esapi.Response{StatusCode: res.StatusCode, Header: res.Header, Body: res.Body}, nil
}
