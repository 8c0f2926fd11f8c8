package plugin

import (
	"github.com/icicle-search/sidecar/dropin"
	"github.com/icicle-search/sidecar/internal/abtest"
	"github.com/icicle-search/sidecar/rank"
)

// The ranking's types are package rank's (the pipeline answers them); these names keep the API's
// vocabulary in one place for the handlers and the clients of this package.
type (
	// Mode says how a response was ranked (rank.Mode).
	Mode = rank.Mode
	// Provenance says where one result came from (rank.Provenance).
	Provenance = rank.Provenance
	// Result is one ranked document (rank.Result).
	Result = rank.Result
	// Timings are the stages of one request, in milliseconds (rank.Timings).
	Timings = rank.Timings
	// Baseline says which first stage ranked the answer's order (rank.Baseline).
	Baseline = rank.Baseline
	// GateReport is the gate section of a response (rank.GateReport).
	GateReport = rank.GateReport
)

// Modes, provenances, skip reasons and gate decisions: rank's.
const (
	ModeReranked           = rank.ModeReranked
	ModeFused              = rank.ModeFused
	ModeFirstStageFallback = rank.ModeFirstStageFallback
	ModeFirstStage         = rank.ModeFirstStage
	ModeBM25               = rank.ModeBM25
	ModeGated              = rank.ModeGated

	FromCopy       = rank.FromCopy
	FromParametric = rank.FromParametric
	FromBM25       = rank.FromBM25
	FromFirstStage = rank.FromFirstStage

	SkipNoModel   = rank.SkipNoModel
	SkipPolicy    = rank.SkipPolicy
	SkipGateNever = rank.SkipGateNever

	GatePromote = rank.GatePromote
	GateKeep    = rank.GateKeep

	PolicyFirstStage = rank.PolicyFirstStage
	PolicyGate       = rank.PolicyGate
	PolicyModel      = rank.PolicyModel
	PolicyFusion     = rank.PolicyFusion

	ReasonOverloaded         = rank.ReasonOverloaded
	ReasonBreakerOpen        = rank.ReasonBreakerOpen
	ReasonModelTimeout       = rank.ReasonModelTimeout
	ReasonModelError         = rank.ReasonModelError
	ReasonContextFull        = rank.ReasonContextFull
	ReasonLowConfidence      = rank.ReasonLowConfidence
	ReasonContextUnavailable = rank.ReasonContextUnavailable
	ReasonNothingToRank      = rank.ReasonNothingToRank
	ReasonGateIdle           = rank.ReasonGateIdle
)

// ESHit is one hit as Elasticsearch returns it in hits.hits (dropin.ESHit): what /v1/rerank reads.
type ESHit = dropin.ESHit

// HitSource is the part of _source the sidecar reads. Title is the docid.
type HitSource struct {
	Title   *string `json:"title"`
	Summary *string `json:"summary"`
	DocID   *string `json:"docid"`
}

// RerankRequest is the body of POST /v1/rerank.
type RerankRequest struct {
	// Query is the user's query text.
	Query string `json:"query"`
	// Hits are the caller's hits, best first, as Elasticsearch returned them: re-scored by the first stage,
	// they are the model's context and the order of policy gate, first_stage and every fallback.
	Hits []ESHit `json:"hits"`
	// Size is how many results to return (default: the beam width).
	Size int `json:"size"`
	// Policy overrides policy.mode for this request: first_stage (the first stage alone, the model not
	// called; "bm25" is its former name), gate, model or fusion. Default "": the configured one. A request may
	// ask for first_stage or the configured policy; others need policy.allow_override. `icicle eval` asks for
	// first_stage to measure the first stage on the same queries as the sidecar.
	Policy string `json:"policy,omitempty"`
}

// SearchRequest is the body of POST /v1/search.
type SearchRequest struct {
	// Query is the user's query text.
	Query string `json:"query"`
	// Size is how many results to return (default: the beam width).
	Size int `json:"size"`
	// Policy overrides policy.mode for this request (RerankRequest.Policy). With the A/B experiment on, it
	// applies to arm B's answers; arm A stays BM25 alone.
	Policy string `json:"policy,omitempty"`
}

// Response is the body of a successful /v1/rerank or /v1/search: the pipeline's ranking (rank.Response)
// with what the HTTP layer adds.
type Response struct {
	RequestID string `json:"request_id"`
	rank.Response
	// AB says which arm of the A/B experiment answered; absent when the experiment is off.
	AB *ABInfo `json:"ab,omitempty"`
	// ImpressionID is this answer's own random id in the impression log (/v1/search with ab.impression_log
	// set; also the X-ICICLE-Impression-ID header): what POST /v1/click names. Absent otherwise.
	ImpressionID string `json:"impression_id,omitempty"`
}

// ABInfo is the A/B section of a /v1/search response (docs/ab.md).
type ABInfo struct {
	// Arm is A (BM25 over all documents), B (the sidecar's policy) or interleaved (each result has a team).
	Arm abtest.Arm `json:"arm"`
	// Experiment is ab.experiment.
	Experiment string `json:"experiment"`
	// KeySource is "header" (the key header was sent) or "request_id" (it was not: assigned per request).
	KeySource string `json:"key_source"`
}

// ErrorBody is the body of every non-2xx response.
type ErrorBody struct {
	Error     string `json:"error"`
	Field     string `json:"field,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}
