package dropin

import "fmt"

// InputError is bad input: the field (a JSON path such as "ext.icicle.query" or "hits[3]._source.title")
// and the problem.
type InputError struct {
	Field   string
	Problem string
}

func (e *InputError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Problem) }

// ForbiddenError is a request the sidecar refuses by policy: an index outside the allow-list, a script,
// an API it does not proxy. Elasticsearch's answer to it is 403 with a security_exception.
type ForbiddenError struct {
	// Field is the request field refused ("policy"); "" when the request as a whole is.
	Field  string
	Reason string
}

func (e *ForbiddenError) Error() string { return e.Reason }

// ErrorBody is Elasticsearch's error body: an Elasticsearch client reads
// {"error":{"root_cause":[...],"type":...,"reason":...},"status":N}, so the sidecar's own errors on the
// drop-in's routes take this shape.
type ErrorBody struct {
	Error  ErrorCause `json:"error"`
	Status int        `json:"status"`
}

// ErrorCause is one cause of an ErrorBody.
type ErrorCause struct {
	RootCause []ErrorCause `json:"root_cause,omitempty"`
	Type      string       `json:"type"`
	Reason    string       `json:"reason"`
}

// NewErrorBody is Elasticsearch's error body with one cause, its own root cause.
func NewErrorBody(status int, typ, reason string) ErrorBody {
	return ErrorBody{Status: status, Error: ErrorCause{Type: typ, Reason: reason,
		RootCause: []ErrorCause{{Type: typ, Reason: reason}}}}
}
