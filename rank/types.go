package rank

import (
	"time"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/internal/gate"
)

// Mode says how a response was ranked.
type Mode string

const (
	// ModeReranked is the reader's ranking (policy model).
	ModeReranked Mode = "reranked"
	// ModeFused is a reciprocal rank fusion of the reader's ranking and the first stage's (policy fusion).
	ModeFused Mode = "fused"
	// ModeFirstStageFallback is the first stage's order because the reader failed, was too slow, was shed or
	// was doubted (Response.FallbackReason says which).
	ModeFirstStageFallback Mode = "first_stage_fallback"
	// ModeFirstStage is the first stage's order because no reader is configured or the policy asked for it
	// (Response.ModelSkipped says which).
	ModeFirstStage Mode = "first_stage"
	// ModeBM25 is BM25's own order: arm A of the A/B experiment (the pipeline never answers it).
	ModeBM25 Mode = "bm25"
	// ModeGated is the first stage's order, with the reader's top moved to rank 1 when the gate promoted it
	// (policy gate; Response.Gate says what it decided and why).
	ModeGated Mode = "gated"
)

// Modes lists every mode an answer of the sidecar may have, for metrics that start at zero.
var Modes = []Mode{ModeGated, ModeReranked, ModeFused, ModeFirstStageFallback, ModeFirstStage, ModeBM25}

// Why a response did not run the reader although nothing failed (Response.ModelSkipped).
const (
	// SkipNoModel: no reader is configured (model.dir is empty).
	SkipNoModel = "no_model"
	// SkipPolicy: the request or policy.mode asked for the first stage alone.
	SkipPolicy = "policy"
	// SkipGateNever: policy gate, and the reader's gate never promotes, so its answer could not change the
	// order.
	SkipGateNever = "gate_never"
)

// Fallback reasons (Response.FallbackReason): the first stage's order answers, and says why.
const (
	// ReasonOverloaded: no reader session came free in time, the queue was full, or the run was predicted
	// not to end in time. Load, not a reader failure: the breaker does not count it.
	ReasonOverloaded = "overloaded"
	// ReasonBreakerOpen: the circuit breaker is open (or half-open with its trial requests taken).
	ReasonBreakerOpen = "breaker_open"
	// ReasonModelTimeout: a run that had started exceeded the request's budget.
	ReasonModelTimeout = "model_timeout"
	// ReasonModelError: the reader returned an error.
	ReasonModelError = "model_error"
	// ReasonContextFull: the prompt does not fit the reader's context (the request's size, not a failure).
	ReasonContextFull = "context_full"
	// ReasonLowConfidence: the reader answered below experimental.min_copy_prob or experimental.min_top_score.
	ReasonLowConfidence = "low_confidence"
	// ReasonContextUnavailable: the search of new documents (the reader's candidates) failed while the first
	// stage's ranking answered.
	ReasonContextUnavailable = "context_unavailable"
	// ReasonNothingToRank: the reader had nothing to answer from: no candidate and nothing it may recall.
	ReasonNothingToRank = "nothing_to_rank"
)

// FallbackReasons lists every fallback reason, for metrics that start at zero.
var FallbackReasons = []string{ReasonOverloaded, ReasonBreakerOpen, ReasonModelTimeout, ReasonModelError,
	ReasonContextFull, ReasonLowConfidence, ReasonContextUnavailable, ReasonNothingToRank}

// Gate decisions (GateReport.Decision).
const (
	// GatePromote: the reader's top was moved to rank 1, the rest in the first stage's order.
	GatePromote = "promote_model"
	// GateKeep: the first stage's order was kept.
	GateKeep = "keep_first_stage"
)

// ReasonGateIdle is a gate report's reason when the reader was not run: its gate never promotes.
const ReasonGateIdle = "the model's gate never promotes: the model is not run (experimental.run_model_when_gate_never)"

// Provenance says where one result came from.
type Provenance string

const (
	// FromCopy is a candidate the reader picked (the ICICLE reader's copy route, after [COPY]).
	FromCopy Provenance = "copy"
	// FromParametric is a document the reader named beyond its candidates (the ICICLE reader's memory route).
	FromParametric Provenance = "parametric"
	// FromBM25 is a hit placed by its BM25 rank (the first stage was BM25 alone, or arm A of the A/B
	// experiment).
	FromBM25 Provenance = "bm25"
	// FromFirstStage is a hit placed by its rank in the first stage: BM25 and the dense encoder fused.
	FromFirstStage Provenance = "first_stage"
)

// Result is one ranked document.
type Result struct {
	Rank       int        `json:"rank"`
	ID         string     `json:"id,omitempty"`
	DocID      string     `json:"docid"`
	Title      string     `json:"title"`
	Summary    string     `json:"summary,omitempty"`
	Score      float64    `json:"score"`
	Provenance Provenance `json:"provenance"`
	// BM25Rank is the 1-based rank among BM25's hits (the caller's hits on /v1/rerank), absent for a document
	// BM25 did not return (a parametric one, or one only the kNN search found).
	BM25Rank *int `json:"bm25_rank,omitempty"`
	// FirstStageRank is the 1-based rank in the first stage's ranking, absent for a document it did not return.
	FirstStageRank *int `json:"first_stage_rank,omitempty"`
	// BM25Score and DenseScore are the document's BM25 score and the cosine of its vector with the query's,
	// when the first stage has them.
	BM25Score  *float64 `json:"bm25_score,omitempty"`
	DenseScore *float64 `json:"dense_score,omitempty"`
	// Resolved is false when a parametric docid could not be found in Elasticsearch.
	Resolved bool `json:"resolved"`
	// Team is the A/B interleaving team that placed the result (A: BM25 over all documents, B: the sidecar);
	// absent outside interleaving (the pipeline leaves it empty).
	Team string `json:"team,omitempty"`
}

