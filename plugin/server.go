package plugin

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sony/gobreaker/v2"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/internal/compress"
	"github.com/icicle-search/sidecar/internal/gate"
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
	// RawSearch forwards a search to /{index}/_search with the query string and body unchanged and returns
	// Elasticsearch's status, headers and body, error statuses included; err is set only when no answer
	// came (wrapping adapter.ErrUnavailable, or the context's error). The drop-in /{index}/_search uses it.
	RawSearch(ctx context.Context, index string, query url.Values, body []byte) (int, http.Header, []byte, error)
	// Index is the index Resolve reads: the _index of the parametric hits the drop-in inserts.
	Index() string
}

// Ingester is what POST /v1/ingest needs from Elasticsearch (*adapter.Adapter satisfies it).
type Ingester interface {
	// Ingest bulk-writes docs, replacing documents with the same docid, and accounts for every document it
	// drew: written (Indexed, Updated) or in Failed. The error is for the run as a whole: it wraps
	// adapter.ErrUnavailable for an outage, or is the context's error; the report is valid alongside it.
	Ingest(ctx context.Context, docs iter.Seq[adapter.Doc], opts adapter.IngestOptions) (adapter.IngestReport, error)
}

// Reranker is what the handlers need from the model.
type Reranker interface {
	// Rank runs the routed decode over the candidates (BM25 order).
	Rank(ctx context.Context, query string, cands []inference.Candidate, opts inference.Options) (inference.Result, error)
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

// Options configure the server; cmd/icicle fills them from config.
type Options struct {
	MaxBodyBytes     int64
	RequestTimeout   time.Duration
	ESBudgetFraction float64
	MaxQueryChars    int
	MaxHits          int
	MaxCandidates    int
	Decode           inference.Options
	// MaxInflight and QueueSize bound concurrent model calls; a request finding no room is shed to BM25.
	MaxInflight, QueueSize int
	// Breaker settings: ConsecutiveFailures open it, OpenTimeout until half-open, HalfOpenMaxRequests
	// trial requests, Interval clears the closed counts.
	ConsecutiveFailures  int
	OpenTimeout          time.Duration
	HalfOpenMaxRequests  int
	BreakerCountInterval time.Duration
	// Policy is "model" (the model's ranking; the plugin's default when empty, while cmd/icicle passes
	// config's policy.mode, default "gate"), "fusion" (reciprocal rank fusion of the model's ranking and
	// BM25, constant FusionK), "gate" (BM25's order unless the model's gate promotes the
	// model's top; mode "gated") or "bm25" (never call the model; mode "bm25"). BM25 is always over the
	// whole index on /v1/search, the caller's hits on /v1/rerank.
	Policy  string
	FusionK int
	// Gate is the gate of a model that is not a *Swapper (a Swapper carries its model's); nil never
	// overrides BM25.
	Gate *gate.Gate
	// MinCopyProb and MinTopScore make the response fall back to BM25 on doubt.
	MinCopyProb float64
	MinTopScore float64
	Model       ModelInfo
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
	// AB is the A/B experiment on /v1/search (ab.go, docs/ab.md); the zero value is off.
	AB ABOptions
	// Impressions, when set, receives one line per /v1/search answer; the caller closes it after the
	// HTTP server has drained.
	Impressions *ImpressionLog
	// AdminToken enables POST /v1/admin/model (hot swap; the model must be a *Swapper) for requests
	// with "Authorization: Bearer <AdminToken>"; "" leaves the endpoint off (404).
	AdminToken string
	Logger     *slog.Logger
	// Registry receives the metrics; nil creates a private one.
	Registry *prometheus.Registry
}

// Server serves the sidecar API.
type Server struct {
	es      Searcher
	model   Reranker
	opts    Options
	log     *slog.Logger
	breaker *gobreaker.CircuitBreaker[inference.Result]
	slots   chan struct{}
	metrics *metrics
	router  *gin.Engine
	seen    seenDiffState
}

// New builds the server and its routes.
func New(es Searcher, model Reranker, opts Options) *Server {
	opts.MaxCandidates = cmp.Or(opts.MaxCandidates, 100)
	opts.Decode.BeamWidth = cmp.Or(opts.Decode.BeamWidth, 10)
	opts.MaxInflight = cmp.Or(opts.MaxInflight, 2)
	opts.ConsecutiveFailures = cmp.Or(opts.ConsecutiveFailures, 5)
	opts.HalfOpenMaxRequests = cmp.Or(opts.HalfOpenMaxRequests, 1)
	opts.Policy = cmp.Or(opts.Policy, "model")
	opts.FusionK = cmp.Or(opts.FusionK, 60)
	opts.SeenDiffInterval = cmp.Or(opts.SeenDiffInterval, 5*time.Minute)
	opts.AB = opts.AB.withDefaults()
	s := &Server{es: es, model: model, opts: opts, log: opts.Logger, slots: make(chan struct{}, opts.MaxInflight+opts.QueueSize)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	s.metrics = newMetrics(reg)
	if opts.Impressions != nil {
		watchImpressions(reg, opts.Impressions)
	}
	s.breaker = gobreaker.NewCircuitBreaker[inference.Result](gobreaker.Settings{
		Name:        "model",
		MaxRequests: uint32(opts.HalfOpenMaxRequests),
		Interval:    opts.BreakerCountInterval,
		Timeout:     opts.OpenTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= uint32(opts.ConsecutiveFailures) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			s.log.Warn("model breaker state changed", "from", from.String(), "to", to.String())
			s.metrics.breakerState.Set(float64(to))
		},
		// A client that went away says nothing about the model's health.
		// A prompt that cannot fit the model's context is the request's size, not the model's fault.
		IsSuccessful: func(err error) bool {
			return err == nil || errors.Is(err, context.Canceled) || errors.Is(err, inference.ErrContextFull)
		},
	})

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(s.recoverer, s.requestID)
	r.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	r.GET("/readyz", s.ready)
	r.GET("/v1/model", func(c *gin.Context) { c.JSON(http.StatusOK, s.modelInfo()) })
	if _, swappable := model.(*Swapper); swappable && opts.AdminToken != "" {
		r.POST("/v1/admin/model", s.adminAuth, s.adminModel)
	}
	r.POST("/v1/rerank", s.rerank)
	r.POST("/v1/search", s.search)
	r.POST("/v1/ingest", s.ingest)
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	r.GET("/openapi.yaml", serveOpenAPI)
	// Elasticsearch's search API (dropin.go). gin matches static segments before the :index parameter, so
	// /v1/... and the other routes keep their handlers; only <one segment>/_search reaches the drop-in.
	r.GET("/:index/_search", s.dropin)
	r.POST("/:index/_search", s.dropin)
	s.router = r
	s.refreshSeenDiff() // in the background, so the first readiness probes usually have it
	return s
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.router }

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
	model := s.modelInfo() // the current one: a hot swap changes the seen corpus
	body := gin.H{"ready": true, "model": model.Name, "breaker": s.breaker.State().String()}
	diffBody, diff := s.seenDiffBody(model)
	if diffBody != nil {
		body["seen_diff"] = diffBody
	}
	if n, err := s.es.SeenCount(ctx); err == nil {
		body["index_seen"], body["model_seen"] = n, model.SeenDocIDs
		// Equal counts can hide different sets; the diff (at most SeenDiffInterval old) tells them apart.
		body["seen_consistent"] = n == model.SeenDocIDs && (diff == nil || diff.Consistent())
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
