package plugin

// THROWAWAY COPY, DELETE AT MERGE. Helper 13a (security, branch issue-13a) owns writeAuth in plugin/auth.go
// with Options.WriteToken (config server.write_token, env ICICLE_SERVER_WRITE_TOKEN). This file is a copy
// with exactly that name and behaviour so that POST /v1/click (click.go) can be authenticated before that
// branch exists. When both branches are merged, delete this file (and the duplicate WriteToken field and
// config key marked "issue-14b copy").

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// writeAuth lets through requests carrying "Authorization: Bearer <Options.WriteToken>", compared in
// constant time (of hashes, so the token's length does not leak either). A missing or wrong token gets
// 401 with WWW-Authenticate: Bearer; with no WriteToken configured the write endpoints are off (404).
func (s *Server) writeAuth(c *gin.Context) {
	if s.opts.WriteToken == "" {
		c.AbortWithStatusJSON(http.StatusNotFound, ErrorBody{Error: "not found: write endpoints are off (server.write_token is not set)", RequestID: requestID(c)})
		return
	}
	got, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	want := sha256.Sum256([]byte(s.opts.WriteToken))
	sum := sha256.Sum256([]byte(got))
	if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
		s.log.Warn("write request refused", "request_id", requestID(c), "path", c.Request.URL.Path, "remote", c.ClientIP())
		c.Header("WWW-Authenticate", `Bearer realm="icicle-write"`)
		c.AbortWithStatusJSON(http.StatusUnauthorized, ErrorBody{Error: "Authorization: Bearer <server.write_token> required", RequestID: requestID(c)})
		return
	}
	c.Next()
}