// Timings are the stages of one request, in milliseconds.
type Timings struct {
	ES float64 `json:"es_ms"`
	// Embed is the first stage's query embedding, which runs beside Elasticsearch's BM25 searches (so it is
	// not added to es_ms); absent without an encoder.
	Embed float64 `json:"embed_ms,omitempty"`
	Model float64 `json:"model_ms"`
	// Prefill and Decode split the reader's own Runs when it answered (absent otherwise).
	Prefill *float64 `json:"prefill_ms,omitempty"`
	Decode  *float64 `json:"decode_ms,omitempty"`
	Total   float64  `json:"total_ms"`
}

// Baseline says which first stage ranked the answer's order.
type Baseline struct {
	// Kind is "hybrid" (BM25 and the dense encoder fused) or "bm25" (BM25 alone).
	Kind string `json:"kind"`
	// Reason says why Kind is bm25 although an encoder is configured: encoder_error, dense_unavailable.
	Reason string `json:"reason,omitempty"`
	// Encoder names the dense encoder, absent without one.
	Encoder string `json:"encoder,omitempty"`
	// Method is the fusion (linear, rrf) of a hybrid baseline.
	Method string `json:"method,omitempty"`
}

// GateReport is what the gate decided on one query and from what.
type GateReport struct {
	// Decision is GatePromote or GateKeep.
	Decision string `json:"decision"`
	// Reason says why, in a few words.
	Reason string `json:"reason"`
	// P is the gate's probability that promoting the reader's top is right; Threshold the least P that
	// promotes; Never is true when the reader's gate never promotes (no gate.json, or no gain found).
	P         float64 `json:"p"`
	Threshold float64 `json:"threshold"`
	Never     bool    `json:"never,omitempty"`
	// ModelTop and FirstStageTop are the reader's and the first stage's first docids (what icicle calibrate
	// labels). ModelTop is absent when the reader was not run (Reason ReasonGateIdle).
	ModelTop      string `json:"model_top,omitempty"`
	FirstStageTop string `json:"first_stage_top,omitempty"`
	// Features are the gate's inputs; absent when the reader was not run.
	Features gate.Features `json:"features,omitzero"`
}

// Request is one query to rank.
type Request struct {
	// Query is the user's query text.
	Query string
	// Size is how many results to return; 0 is the reader's beam width. At most 100.
	Size int
	// Policy is the policy this request runs under (one of Policies; "" is the pipeline's own). The caller
	// decides whether a request may ask for another than the configured one.
	Policy string
	// Hits, when not nil, are the caller's hits (best first): the first stage re-scores them instead of
	// searching the whole index (/v1/rerank, the drop-in).
	Hits []adapter.Hit
	// Searched is the time the caller already spent in Elasticsearch for Hits (the drop-in's search),
	// counted in Timings.ES.
	Searched time.Duration
}

// Response is the ranking of one request.
type Response struct {
	Mode Mode `json:"mode"`
	// FallbackReason says why Mode is first_stage_fallback (the Reason* constants).
	FallbackReason string `json:"fallback_reason,omitempty"`
	// ModelSkipped says why the reader was not run although nothing failed (the Skip* constants).
	ModelSkipped string `json:"model_skipped,omitempty"`
	// HitsReceived is the number of first-stage hits the ranking started from.
	HitsReceived int `json:"hits_received"`
	// Baseline says which first stage ranked the order.
	Baseline *Baseline `json:"baseline,omitempty"`
	// CandidatesInContext is how many candidates the reader read.
	CandidatesInContext int `json:"candidates_in_context"`
	// Context lists the docids of the candidates the reader read, in order; absent when it did not run.
	Context []string `json:"context,omitempty"`
	// CandidatesTruncated is true when hits beyond decode.max_candidates never reached the reader.
	CandidatesTruncated bool `json:"candidates_truncated,omitempty"`
	// TitleOnlyCandidates counts candidates that went in by title alone.
	TitleOnlyCandidates int `json:"title_only_candidates,omitempty"`
	// Snippets counts the candidates that went in with the passage best matching the query.
	Snippets int `json:"snippets,omitempty"`
	// RouterProb is the reader's p([COPY]) at the first decoding step; absent when it did not run or has no
	// router.
	RouterProb *float64 `json:"router_prob,omitempty"`
	// Rerouted is true when experimental.route_by_first_stage put the reader's other route's answer first.
	Rerouted bool     `json:"rerouted,omitempty"`
	Results  []Result `json:"results"`
	Timings  Timings  `json:"timings"`
	Model    string   `json:"model,omitempty"`
	// Gate says what the gate decided and why (mode gated).
	Gate *GateReport `json:"gate,omitempty"`
}
