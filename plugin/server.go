package plugin

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/dropin"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/internal/abtest"
	"github.com/icicle-search/sidecar/internal/compress"
	"github.com/icicle-search/sidecar/internal/gate"
	"github.com/icicle-search/sidecar/rank"
)

// Searcher is what the handlers need from Elasticsearch.
type Searcher interface {
	// SearchNew returns the BM25 top k over new (unseen) documents, with title and summary.
	SearchNew(ctx context.Context, query string, k int) ([]adapter.Hit, error)
	// SearchAll returns the BM25 top k over all documents: arm A of the A/B experiment.
	SearchAll(ctx context.Context, query string, k int) ([]adapter.Hit, error)
	// Resolve finds the documents of docids (titles) in one request; missing ones are absent.
	Resolve(ctx context.Context, docids []string) (map[string]adapter.Hit, error)
	// Check reports the cluster's version and whether the index is usable.
	Check(ctx context.Context) (adapter.ClusterInfo, error)
	// SeenCount counts the documents marked seen (the model's trained corpus) in the index.
	SeenCount(ctx context.Context) (int, error)
	// SeenDiff lists the index's seen documents and compares them with the model's seen corpus: exact
	// counts of the docids missing on each side, with the first few of each. It reads every seen docid
	// (seconds for 100K), so /readyz runs it in the background and shows the last result (seendiff.go).
	SeenDiff(ctx context.Context, modelSeen []string) (adapter.SeenDiff, error)
	// Raw, IndexNames and Index serve the drop-in (dropin.Cluster); Index is also the index Resolve reads.
	dropin.Cluster
	// Snippets replaces each hit's Summary by the passage of its body that best matches the query, about chars
	// characters (Elasticsearch's highlighter): the model's context under experimental.snippet_chars.
	Snippets(ctx context.Context, query string, hits []adapter.Hit, chars int) error
}

// Ingester is what POST /v1/ingest needs from Elasticsearch (*adapter.Adapter satisfies it).
type Ingester interface {
	// Ingest bulk-writes docs, replacing documents with the same docid, and accounts for every document it
	// drew: written (Indexed, Updated) or in Failed. The error is for the run as a whole: it wraps
	// adapter.ErrUnavailable for an outage, or is the context's error; the report is valid alongside it.
	Ingest(ctx context.Context, docs iter.Seq[adapter.Doc], opts adapter.IngestOptions) (adapter.IngestReport, error)
}

// ModelInfo describes the loaded model for /v1/model and the responses.
type ModelInfo struct {
	Name         string `json:"name"`
	Config       string `json:"config"`
	Backbone     string `json:"backbone"`
	ModelVersion string `json:"model_version"`
	DataVersion  string `json:"data_version"`
	SeenDocIDs   int    `json:"seen_docids"`
	Dir          string `json:"dir"`
	// Gate describes the model's gate (policy gate); absent when the caller did not say.
	Gate *GateInfo `json:"gate,omitempty"`
	// Serving lists the settings that shape the model's answer ("experimental.scoring": "vocab", ...): what
	// `icicle calibrate` records in the gate it fits, and a gate fitted under others is not applied. Absent
	// when the caller did not say. (A pointer keeps ModelInfo comparable: the seen-corpus diff is kept per
	// loaded model.)
	Serving *Settings `json:"serving,omitempty"`
	// Run is how the model runs on this machine, measured when it was loaded; absent when the caller did
	// not say.
	Run *RunInfo `json:"run,omitempty"`
	// Blocks is the block store's state when the model reads by blocks (experimental.block_reading), read at
	// request time from BlockStore; absent otherwise.
	Blocks *BlocksInfo `json:"blocks,omitempty"`
	// BlockStore and BlockLayout are the model's block store and layout; nil without block reading.
	BlockStore  *inference.BlockStore `json:"-"`
	BlockLayout string                `json:"-"`
}

// Settings are configuration settings by their YAML path ("experimental.scoring") with their values as text.
type Settings map[string]string

// BlocksInfo describes the block store of a model that reads by blocks (inference/blocks.go): its layout
// and what it holds and served since the model was loaded (each model has its own, empty at load).
type BlocksInfo struct {
	Layout string `json:"layout"`
	inference.BlockStoreStats
}

// withBlocks returns i with Blocks read from its store now.
func (i ModelInfo) withBlocks() ModelInfo {
	if i.BlockStore != nil {
		i.Blocks = &BlocksInfo{Layout: i.BlockLayout, BlockStoreStats: i.BlockStore.Stats()}
	}
	return i
}

