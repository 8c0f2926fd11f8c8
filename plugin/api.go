package plugin

import (
	"cmp"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
)

// The /v1 handlers return their answer and one writer sends it, as prometheus's web/api/v1 does
// (apiFunc, wrap): a success as JSON with its status, an error through classify (errors.go) in the
// sidecar's own shape (ErrorBody), both counted in the request metrics. The drop-in's routes keep
// Elasticsearch's shapes (dropin.go).

// answer is what a /v1 handler answers: the body with its status (0 is 200), and the mode the request
// metrics count it under.
type answer struct {
	status int
	body   any
	mode   string
}

// apiFunc is a /v1 handler: its answer, or the error api writes instead.
type apiFunc func(c *gin.Context) (answer, error)

// api is the handler of endpoint that f answers: the answer written as JSON, counted in
// icicle_requests_total{endpoint, status, mode} with its latency; an error written by writeError, counted
// with mode "error". endpoint "" counts nothing (GET /v1/model describes the server; it asks nothing of
// it).
func (s *Server) api(endpoint string, f apiFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		a, err := f(c)
		if err != nil {
			writeError(c, s.log, err)
			a.status, a.mode = c.Writer.Status(), "error"
		} else {
			a.status = cmp.Or(a.status, http.StatusOK)
			c.JSON(a.status, a.body)
		}
		if endpoint == "" {
			return
		}
		s.metrics.requests.WithLabelValues(endpoint, strconv.Itoa(a.status), a.mode).Inc()
		if err == nil {
			s.metrics.duration.WithLabelValues(endpoint).Observe(time.Since(start).Seconds())
		}
	}
}
