package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/icicle-search/sidecar/adapter"
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
	var denied *adapter.ResponseError
	switch {
	case errors.As(err, &in):
		c.JSON(http.StatusBadRequest, ErrorBody{Error: in.Problem, Field: in.Field, RequestID: rid})
	case errors.As(err, &tooBig):
		c.JSON(http.StatusRequestEntityTooLarge, ErrorBody{Error: fmt.Sprintf("body larger than %d bytes", tooBig.Limit), RequestID: rid})
	case errors.As(err, &denied) && (denied.Status == http.StatusUnauthorized || denied.Status == http.StatusForbidden) && callerAuthed(c):
		// Elasticsearch refused the caller's own credentials (callerAuth): the caller's answer, never a
		// fallback or an outage.
		for _, v := range denied.Authenticate {
			c.Writer.Header().Add("WWW-Authenticate", v)
		}
		log.Info("elasticsearch refused the caller", "request_id", rid, "status", denied.Status, "type", denied.Type)
		c.JSON(denied.Status, ErrorBody{Error: "elasticsearch refused the caller's credentials: " + denied.Error(), RequestID: rid})
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

// callerAuthed reports whether the request's Elasticsearch calls carried the caller's own credentials
// (callerAuth), so that a 401 or 403 from the cluster is about the caller, not about the sidecar's
// configured credentials (which is a misconfiguration: 500).
func callerAuthed(c *gin.Context) bool {
	_, ok := adapter.CallerAuth(c.Request.Context())
	return ok
}

// Elasticsearch-shaped errors, for the drop-in routes only (dropin.go, dropin_proxy.go): an Elasticsearch
// client reads {"error":{"root_cause":[...],"type":...,"reason":...},"status":N}, so the sidecar's own
// errors there take that shape, with the same statuses as writeError plus 403 for a ForbiddenError.

// ESErrorBody is Elasticsearch's error body.
type ESErrorBody struct {
	Error  ESErrorCause `json:"error"`
	Status int          `json:"status"`
}

// ESErrorCause is one cause of an ESErrorBody.
type ESErrorCause struct {
	RootCause []ESErrorCause `json:"root_cause,omitempty"`
	Type      string         `json:"type"`
	Reason    string         `json:"reason"`
}

func esErrorBody(status int, typ, reason string) ESErrorBody {
	return ESErrorBody{Status: status, Error: ESErrorCause{Type: typ, Reason: reason,
		RootCause: []ESErrorCause{{Type: typ, Reason: reason}}}}
}

// writeESError is writeError in Elasticsearch's shape. Internal error text never reaches a 5xx body.
func writeESError(c *gin.Context, log *slog.Logger, err error) {
	rid := requestID(c)
	var in *InputError
	var tooBig *http.MaxBytesError
	var forbidden *ForbiddenError
	status, typ, reason := http.StatusInternalServerError, "exception", "internal error (request id "+rid+")"
	switch {
	case errors.As(err, &forbidden):
		status, typ, reason = http.StatusForbidden, "security_exception", forbidden.Reason
	case errors.As(err, &in):
		status, typ, reason = http.StatusBadRequest, "illegal_argument_exception", fmt.Sprintf("[%s] %s", in.Field, in.Problem)
		if in.Field == "body" {
			typ = "parsing_exception"
		}
	case errors.As(err, &tooBig):
		status, typ, reason = http.StatusRequestEntityTooLarge, "content_too_long_exception",
			fmt.Sprintf("request body is larger than %d bytes (server.max_body_bytes of the icicle sidecar)", tooBig.Limit)
	case errors.Is(err, context.Canceled):
		log.Info("client canceled", "request_id", rid)
		status, typ, reason = statusClientClosed, "task_cancelled_exception", "client closed request"
	case errors.Is(err, ErrUpstream) && errors.Is(err, context.DeadlineExceeded):
		log.Warn("elasticsearch timed out", "request_id", rid, "err", err)
		status, typ, reason = http.StatusGatewayTimeout, "timeout_exception", "elasticsearch did not answer the icicle sidecar in time"
	case errors.Is(err, ErrUpstream):
		log.Warn("elasticsearch failed", "request_id", rid, "err", err)
		c.Header("Retry-After", "1")
		status, typ, reason = http.StatusServiceUnavailable, "unavailable_exception", "elasticsearch unavailable to the icicle sidecar"
	case errors.Is(err, context.DeadlineExceeded):
		log.Warn("request deadline exceeded", "request_id", rid, "err", err)
		status, typ, reason = http.StatusGatewayTimeout, "timeout_exception", "request deadline exceeded in the icicle sidecar"
	default:
		log.Error("internal error", "request_id", rid, "err", err)
	}
	c.Header("X-Elastic-Product", "Elasticsearch") // the official clients refuse an answer without it
	c.JSON(status, esErrorBody(status, typ, reason))
}