// RunInfo says how a model runs: its sessions and threads (chosen how), and what one full-size run cost
// alone when it was loaded (inference.Engine.WarmUp), which seeds the cost model of the admission control.
type RunInfo struct {
	// Sessions is how many requests the model decodes at once; IntraOpThreads the threads of each.
	Sessions       int `json:"sessions"`
	IntraOpThreads int `json:"intra_op_threads"`
	// Chosen says how: "configured", or the automatic rule and what it measured.
	Chosen string `json:"chosen"`
	// WarmPromptTokens and WarmRunMS are the warm-up run's prompt length and time, alone on the machine.
	WarmPromptTokens int     `json:"warm_prompt_tokens"`
	WarmRunMS        float64 `json:"warm_run_ms"`
}

// GateInfo describes a model's gate for /v1/model.
type GateInfo struct {
	// Source is the gate.json read, or says that the directory had none (the safe default).
	Source string `json:"source"`
	// Never is true when the gate never overrides BM25 (no gate.json, or the fit found no gain).
	Never bool `json:"never"`
	// Threshold is the least gate probability that promotes the model's top.
	Threshold float64 `json:"threshold"`
	// Fit is the calibration record of gate.json.
	Fit *gate.FitInfo `json:"fit,omitempty"`
}

// NewGateInfo describes g (nil: the default gate).
func NewGateInfo(g *gate.Gate) *GateInfo {
	if g == nil {
		g = gate.Default()
	}
	return &GateInfo{Source: g.Source, Never: g.Never, Threshold: g.Threshold, Fit: g.Fit}
}

// Options configure the server; cmd/icicle fills them from config. The ranking's own settings are the
// pipeline's (rank.Options, rank.GuardOptions).
type Options struct {
	MaxBodyBytes int64
	// RequestTimeout is the whole budget of a request (the handler's deadline).
	RequestTimeout time.Duration
	MaxQueryChars  int
	MaxHits        int
	// Fields name the _source fields read of a caller's hits (/v1/rerank, the drop-in): docid (or
	// adapter.IDField), title, summary. Default the sidecar's layout: docid, title, summary.
	Fields dropin.SourceFields
	// AllowPolicyOverride lets a request's "policy" ask for another policy than the pipeline's (config's
	// policy.allow_override); without it a request may ask only for that one or "first_stage".
	AllowPolicyOverride bool
	// Model describes the reader when it is not a *Swapper (which describes its own).
	Model ModelInfo
	// SeenDiffInterval is how long /readyz reuses a seen-corpus diff (Searcher.SeenDiff) before it starts
	// a new one in the background (default 5m; after a failure 30s at most).
	SeenDiffInterval time.Duration
	// Ingester serves POST /v1/ingest; nil disables the endpoint (404).
	Ingester Ingester
	// Compressor summarises the documents POST /v1/ingest receives without a summary; nil is
	// compress.Lead, the extractive default. It must be the compressor the model's training data used.
	Compressor compress.Compressor
	// CompressWorkers is how many documents Compressor summarises at once (documents are still written in
	// body order); 0 or 1 is one at a time.
	CompressWorkers int
	// Embed, when set, gives every document POST /v1/ingest writes the first stage's vector (the encoder
	// the sidecar searches with; adapter.IngestOptions.Embed), so that a document is found by meaning the
	// moment it is written. VectorModel names the encoder. Nil writes documents without vectors (BM25 alone
	// finds them until `icicle enrich` gives them one).
	Embed       func(ctx context.Context, docs []adapter.Doc) ([][]float32, error)
	VectorModel string
	// EmbedSlots is how many ingest requests may embed at once (default 1); another finds the encoder
	// saturated and is answered 503 with Retry-After at once, before its body is read.
	EmbedSlots int
	// AB is the A/B experiment on /v1/search (ab.go, docs/ab.md); the zero value is off.
	AB ABOptions
	// Impressions, when set, receives one line per /v1/search answer; the caller closes it after the
	// HTTP server has drained.
	Impressions *abtest.ImpressionLog
	// AdminToken enables POST /v1/admin/model (hot swap; the model must be a *Swapper) for requests
	// with "Authorization: Bearer <AdminToken>"; "" leaves the endpoint off (404).
	AdminToken string

	// Security (auth.go).

	// CallerCredentials is CallerPassthrough ("" too: the caller's own Authorization header goes to
	// Elasticsearch for the drop-in, /v1/search and /v1/rerank) or CallerService (the adapter's configured
	// credentials for every caller).
	CallerCredentials string
	// WriteToken enables POST /v1/ingest and POST /v1/click for requests with
	// "Authorization: Bearer <WriteToken>"; "" leaves the write endpoints off (404), whatever Ingester is.
	WriteToken string
	// SeparateAdmin serves the write and admin endpoints on AdminHandler only, not on Handler.
	SeparateAdmin bool
	// Clicks, when set, serves POST /v1/click (behind writeAuth) and receives the clicks; nil leaves the
	// endpoint off (404). The caller closes it after the HTTP server has drained.
	Clicks *abtest.ClickLog

	Logger *slog.Logger

	// TrustedProxies are the proxies (addresses or CIDR ranges) whose X-Forwarded-For names the client;
	// nil trusts none (config's server.trusted_proxies).
	TrustedProxies []string

	// The Elasticsearch drop-in (package dropin, dropin.go, docs/api.md).

	// AllowedIndices are the index and alias names the drop-in and /v1/search may address (exact names, no
	// patterns); empty: Searcher.IndexNames, resolved when first needed and on every /readyz.
	AllowedIndices []string
	// AllowScripts lets drop-in request bodies carry scripts (script, script_fields, runtime_mappings,
	// script_score, scripted_metric, ...); off, they are a 403.
	AllowScripts bool
	// RankWindowSize is how many of Elasticsearch's top hits a reranked drop-in search ranks when the request
	// sets no ext.icicle.rank_window_size (widened to the page size); 0 is dropin.DefaultRankWindowSize.
	RankWindowSize int

	// Profile names the reader profile the configuration was loaded with ("" for none), and Experimental
	// lists the experimental settings in force by key (config's experimental section): /v1/model shows both.
	Profile      string
	Experimental map[string]string

	// Registry receives the metrics; nil creates a private one.
	Registry *prometheus.Registry
	// MetricsPath is the URL path serving Registry in the Prometheus text format (default "/metrics");
	// MetricsOff serves none (the metrics are still collected).
	MetricsPath string
	MetricsOff  bool
}

