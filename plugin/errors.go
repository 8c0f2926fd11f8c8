package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"
)

// InputError is bad input: the field (a JSON path such as "hits[3]._source.title") and the problem.
type InputError struct {
	Field   string
	Problem string
}

func (e *InputError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Problem) }

// ErrUpstream marks an Elasticsearch failure (unreachable, rejecting or erroring).
var ErrUpstream = errors.New("elasticsearch unavailable")

// statusClientClosed is nginx's 499: the client went away before the answer.
const statusClientClosed = 499

// writeError is the one place errors become HTTP statuses. Internal error text never reaches a 5xx
// body; it is logged with the request id.
func writeError(c *gin.Context, log *slog.Logger, err error) {
	rid := requestID(c)
	var in *InputError
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &in):
		c.JSON(http.StatusBadRequest, ErrorBody{Error: in.Problem, Field: in.Field, RequestID: rid})
	case errors.As(err, &tooBig):
		c.JSON(http.StatusRequestEntityTooLarge, ErrorBody{Error: fmt.Sprintf("body larger than %d bytes", tooBig.Limit), RequestID: rid})
	case errors.Is(err, context.Canceled):
		log.Info("client canceled", "request_id", rid)
		c.JSON(statusClientClosed, ErrorBody{Error: "client closed request", RequestID: rid})
	case errors.Is(err, ErrLogFull): // issue 14b: POST /v1/click
		log.Warn("click not logged", "request_id", rid, "err", err)
		c.Header("Retry-After", "1")
		c.JSON(http.StatusServiceUnavailable, ErrorBody{Error: "click log busy, retry", RequestID: rid})
	case errors.Is(err, ErrUpstream) && errors.Is(err, context.DeadlineExceeded):
		log.Warn("elasticsearch timed out", "request_id", rid, "err", err)
		c.JSON(http.StatusGatewayTimeout, ErrorBody{Error: "elasticsearch timed out", RequestID: rid})
	case errors.Is(err, ErrUpstream):
		log.Warn("elasticsearch failed", "request_id", rid, "err", err)
		c.Header("Retry-After", "1")
		c.JSON(http.StatusServiceUnavailable, ErrorBody{Error: "elasticsearch unavailable", RequestID: rid})
	case errors.Is(err, context.DeadlineExceeded):
		log.Warn("request deadline exceeded", "request_id", rid, "err", err)
		c.JSON(http.StatusGatewayTimeout, ErrorBody{Error: "request deadline exceeded", RequestID: rid})
	default:
		log.Error("internal error", "request_id", rid, "err", err)
		c.JSON(http.StatusInternalServerError, ErrorBody{Error: "internal error", RequestID: rid})
	}
}
