package plugin

import (
	"encoding/json"

	"github.com/icicle-search/sidecar/internal/gate"
)

// Mode says how a response was ranked.
type Mode string

const (
	// ModeReranked is the model's ranking.
	ModeReranked Mode = "reranked"
	// ModeFused is a reciprocal rank fusion of the model's ranking and the first stage's.
	ModeFused Mode = "fused"
	// ModeFirstStageFallback is the first stage's order, because the model failed, was too slow, was shed or
	// was doubted (Response.FallbackReason says which).
	ModeFirstStageFallback Mode = "first_stage_fallback"
	// ModeFirstStage is the first stage's order because no model is configured or the policy asked for it
	// (Response.ModelSkipped says which).
	ModeFirstStage Mode = "first_stage"
	// ModeBM25 is BM25's own order: arm A of the A/B experiment.
	ModeBM25 Mode = "bm25"
	// ModeGated is the first stage's order, with the model's top moved to rank 1 when the gate promoted it
	// (policy gate; Response.Gate says what it decided and why).
	ModeGated Mode = "gated"
)

// Why a response did not run the model (Response.ModelSkipped).
const (
	// SkipNoModel: the sidecar serves no reader (model.dir is empty).
	SkipNoModel = "no_model"
	// SkipPolicy: the request or policy.mode asked for the first stage alone.
	SkipPolicy = "policy"
	// SkipGateNever: policy gate, and the model's gate never promotes, so its answer could not change the order.
	SkipGateNever = "gate_never"
)

// Gate decisions (GateReport.Decision).
const (
	// GatePromote: the model's top was moved to rank 1, the rest in the first stage's order.
	GatePromote = "promote_model"
	// GateKeep: the first stage's order was kept.
	GateKeep = "keep_first_stage"
)

// Provenance says where one result came from.
type Provenance string

const (
	// FromCopy is a context hit the model copied after [COPY].
	FromCopy Provenance = "copy"
	// FromParametric is a seen-corpus document the model generated from memory.
	FromParametric Provenance = "parametric"
	// FromBM25 is a hit placed by its BM25 rank (the first stage was BM25 alone, or arm A of the A/B
	// experiment).
	FromBM25 Provenance = "bm25"
	// FromFirstStage is a hit placed by its rank in the first stage: BM25 and the dense encoder fused.
	FromFirstStage Provenance = "first_stage"
)

// ESHit is one hit as Elasticsearch returns it in hits.hits.
type ESHit struct {
	ID     string          `json:"_id"`
	Index  string          `json:"_index,omitempty"`
	Score  *float64        `json:"_score"`
	Source json.RawMessage `json:"_source"`
}

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
	// FirstStageRank is the 1-based rank in the first stage's ranking (the baseline), absent for a document
	// it did not return.
	FirstStageRank *int `json:"first_stage_rank,omitempty"`
	// BM25Score and DenseScore are the document's BM25 score and the cosine of its vector with the query's,
	// when the first stage has them.
	BM25Score  *float64 `json:"bm25_score,omitempty"`
	DenseScore *float64 `json:"dense_score,omitempty"`
	// Resolved is false when a parametric docid could not be found in Elasticsearch.
	Resolved bool `json:"resolved"`
	// Team is the A/B interleaving team that placed the result (A: BM25 over all documents, B: ICICLE);
	// absent outside interleaving.
	Team Team `json:"team,omitempty"`
}

// Timings are the stages of one request, in milliseconds.
type Timings struct {
	ES float64 `json:"es_ms"`
	// Embed is the first stage's query embedding, which runs beside Elasticsearch's BM25 searches (so it
	// is not added to es_ms); absent without an encoder.
	Embed float64 `json:"embed_ms,omitempty"`
	Model float64 `json:"model_ms"`
	// Prefill and Decode split the model's own Runs when it answered (absent otherwise): the prompt's Runs
	// (with block reading: placing the stored blocks and the query's Run) and the Runs after it (the copy
	// route's further chunks, the parametric beams). model_ms less the two is admission, the prompt's
	// tokens and the engine's own work.
	Prefill *float64 `json:"prefill_ms,omitempty"`
	Decode  *float64 `json:"decode_ms,omitempty"`
	Total   float64  `json:"total_ms"`
}

