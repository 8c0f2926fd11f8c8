package adapter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
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
	if a.closed.Load() {
		return 0, nil, nil, ErrClosed
	}
	if index == "" || index == "." || index == ".." || strings.Contains(index, "/") {
		// One path segment only: anything else would address another endpoint than _search.
		return 0, nil, nil, fmt.Errorf("raw search: %w: index %q", ErrInvalidArgument, index)
	}
	rctx, cancel := a.withTimeout(ctx)
	defer cancel()
	res, err := rawSearchRequest{index: index, query: query, body: body}.Do(rctx, a.rt)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("raw search %q: %w", index, a.noAnswer(ctx, rctx, err))
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, MaxRawResponseBytes+1))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("raw search %q: read response: %w", index, a.noAnswer(ctx, rctx, err))
	}
	if len(b) > MaxRawResponseBytes {
		return 0, nil, nil, fmt.Errorf("raw search %q: response larger than %d bytes", index, MaxRawResponseBytes)
	}
	a.log.Debug("raw search", "index", index, "status", res.StatusCode, "bytes", len(b))
	return res.StatusCode, res.Header, b, nil
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

// rawSearchRequest is an esapi request whose query string is the caller's, not a typed parameter set:
// esapi.SearchRequest would drop or re-spell parameters it does not model.
type rawSearchRequest struct {
	index string
	query url.Values
	body  []byte
}

// Do implements the esapi request contract; the transport fills in the node's scheme, host and auth.
func (r rawSearchRequest) Do(ctx context.Context, transport esapi.Transport) (*esapi.Response, error) {
	var body io.Reader
	if len(r.body) > 0 {
		body = bytes.NewReader(r.body) // sets GetBody, so retries re-send it
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost/_search", body)
	if err != nil {
		return nil, err
	}
	// Set after parsing: the index segment may hold characters a URL string would misread ('#', '?').
	req.URL.Path = "/" + r.index + "/_search"
	req.URL.RawQuery = r.query.Encode()
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := transport.Perform(req)
	if err != nil {
		return nil, err
	}
	return &esapi.Response{StatusCode: res.StatusCode, Header: res.Header, Body: res.Body}, nil
}
