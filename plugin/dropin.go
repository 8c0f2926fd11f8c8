package plugin

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/icicle-search/sidecar/dropin"
)

// The drop-in's handlers: Elasticsearch's API in front of the cluster (package dropin). gin routes
// /{index}/_search to dropinSearch; every request no other route matches reaches proxy.

// dropinSearch serves Elasticsearch's search API (dropin.Proxy.Search) on index, "" for an index-less
// /_search: Elasticsearch's answer with its headers, reranked or passed through; the sidecar's own errors
// in Elasticsearch's shape.
func (s *Server) dropinSearch(c *gin.Context, index string) {
	start := time.Now()
	body, ok := s.dropinBody(c, "dropin", "indices:data/read/search", index)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.opts.RequestTimeout)
	defer cancel()
	ans, err := s.dropin.Search(ctx, dropin.Request{Index: index, Params: c.Request.URL.Query(), Header: c.Request.Header,
		Body: body, RequestID: requestID(c), Model: s.modelInfo().Name, Start: start})
	copyHeaders(c, ans.Header, false)
	if err != nil {
		s.failES(c, "dropin", err)
		return
	}
	s.metrics.requests.WithLabelValues("dropin", strconv.Itoa(ans.Status), ans.Mode).Inc()
	s.metrics.duration.WithLabelValues("dropin").Observe(time.Since(start).Seconds())
	s.log.Info("dropin", "request_id", requestID(c), "index", ans.Index, "status", ans.Status, "mode", ans.Mode, "reason", ans.Reason,
		"took_ms", ms(time.Since(start)))
	c.Data(ans.Status, ans.ContentType, ans.Body)
}

// sidecarPaths are the first path segments of the sidecar's own API: an unknown route under them is a 404,
// never a request to the cluster.
var sidecarPaths = map[string]bool{"v1": true, "healthz": true, "readyz": true, "metrics": true, "openapi.yaml": true}

// proxy serves every request no route matched (gin's NoRoute): Elasticsearch's read APIs go to the
// cluster unchanged after the allow-list and script checks (dropin.Proxy.Route, Forward); index-less
// _search is the drop-in's search; the sidecar's own paths are 404; anything else is Elasticsearch's 403
// security_exception.
func (s *Server) proxy(c *gin.Context) {
	start := time.Now()
	segs, err := dropin.PathSegments(c.Request.URL.EscapedPath())
	if err != nil {
		s.failES(c, "dropin_proxy", err)
		return
	}
	if len(segs) > 0 && sidecarPaths[segs[0]] {
		c.JSON(http.StatusNotFound, ErrorBody{Error: "no such endpoint", RequestID: requestID(c)})
		return
	}
	route, err := s.dropin.Route(c.Request.Method, segs)
	if err != nil {
		s.failES(c, "dropin_proxy", err)
		return
	}
	if route.Search {
		s.dropinSearch(c, "")
		return
	}
	body, ok := s.dropinBody(c, "dropin_proxy", route.Action, route.Index)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.opts.RequestTimeout)
	defer cancel()
	ans, err := s.dropin.Forward(ctx, route, dropin.Request{Method: c.Request.Method, Params: c.Request.URL.Query(),
		Header: c.Request.Header, Body: body})
	if err != nil {
		s.failES(c, "dropin_proxy", err)
		return
	}
	copyHeaders(c, ans.Header, c.Request.Method == http.MethodHead)
	s.metrics.requests.WithLabelValues("dropin_proxy", strconv.Itoa(ans.Status), ans.Mode).Inc()
	s.metrics.duration.WithLabelValues("dropin_proxy").Observe(time.Since(start).Seconds())
	s.log.Info("dropin proxy", "request_id", requestID(c), "method", c.Request.Method, "path", "/"+strings.Join(route.Path, "/"),
		"status", ans.Status, "took_ms", ms(time.Since(start)))
	c.Data(ans.Status, ans.ContentType, ans.Body)
}

// dropinBody reads the request's body once the index expression it names (none: "") is on the allow-list
// for Elasticsearch's action; otherwise it writes the error (failES) and reports false.
func (s *Server) dropinBody(c *gin.Context, endpoint, action, index string) ([]byte, bool) {
	if index != "" {
		if err := s.dropin.CheckIndex(action, index); err != nil {
			s.failES(c, endpoint, err)
			return nil, false
		}
	}
	body, err := s.readBody(c)
	if err != nil {
		s.failES(c, endpoint, err)
		return nil, false
	}
	return body, true
}

// failES records and writes the sidecar's own error in Elasticsearch's shape (writeESError).
func (s *Server) failES(c *gin.Context, endpoint string, err error) {
	writeESError(c, s.log, err)
	s.metrics.requests.WithLabelValues(endpoint, strconv.Itoa(c.Writer.Status()), "error").Inc()
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