// Baseline says which first stage ranked the answer's baseline.
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

// Response is the body of a successful /v1/rerank or /v1/search.
type Response struct {
	RequestID string `json:"request_id"`
	Mode      Mode   `json:"mode"`
	// FallbackReason says why Mode is first_stage_fallback: model_error, model_timeout, breaker_open,
	// overloaded, low_confidence, context_full (the query alone does not fit the model's prompt budget),
	// context_unavailable, nothing_to_rank.
	FallbackReason string `json:"fallback_reason,omitempty"`
	// ModelSkipped says why the model was not run although nothing failed: no_model (none is configured),
	// policy (first_stage was asked for) or gate_never (its gate never promotes). Absent when the model ran
	// or FallbackReason says why it did not answer.
	ModelSkipped string `json:"model_skipped,omitempty"`
	// HitsReceived is the number of first-stage hits the ranking started from.
	HitsReceived int `json:"hits_received"`
	// Baseline says which first stage ranked the baseline (the order of first_stage, first_stage_fallback and
	// gated answers).
	Baseline *Baseline `json:"baseline,omitempty"`
	// CandidatesInContext is how many of them were in the model's prompt.
	CandidatesInContext int `json:"candidates_in_context"`
	// Context lists the docids of the candidates in the model's prompt, in prompt order (the first stage's
	// top new documents that fitted); absent when the model did not run.
	Context []string `json:"context,omitempty"`
	// CandidatesTruncated is true when hits beyond decode.max_candidates never reached the model.
	CandidatesTruncated bool `json:"candidates_truncated,omitempty"`
	// TitleOnlyCandidates counts hits that went in by title alone: without a summary, or past
	// experimental.summary_candidates.
	TitleOnlyCandidates int `json:"title_only_candidates,omitempty"`
	// Snippets counts the candidates that went in with the passage best matching the query instead of their
	// stored summary (experimental.snippet_chars).
	Snippets int `json:"snippets,omitempty"`
	// RouterProb is p([COPY]) at the first decoding step; absent when the model did not run.
	RouterProb *float64 `json:"router_prob,omitempty"`
	// Rerouted is true when experimental.route_by_first_stage put the model's other route's answer first: the
	// first stage ranks it above the router's choice.
	Rerouted bool     `json:"rerouted,omitempty"`
	Results  []Result `json:"results"`
	Timings  Timings  `json:"timings"`
	Model    string   `json:"model,omitempty"`
	// AB says which arm of the A/B experiment answered; absent when the experiment is off.
	AB *ABInfo `json:"ab,omitempty"`

	// ImpressionID is this answer's own random id in the impression log (/v1/search with ab.impression_log
	// set; also the X-ICICLE-Impression-ID header): what POST /v1/click names. Absent otherwise. Issue 14b.
	ImpressionID string `json:"impression_id,omitempty"`
	// Gate says what the gate decided and why (mode gated).
	Gate *GateReport `json:"gate,omitempty"`
}

// GateReport is the gate section of a response: what the gate decided on this query and from what.
type GateReport struct {
	// Decision is GatePromote or GateKeep.
	Decision string `json:"decision"`
	// Reason says why, in a few words.
	Reason string `json:"reason"`
	// P is the gate's probability that promoting the model's top is right; Threshold the least P that
	// promotes; Never is true when the model's gate never promotes (no gate.json, or no gain found).
	P         float64 `json:"p"`
	Threshold float64 `json:"threshold"`
	Never     bool    `json:"never,omitempty"`
	// ModelTop and FirstStageTop are the model's and the first stage's first docids (what icicle calibrate
	// labels). ModelTop is absent when the model was not run (Reason ReasonGateIdle: the gate never promotes).
	ModelTop      string `json:"model_top,omitempty"`
	FirstStageTop string `json:"first_stage_top,omitempty"`
	// Features are the gate's inputs; absent when the model was not run.
	Features gate.Features `json:"features,omitzero"`
}

// ABInfo is the A/B section of a /v1/search response (docs/ab.md).
type ABInfo struct {
	// Arm is A (BM25 over all documents), B (the sidecar's policy) or interleaved (each result has a team).
	Arm Arm `json:"arm"`
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