// Server serves the sidecar API: the HTTP layer over a ranking pipeline (package rank).
type Server struct {
	es   Searcher
	pipe *rank.Pipeline
	// models is the swappable reader the pipeline reads with; nil when it has none, or a fixed one
	// (Options.Model describes it then).
	models *Swapper
	opts   Options
	log    *slog.Logger
	// embedSlots bounds the ingest requests embedding at once (Options.EmbedSlots).
	embedSlots chan struct{}
	metrics    *metrics
	router     *gin.Engine
	admin      *gin.Engine // the write and admin endpoints when Options.SeparateAdmin; else router
	seen       seenDiffState
	// dropin is Elasticsearch's API in front of the cluster (dropin.go).
	dropin *dropin.Proxy
	// arms answer /v1/search from the request's arm of the A/B experiment (ab.go).
	arms *abtest.Arms
}

// New builds the server and its routes over pipe. models is the reader pipe reads with when it can be
// swapped (POST /v1/admin/model, SIGHUP; nil otherwise). The pipeline's metrics must be registered on
// opts.Registry to be served.
func New(es Searcher, pipe *rank.Pipeline, models *Swapper, opts Options) *Server {
	opts.MetricsPath = cmp.Or(opts.MetricsPath, "/metrics")
	opts.RequestTimeout = cmp.Or(opts.RequestTimeout, 2*time.Second)
	opts.SeenDiffInterval = cmp.Or(opts.SeenDiffInterval, 5*time.Minute)
	opts.EmbedSlots = cmp.Or(opts.EmbedSlots, 1)
	opts.AB = opts.AB.withDefaults()
	opts.Fields = opts.Fields.WithDefaults()
	s := &Server{es: es, pipe: pipe, models: models, opts: opts, log: opts.Logger,
		embedSlots: make(chan struct{}, opts.EmbedSlots), arms: abtest.NewArms(es, pipe)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.dropin = dropin.New(es, pipe, dropin.Options{Fields: opts.Fields, MaxQueryChars: opts.MaxQueryChars,
		RankWindowSize: opts.RankWindowSize, AllowedIndices: opts.AllowedIndices, AllowScripts: opts.AllowScripts, Logger: s.log})
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	s.metrics = newMetrics(reg)
	s.watchBlocks(reg)
	if opts.Impressions != nil {
		watchImpressions(reg, opts.Impressions)
	}
	if opts.Clicks != nil {
		watchClicks(reg, opts.Clicks)
	}

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	// The client a log line names is the connection's peer unless it is a trusted proxy (validated by config).
	if err := r.SetTrustedProxies(opts.TrustedProxies); err != nil {
		s.log.Error("server.trusted_proxies: none trusted", "err", err)
		_ = r.SetTrustedProxies(nil)
	}
	r.Use(s.recoverer, s.requestID)
	r.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	r.GET("/readyz", s.ready)
	r.GET("/v1/model", s.api("", s.modelEndpoint))
	// Writes and admin (auth.go): behind their tokens, on their own listener with SeparateAdmin.
	admin := r
	if opts.SeparateAdmin {
		admin = gin.New()
		if err := admin.SetTrustedProxies(opts.TrustedProxies); err != nil {
			_ = admin.SetTrustedProxies(nil)
		}
		admin.Use(s.recoverer, s.requestID)
		admin.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	}
	s.admin = admin
	if models != nil && opts.AdminToken != "" {
		admin.POST("/v1/admin/model", s.adminAuth, s.api("admin_model", s.adminModel))
	}
	admin.POST("/v1/ingest", s.writeAuth, s.api("ingest", s.ingest))
	// Searches on the caller's behalf carry the caller's credentials (auth.go).
	r.POST("/v1/rerank", s.callerAuth, s.api("rerank", s.rerank))
	r.POST("/v1/search", s.callerAuth, s.api("search", s.search))
	// Clicks come from the callers' applications, so they stay on the public address, behind the write key.
	if opts.Clicks != nil {
		r.POST("/v1/click", s.writeAuth, s.api("click", s.click))
	}
	if !opts.MetricsOff {
		r.GET(opts.MetricsPath, gin.WrapH(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	}
	r.GET("/openapi.yaml", serveOpenAPI)
	// Elasticsearch's search API (dropin.go). gin matches static segments before the :index parameter, so
	// /v1/... and the other routes keep their handlers; only <one segment>/_search reaches the drop-in.
	dropinSearch := func(c *gin.Context) { s.dropinSearch(c, c.Param("index")) }
	r.GET("/:index/_search", s.callerAuth, dropinSearch)
	r.POST("/:index/_search", s.callerAuth, dropinSearch)
	// Everything else of Elasticsearch's read API is proxied, behind the allow-list (dropin.go), with the
	// caller's credentials (auth.go).
	r.NoRoute(s.callerAuth, s.proxy)
	s.router = r
	s.refreshSeenDiff() // in the background, so the first readiness probes usually have it
	return s
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.router }

// AdminHandler returns the handler of the write and admin endpoints: a handler of its own with
// Options.SeparateAdmin (for a second listener), else the same as Handler.
func (s *Server) AdminHandler() http.Handler { return s.admin }

// ready serves /readyz: 503 unless Elasticsearch answers and the index is usable. It also reports
// whether the index's seen documents match the model's seen corpus; a mismatch (an index ingested for
// another model) is reported and logged but does not make the sidecar unready, because parametric
// docids resolve by id whatever the flag says and only the choice of context candidates is affected.
func (s *Server) ready(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
	defer cancel()
	if _, err := s.es.Check(ctx); err != nil {
		s.log.Warn("not ready: elasticsearch", "err", err)
		c.JSON(http.StatusServiceUnavailable, gin.H{"ready": false, "elasticsearch": "unreachable or index unusable"})
		return
	}
	s.dropin.RefreshAllowList() // an alias added since the start is allowed from now on
	if !s.pipe.HasReader() {
		// No model: nothing to compare the index's seen documents with, no breaker in use.
		c.JSON(http.StatusOK, gin.H{"ready": true, "model": "none"})
		return
	}
	model := s.modelInfo() // the current one: a hot swap changes the seen corpus
	body := gin.H{"ready": true, "model": model.Name, "breaker": s.pipe.Guard().BreakerState()}
	if b := model.withBlocks().Blocks; b != nil {
		body["blocks"] = b
	}
	diffBody, diff := s.seenDiffBody(model)
	if diffBody != nil {
		body["seen_diff"] = diffBody
	}
	if n, err := s.es.SeenCount(ctx); err == nil {
		body["index_seen"], body["model_seen"] = n, model.SeenDocIDs
		// Equal counts can hide different sets; the diff (at most SeenDiffInterval old) tells them apart.
		// Until the first diff for the model serving now has finished (at start, and after a swap), equal
		// counts prove nothing: "pending". A model that does not know its seen corpus has only counts.
		_, _, diffable := s.servingSeen()
		switch {
		case n != model.SeenDocIDs:
			body["seen_consistent"] = false
		case diff != nil:
			body["seen_consistent"] = diff.Consistent()
		case diffable:
			body["seen_consistent"] = "pending"
		default:
			body["seen_consistent"] = true
		}
		if n != model.SeenDocIDs {
			s.log.Warn("seen corpus differs between the index and the model", "index_seen", n, "model_seen", model.SeenDocIDs)
		}
	}
	c.JSON(http.StatusOK, body)
}

func (s *Server) requestID(c *gin.Context) {
	id := c.GetHeader("X-Request-ID")
	if id == "" || len(id) > 64 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	c.Set("request_id", id)
	c.Header("X-Request-ID", id)
	c.Next()
}

func requestID(c *gin.Context) string { return c.GetString("request_id") }

// recoverer turns a panic in a handler into a logged 500, keeping the process alive.
func (s *Server) recoverer(c *gin.Context) {
	defer func() {
		if r := recover(); r != nil {
			writeError(c, s.log, fmt.Errorf("panic: %v", r))
			c.Abort()
		}
	}()
	c.Next()
}
