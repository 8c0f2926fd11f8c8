package adapter

import (
	"errors"
	"fmt"
	"net/http"
)

var (
	// ErrUnavailable means Elasticsearch could not be reached, kept answering 429/502/503/504 after the
	// configured retries or until the context's deadline cut them short, or did not answer within
	// Options.RequestTimeout (then the error also matches context.DeadlineExceeded). Callers should treat
	// it as a dependency outage (HTTP 502/503/504), not as bad input.
	ErrUnavailable = errors.New("elasticsearch unavailable")

	// ErrIndexMissing means the configured index does not exist; run EnsureIndex (or ingest) first.
	ErrIndexMissing = errors.New("index missing")

	// ErrMappingMismatch means the index exists but its mapping is not the one this package writes and
	// reads. Errors that wrap it are, or join, *MappingError values naming each field and problem.
	ErrMappingMismatch = errors.New("index mapping mismatch")

	// ErrInvalidArgument means a call was made with arguments that can never succeed (k out of range, an
	// empty query). It is a caller bug or bad user input, never an Elasticsearch condition.
	ErrInvalidArgument = errors.New("invalid argument")

	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("adapter closed")
)

// ResponseError is an error response from Elasticsearch: the HTTP status and the root cause's type and reason
// from the JSON error body. It matches ErrIndexMissing for index_not_found_exception and ErrUnavailable for
// 429, 502, 503 and 504 under errors.Is.
type ResponseError struct {
	// Status is the HTTP status code of the response.
	Status int
	// Type is the Elasticsearch exception type, e.g. "index_not_found_exception"; empty if the body had none.
	Type string
	// Reason is Elasticsearch's human-readable reason; empty if the body had none.
	Reason string
	// Authenticate holds the WWW-Authenticate values of a 401 (the schemes a secured cluster accepts), to
	// be passed on to a caller whose own credentials were forwarded (WithCallerAuth). Nil otherwise.
	Authenticate []string
}

// Error implements error.
func (e *ResponseError) Error() string {
	if e.Type == "" {
		return fmt.Sprintf("elasticsearch: %d %s", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("elasticsearch: %d %s: %s", e.Status, e.Type, e.Reason)
}

// Is reports whether the response is one of the conditions named by the package's sentinel errors.
func (e *ResponseError) Is(target error) bool {
	switch target {
	case ErrIndexMissing:
		return e.Type == "index_not_found_exception"
	case ErrUnavailable:
		return retryable(e.Status)
	}
	return false
}

// MappingError describes one field of the index mapping that differs from what the package needs.
type MappingError struct {
	// Field is the dotted field path, e.g. "title.keyword".
	Field string
	// Problem says what is wrong, e.g. `type is "keyword", want "text"` or "missing".
	Problem string
}

// Error implements error.
func (e *MappingError) Error() string {
	return fmt.Sprintf("field %q: %s", e.Field, e.Problem)
}

// Unwrap makes every MappingError match ErrMappingMismatch.
func (e *MappingError) Unwrap() error { return ErrMappingMismatch }

// retryable reports whether an HTTP status means "try again later" rather than "this request is wrong".
func retryable(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}
