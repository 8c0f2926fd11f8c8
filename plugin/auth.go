package plugin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/dropin"
)

// Values of Options.CallerCredentials.
const (
	// CallerPassthrough (the default) forwards each caller's own Authorization header to Elasticsearch.
	CallerPassthrough = "passthrough"
	// CallerService sends the sidecar's configured credentials for every caller: an explicit opt-in.
	CallerService = "service"
)

// esAuthenticate is what a secured Elasticsearch cluster answers a request without credentials with: the
// schemes it accepts. The sidecar sends the same when it refuses a caller's header itself.
var esAuthenticate = []string{`Basic realm="security", charset="UTF-8"`, `Bearer realm="security"`, `ApiKey`}

// callerAuth is the middleware of the routes that search on a caller's behalf (the drop-in, /v1/search,
// /v1/rerank's docid lookups). With Options.CallerCredentials "passthrough" it puts the caller's
// Authorization header (Basic, Bearer or ApiKey; or none at all) in the request context, where the
// adapter sends it instead of the configured credentials (adapter.WithCallerAuth): Elasticsearch's own
// security then decides what the caller may read, and a caller without credentials is forwarded without
// any, so a secured cluster answers 401 itself. A header of another scheme is refused here with the same
// 401 a cluster would give. With "service" the request keeps the sidecar's configured credentials.
func (s *Server) callerAuth(c *gin.Context) {
	if s.opts.CallerCredentials == CallerService {
		c.Next()
		return
	}
	h := strings.TrimSpace(c.GetHeader("Authorization"))
	if h != "" {
		scheme, cred, _ := strings.Cut(h, " ")
		switch strings.ToLower(scheme) {
		case "basic", "bearer", "apikey":
		default:
			cred = ""
		}
		if strings.TrimSpace(cred) == "" {
			s.refuseCaller(c, "the Authorization header must be Basic, Bearer or ApiKey credentials")
			return
		}
	}
	c.Request = c.Request.WithContext(adapter.WithCallerAuth(c.Request.Context(), h))
	c.Next()
}

// refuseCaller answers 401 as Elasticsearch's security does: WWW-Authenticate with the schemes, and a
// security_exception error body.
func (s *Server) refuseCaller(c *gin.Context, reason string) {
	for _, v := range esAuthenticate {
		c.Writer.Header().Add("WWW-Authenticate", v)
	}
	c.AbortWithStatusJSON(http.StatusUnauthorized, dropin.NewErrorBody(http.StatusUnauthorized, "security_exception", reason))
	s.metrics.requests.WithLabelValues(endpointOf(c), "401", "error").Inc()
}

// writeAuth guards the endpoints that write (POST /v1/ingest): they need "Authorization: Bearer
// <Options.WriteToken>", compared in constant time; a missing or wrong token is 401 with
// WWW-Authenticate: Bearer. With WriteToken "" the endpoints are off: 404.
func (s *Server) writeAuth(c *gin.Context) {
	if s.opts.WriteToken == "" {
		c.AbortWithStatusJSON(http.StatusNotFound, ErrorBody{Error: "write endpoints are off on this server (set server.write_token)", RequestID: requestID(c)})
		s.metrics.requests.WithLabelValues(endpointOf(c), "404", "error").Inc()
		return
	}
	if !bearerIs(c.GetHeader("Authorization"), s.opts.WriteToken) {
		s.log.Warn("write request refused", "request_id", requestID(c), "path", c.Request.URL.Path, "remote", c.ClientIP())
		c.Header("WWW-Authenticate", `Bearer realm="icicle-write"`)
		c.AbortWithStatusJSON(http.StatusUnauthorized, ErrorBody{Error: "write endpoint: Authorization: Bearer <server.write_token> required", RequestID: requestID(c)})
		s.metrics.requests.WithLabelValues(endpointOf(c), "401", "error").Inc()
		return
	}
	c.Next()
}

// adminAuth lets through requests carrying "Authorization: Bearer <Options.AdminToken>", compared in
// constant time; others get 401.
func (s *Server) adminAuth(c *gin.Context) {
	if !bearerIs(c.GetHeader("Authorization"), s.opts.AdminToken) {
		s.log.Warn("admin request refused", "request_id", requestID(c), "path", c.Request.URL.Path, "remote", c.ClientIP())
		c.Header("WWW-Authenticate", `Bearer realm="icicle-admin"`)
		c.AbortWithStatusJSON(http.StatusUnauthorized, ErrorBody{Error: "admin endpoint: Authorization: Bearer <server.admin_token> required", RequestID: requestID(c)})
		s.metrics.requests.WithLabelValues("admin_model", "401", "error").Inc()
		return
	}
	c.Next()
}

// bearerIs reports whether header is "Bearer <token>" with token want. The comparison is of SHA-256
// digests in constant time, so neither the token's bytes nor its length leak through timing. An empty
// want never matches.
func bearerIs(header, want string) bool {
	got, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || want == "" {
		return false
	}
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// endpointOf names a route for the request metrics: the path after /v1/, or "dropin".
func endpointOf(c *gin.Context) string {
	if p, ok := strings.CutPrefix(c.FullPath(), "/v1/"); ok {
		return strings.ReplaceAll(p, "/", "_")
	}
	return "dropin"
}
