package plugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/dropin"
	"github.com/icicle-search/sidecar/rank"
)

// InputError is bad input: the field (a JSON path such as "hits[3]._source.title") and the problem. The
// drop-in's (dropin.InputError), so that a problem in a hit's _source reads the same on /v1/rerank and on
// a drop-in search.
type InputError = dropin.InputError

// ForbiddenError is a request the sidecar refuses by policy: 403 (dropin.ForbiddenError: an index outside
// the allow-list, a script, an API the drop-in does not proxy; a policy this sidecar does not allow).
type ForbiddenError = dropin.ForbiddenError

// BusyError is a request the sidecar cannot take now for lack of capacity (an ingest finding the encoder
// saturated): 503 with Retry-After, to be sent again unchanged.
type BusyError struct{ What string }

func (e *BusyError) Error() string { return e.What }

// offError is a request for an endpoint whose feature is off on this server: 404 with the reason.
type offError struct{ what string }

func (e *offError) Error() string { return e.what }

// ErrUpstream marks an Elasticsearch failure (unreachable, rejecting or erroring): rank.ErrUpstream.
var ErrUpstream = rank.ErrUpstream

// statusClientClosed is nginx's 499: the client went away before the answer.
const statusClientClosed = 499

// wireError is what an error becomes on the wire, in both shapes: the sidecar's own body (msg, field) and,
// on the drop-in routes, Elasticsearch's (esType, esReason).
type wireError struct {
	status           int
	msg, field       string
	esType, esReason string
}

// classify is the one place errors become HTTP statuses (writeError and writeESError only render its
// answer). It logs what the body hides and sets the headers that go with the status (Retry-After,
// WWW-Authenticate). Internal error text never reaches a 5xx body; it is logged with the request id.
func classify(c *gin.Context, log *slog.Logger, err error) wireError {
	rid := requestID(c)
	var in *InputError
	var tooBig *http.MaxBytesError
	var denied *adapter.ResponseError
	var forbidden *ForbiddenError
	var busy *BusyError
	var dup *dropin.DuplicateKeyError
	var off *offError
	switch {
	case errors.As(err, &off):
		return wireError{http.StatusNotFound, off.what, "", "resource_not_found_exception", off.what}
	case errors.As(err, &dup):
		return wireError{http.StatusBadRequest, fmt.Sprintf("duplicate key (line %d, column %d)", dup.Line, dup.Column),
			dup.Field(), "x_content_parse_exception", dup.Error()}
	case errors.As(err, &forbidden):
		return wireError{http.StatusForbidden, forbidden.Reason, forbidden.Field, "security_exception", forbidden.Reason}
	case errors.As(err, &in):
		typ := "illegal_argument_exception"
		if in.Field == "body" {
			typ = "parsing_exception"
		}
		return wireError{http.StatusBadRequest, in.Problem, in.Field, typ, fmt.Sprintf("[%s] %s", in.Field, in.Problem)}
	case errors.As(err, &tooBig):
		return wireError{http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", tooBig.Limit), "",
			"content_too_long_exception", fmt.Sprintf("request body is larger than %d bytes (server.max_body_bytes of the icicle sidecar)", tooBig.Limit)}
	case errors.As(err, &denied) && (denied.Status == http.StatusUnauthorized || denied.Status == http.StatusForbidden) && callerAuthed(c):
		// Elasticsearch refused the caller's own credentials (callerAuth): the caller's answer, never a
		// fallback or an outage.
		for _, v := range denied.Authenticate {
			c.Writer.Header().Add("WWW-Authenticate", v)
		}
		log.Info("elasticsearch refused the caller", "request_id", rid, "status", denied.Status, "type", denied.Type)
		return wireError{denied.Status, "elasticsearch refused the caller's credentials: " + denied.Error(), "",
			cmp.Or(denied.Type, "security_exception"), denied.Reason}
	case errors.Is(err, context.Canceled):
		log.Info("client canceled", "request_id", rid)
		return wireError{statusClientClosed, "client closed request", "", "task_cancelled_exception", "client closed request"}
	case errors.As(err, &busy):
		c.Header("Retry-After", "1")
		return wireError{http.StatusServiceUnavailable, busy.What, "", "es_rejected_execution_exception", busy.What}
	case errors.Is(err, ErrLogFull): // POST /v1/click
		log.Warn("click not logged", "request_id", rid, "err", err)
		c.Header("Retry-After", "1")
		return wireError{http.StatusServiceUnavailable, "click log busy, retry", "", "unavailable_exception", "click log busy, retry"}
	case errors.Is(err, ErrUpstream) && errors.Is(err, context.DeadlineExceeded):
		log.Warn("elasticsearch timed out", "request_id", rid, "err", err)
		return wireError{http.StatusGatewayTimeout, "elasticsearch timed out", "", "timeout_exception", "elasticsearch did not answer the icicle sidecar in time"}
	case errors.Is(err, ErrUpstream):
		log.Warn("elasticsearch failed", "request_id", rid, "err", err)
		c.Header("Retry-After", "1")
		return wireError{http.StatusServiceUnavailable, "elasticsearch unavailable", "", "unavailable_exception", "elasticsearch unavailable to the icicle sidecar"}
	case errors.Is(err, context.DeadlineExceeded):
		log.Warn("request deadline exceeded", "request_id", rid, "err", err)
		return wireError{http.StatusGatewayTimeout, "request deadline exceeded", "", "timeout_exception", "request deadline exceeded in the icicle sidecar"}
	default:
		log.Error("internal error", "request_id", rid, "err", err)
		return wireError{http.StatusInternalServerError, "internal error", "", "exception", "internal error (request id " + rid + ")"}
	}
}

// writeError writes err in the sidecar's own shape (ErrorBody).
func writeError(c *gin.Context, log *slog.Logger, err error) {
	e := classify(c, log, err)
	c.JSON(e.status, ErrorBody{Error: e.msg, Field: e.field, RequestID: requestID(c)})
}

// callerAuthed reports whether the request's Elasticsearch calls carried the caller's own credentials
// (callerAuth), so that a 401 or 403 from the cluster is about the caller, not about the sidecar's
// configured credentials (which is a misconfiguration: 500).
func callerAuthed(c *gin.Context) bool {
	_, ok := adapter.CallerAuth(c.Request.Context())
	return ok
}

// writeESError writes err in Elasticsearch's shape (dropin.ErrorBody), for the drop-in routes: an
// Elasticsearch client reads that shape, with the statuses classify gives.
func writeESError(c *gin.Context, log *slog.Logger, err error) {
	e := classify(c, log, err)
	c.Header("X-Elastic-Product", "Elasticsearch") // the official clients refuse an answer without it
	c.JSON(e.status, dropin.NewErrorBody(e.status, e.esType, e.esReason))
}
