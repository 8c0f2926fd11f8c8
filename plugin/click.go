package plugin

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/icicle-search/sidecar/internal/abtest"
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

// ClickResponse is the body of a 202 from POST /v1/click.
type ClickResponse struct {
	RequestID    string `json:"request_id"`
	ImpressionID string `json:"impression_id,omitempty"`
	Logged       bool   `json:"logged"`
}

// Limits of a click's fields.
const (
	maxClickPosition = 100 // /v1/search answers at most 100 results
	maxDocIDChars    = 1024
	maxRequestIDLen  = 64 // as the X-Request-ID header the sidecar keeps
)

// click serves POST /v1/click (behind writeAuth): it validates the click and appends it to the click log.
// The sidecar does not look the impression up: the log is joined offline (icicle ab-report), where a click
// on an impression that is not in the impression log is counted, not lost.
func (s *Server) click(c *gin.Context) (answer, error) {
	start := time.Now()
	var req ClickRequest
	if err := s.decode(c, &req); err != nil {
		return answer{}, err
	}
	if err := checkClick(req); err != nil {
		return answer{}, err
	}
	rid := requestID(c)
	ok := s.opts.Clicks.Log(abtest.Click{Time: start.UTC(), ImpressionID: req.ImpressionID, RequestID: req.RequestID,
		DocID: req.DocID, Position: *req.Position, ClickRequestID: rid})
	if !ok {
		return answer{}, fmt.Errorf("log click: %w", ErrLogFull)
	}
	return answer{status: http.StatusAccepted, body: ClickResponse{RequestID: rid, ImpressionID: req.ImpressionID, Logged: true}, mode: "logged"}, nil
}

// checkClick validates a click's fields, naming the first bad one.
func checkClick(req ClickRequest) error {
	switch {
	case req.ImpressionID == "" && req.RequestID == "":
		return &InputError{Field: "impression_id", Problem: "required (the impression_id of the /v1/search answer; or request_id when your request ids are unique)"}
	case req.ImpressionID != "" && !abtest.IsImpressionID(req.ImpressionID):
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

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
