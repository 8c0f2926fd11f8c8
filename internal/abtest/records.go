package abtest

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/icicle-search/sidecar/rank"
)

// The lines of the two logs (docs/ab.md): the sidecar writes them (ImpressionLog, ClickLog) and ab-report
// reads them (ReadJSONL, Analyse).

// Impression is one line of the impression log: what one /v1/search answer showed and why, so that
// clicks (POST /v1/click) can be joined on ImpressionID.
type Impression struct {
	// Time is when the answer was sent (RFC 3339, UTC).
	Time time.Time `json:"ts"`
	// ImpressionID is the answer's own random id (NewImpressionID; the response's impression_id and
	// X-ICICLE-Impression-ID header): unique per answer even when a client reuses a request id.
	ImpressionID string `json:"impression_id"`
	// RequestID is the response's request_id (and X-Request-ID header), which the client may choose.
	RequestID string `json:"request_id"`
	// Experiment is ab.experiment; empty when the experiment is off.
	Experiment string `json:"experiment,omitempty"`
	// KeyHash is a pseudonym of the assignment key (Assignment.KeyHash), never the key itself. Empty when
	// the experiment is off.
	KeyHash string `json:"key_hash,omitempty"`
	// KeySource says where the key came from: KeyFromHeader or KeyFromRequestID.
	KeySource string `json:"key_source,omitempty"`
	// Arm is A, B or interleaved; empty when the experiment is off.
	Arm Arm `json:"arm,omitempty"`
	// Mode and FallbackReason are the response's.
	Mode           rank.Mode `json:"mode"`
	FallbackReason string    `json:"fallback_reason,omitempty"`
	// Model is the model that served the answer; empty for arm A.
	Model string `json:"model,omitempty"`
	// Shown are the results, in the order shown.
	Shown []Shown `json:"shown"`
}

// Shown is one result of an impression.
type Shown struct {
	Rank       int             `json:"rank"`
	DocID      string          `json:"docid"`
	ID         string          `json:"id,omitempty"`
	Provenance rank.Provenance `json:"provenance"`
	// Team is the interleaving team that placed the result; empty outside interleaving.
	Team Team `json:"team,omitempty"`
}

// NewImpression describes the answer resp, sent at now with its impression id and request id, for the
// impression log; a is the request's assignment, nil when the experiment is off.
func NewImpression(now time.Time, impressionID, requestID string, resp rank.Response, a *Assignment) Impression {
	imp := Impression{Time: now.UTC(), ImpressionID: impressionID, RequestID: requestID, Mode: resp.Mode, FallbackReason: resp.FallbackReason,
		Model: resp.Model, Shown: make([]Shown, len(resp.Results))}
	if a != nil {
		imp.Experiment, imp.KeyHash, imp.KeySource, imp.Arm = a.Experiment, a.KeyHash(), a.KeySource, a.Arm
	}
	for i, r := range resp.Results {
		imp.Shown[i] = Shown{Rank: r.Rank, DocID: r.DocID, ID: r.ID, Provenance: r.Provenance, Team: Team(r.Team)}
	}
	return imp
}

// NewImpressionID returns 128 random bits in 32 lowercase hex digits: unique without coordination
// between replicas.
func NewImpressionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on the platforms Go supports
	return hex.EncodeToString(b[:])
}

// IsImpressionID reports whether id has the form NewImpressionID gives: 32 lowercase hex digits.
func IsImpressionID(id string) bool {
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

// Click is one line of the click log: a click on a result of a /v1/search answer, as POST /v1/click
// received it.
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
	// ClickRequestID is the request id of the POST /v1/click itself, to find it in the server's log; empty
	// for a click Simulate drew.
	ClickRequestID string `json:"click_request_id,omitempty"`
}
