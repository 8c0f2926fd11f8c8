package plugin

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
)

// ErrLogFull is a click the click log could not take (its queue was full, or it is closing): 503, retry.
var ErrLogFull = errors.New("click log busy")

// ClickRequest is the body of POST /v1/click: the user clicked DocID, shown at Position, in the answer
// ImpressionID (or, when the client's request ids are unique, the answer to RequestID).
type ClickRequest struct {
	ImpressionID string `json:"impression_id"`
	RequestID    string `json:"request_id"`
	DocID        string `json:"docid"`
	Position     *int   `json:"position"`
}

// Click is one line of the click log (docs/ab.md): what ab-report joins with the impression log.
type Click struct {
	// Time is when the sidecar received the click (RFC 3339, UTC).
	Time time.Time `json:"ts"`
	// ImpressionID is the impression_id of the /v1/search answer clicked in; empty when the client named
	// the answer by RequestID only.
	ImpressionID string `json:"impression_id,omitempty"`
	// RequestID is the request id of the answer clicked in, when the client sent it.
	RequestID string `json:"request_id,omitempty"`
	// DocID is the clicked result's docid and Position its 1-based rank in the answer.
	DocID    string `json:"docid"`
	Position int    `json:"position"`
	// ClickRequestID is the request id of the POST /v1/click itself, to find it in the server's log.
	ClickRequestID string `json:"click_request_id"`
}

// ClickResponse is the body of a 202 from POST /v1/click.
type ClickResponse struct {
	RequestID    string `json:"request_id"`
	ImpressionID string `json:"impression_id,omitempty"`
	Logged       bool   `json:"logged"`
}

// ClickLog appends clicks to a JSONL file with the impression log's writer: a bounded queue, one writer
// goroutine, whole lines, rotation at MaxBytes. Safe for concurrent use.
type ClickLog struct{ w *ImpressionLog }

// OpenClickLog opens (creating, appending) the click log at path and starts its writer.
func OpenClickLog(path string, opts ImpressionLogOptions) (*ClickLog, error) {
	w, err := openJSONLog("click log", path, opts)
	if err != nil {
		return nil, err
	}
	go w.run()
	return &ClickLog{w: w}, nil
}

// Log queues c for writing without waiting; false when the queue is full or the log closed (counted).
func (l *ClickLog) Log(c Click) bool { return l.w.append(c) }

// Close writes what is queued and closes the file; idempotent, it returns the first write error.
func (l *ClickLog) Close() error { return l.w.Close() }

// Counts returns the click log's counters since it was opened.
func (l *ClickLog) Counts() ImpressionCounts { return l.w.Counts() }

// Limits of a click's fields.
const (
	maxClickPosition = 100 // /v1/search answers at most 100 results
	maxDocIDChars    = 1024
	maxRequestIDLen  = 64 // as the X-Request-ID header the sidecar keeps
)

// click serves POST /v1/click (behind writeAuth): it validates the click and appends it to the click log.
// The sidecar does not look the impression up: the log is joined offline (icicle ab-report), where a click
// on an impression that is not in the impression log is counted, not lost.
func (s *Server) click(c *gin.Context) {
	start := time.Now()
	var req ClickRequest
	if err := s.decode(c, &req); err != nil {
		s.fail(c, "click", err)
		return
	}
	if err := checkClick(req); err != nil {
		s.fail(c, "click", err)
		return
	}
	rid := requestID(c)
	ok := s.opts.Clicks.Log(Click{Time: start.UTC(), ImpressionID: req.ImpressionID, RequestID: req.RequestID,
		DocID: req.DocID, Position: *req.Position, ClickRequestID: rid})
	if !ok {
		s.fail(c, "click", fmt.Errorf("log click: %w", ErrLogFull))
		return
	}
	s.metrics.requests.WithLabelValues("click", "202", "logged").Inc()
	s.metrics.duration.WithLabelValues("click").Observe(time.Since(start).Seconds())
	c.JSON(http.StatusAccepted, ClickResponse{RequestID: rid, ImpressionID: req.ImpressionID, Logged: true})
}

// checkClick validates a click's fields, naming the first bad one.
func checkClick(req ClickRequest) error {
	switch {
	case req.ImpressionID == "" && req.RequestID == "":
		return &InputError{Field: "impression_id", Problem: "required (the impression_id of the /v1/search answer; or request_id when your request ids are unique)"}
	case req.ImpressionID != "" && !isImpressionID(req.ImpressionID):
		return &InputError{Field: "impression_id", Problem: fmt.Sprintf("want 32 lowercase hex digits as /v1/search returned it, got %q", clip(req.ImpressionID, 80))}
	case len(req.RequestID) > maxRequestIDLen:
		return &InputError{Field: "request_id", Problem: fmt.Sprintf("%d bytes, at most %d", len(req.RequestID), maxRequestIDLen)}
	case req.ImpressionID == "" && strings.TrimSpace(req.RequestID) == "":
		return &InputError{Field: "request_id", Problem: "blank"}
	case strings.TrimSpace(req.DocID) == "":
		return &InputError{Field: "docid", Problem: "required"}
	case utf8.RuneCountInString(req.DocID) > maxDocIDChars:
		return &InputError{Field: "docid", Problem: fmt.Sprintf("%d characters, at most %d", utf8.RuneCountInString(req.DocID), maxDocIDChars)}
	case req.Position == nil:
		return &InputError{Field: "position", Problem: "required (the clicked result's 1-based rank)"}
	case *req.Position < 1 || *req.Position > maxClickPosition:
		return &InputError{Field: "position", Problem: fmt.Sprintf("%d outside 1..%d (the clicked result's 1-based rank)", *req.Position, maxClickPosition)}
	}
	return nil
}

func isImpressionID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, r := range id {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
