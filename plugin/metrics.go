package plugin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/retrieve"
)

type metrics struct {
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	stage        *prometheus.HistogramVec
	routes       *prometheus.CounterVec
	fallbacks    *prometheus.CounterVec
	inContext    prometheus.Histogram
	breakerState prometheus.Gauge
	abArms       *prometheus.CounterVec
	interleaved  *prometheus.CounterVec
	swaps        *prometheus.CounterVec

	// Admission (admission.go): requests waiting for a model session and running it, how long they
	// waited, and the breaker's state changes.
	queued             prometheus.Gauge
	running            prometheus.Gauge
	queueWait          prometheus.Histogram
	breakerTransitions *prometheus.CounterVec
	// admissionRefused counts runs the cost model refused before they started (answered overloaded).
	admissionRefused prometheus.Counter
	// Issue 14 (gate).
	gateDecisions *prometheus.CounterVec
	// Issue 22 (first stage): answers by baseline (hybrid, bm25) and the reason a configured encoder was
	// not used.
	baselines *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_requests_total",
			Help: "Requests by endpoint, HTTP status and ranking mode."}, []string{"endpoint", "status", "mode"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "icicle_request_duration_seconds",
			Help: "Total request latency.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"endpoint"}),
		stage: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "icicle_stage_duration_seconds",
			Help: "Latency of the Elasticsearch and model stages (model_prefill and model_decode split the model's answered runs).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"stage"}),
		routes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_routes_total",
			Help: "Top-1 results by route (copy, parametric)."}, []string{"route"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_fallbacks_total",
			Help: "Responses that fell back to the first stage's order, by reason."}, []string{"reason"}),
		inContext: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "icicle_candidates_in_context",
			Help: "Candidates in the model's prompt.", Buckets: []float64{0, 1, 3, 10, 20, 50, 100}}),
		breakerState: prometheus.NewGauge(prometheus.GaugeOpts{Name: "icicle_breaker_state",
			Help: "Model circuit breaker: 0 closed, 1 half-open, 2 open."}),
		abArms: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_ab_requests_total",
			Help: "A/B answers of /v1/search by arm (A, B, interleaved)."}, []string{"arm"}),
		interleaved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_ab_interleaved_results_total",
			Help: "Results shown in interleaved answers by the team that placed them (A, B); clicks are credited offline."}, []string{"team"}),
		swaps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_model_swaps_total",
			Help: "Hot model swaps by result (success, failure)."}, []string{"result"}),
	}
	m.queued = prometheus.NewGauge(prometheus.GaugeOpts{Name: "icicle_model_queued",
		Help: "Requests waiting for a model session (at most concurrency.queue_size)."})
	m.running = prometheus.NewGauge(prometheus.GaugeOpts{Name: "icicle_model_running",
		Help: "Requests running the model (at most concurrency.max_inflight, the session count)."})
	m.queueWait = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "icicle_model_queue_wait_seconds",
		Help: "Time a request waited for a model session, admitted or shed as overloaded.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)})
	m.breakerTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_breaker_transitions_total",
		Help: "Model circuit breaker state changes by the state entered (closed, half-open, open)."}, []string{"to"})
	m.admissionRefused = prometheus.NewCounter(prometheus.CounterOpts{Name: "icicle_model_admission_refused_total",
		Help: "Model runs not started because the cost model predicted they would not end within the time left (answered overloaded)."})
	reg.MustRegister(m.requests, m.duration, m.stage, m.routes, m.fallbacks, m.inContext, m.breakerState,
		m.abArms, m.interleaved, m.swaps, m.queued, m.running, m.queueWait, m.breakerTransitions, m.admissionRefused)
	// Issue 14 (gate): decisions of policy gate, each label registered at zero.
	m.gateDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_gate_decisions_total",
		Help: "Gate decisions (policy gate): promote_model (the model's top moved to rank 1) or keep_first_stage."}, []string{"decision"})
	for _, d := range []string{GatePromote, GateKeep} {
		m.gateDecisions.WithLabelValues(d)
	}
	reg.MustRegister(m.gateDecisions)
	m.baselines = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_first_stage_total",
		Help: "First-stage rankings by baseline (hybrid: BM25 and the dense encoder; bm25: BM25 alone) and the reason a configured encoder was not used."},
		[]string{"baseline", "reason"})
	for _, l := range [][2]string{{retrieve.BaselineHybrid, ""}, {retrieve.BaselineBM25, ""},
		{retrieve.BaselineBM25, retrieve.ReasonEncoderError}, {retrieve.BaselineBM25, retrieve.ReasonDenseUnavailable}} {
		m.baselines.WithLabelValues(l[0], l[1])
	}
	reg.MustRegister(m.baselines)
	m.zero()
	return m
}

// zero creates every labelled series a dashboard or a rate() alert reads, at 0, so that each exists
// from the first scrape rather than from its first increment.
func (m *metrics) zero() {
	for _, endpoint := range []string{"rerank", "search", "dropin"} {
		for _, mode := range []Mode{ModeGated, ModeReranked, ModeFused, ModeFirstStageFallback, ModeFirstStage, ModeBM25} {
			m.requests.WithLabelValues(endpoint, "200", string(mode))
		}
		m.duration.WithLabelValues(endpoint)
	}
	for _, stage := range []string{"es", "model"} {
		m.stage.WithLabelValues(stage)
	}
	for _, route := range []inference.Route{inference.RouteCopy, inference.RouteParametric} {
		m.routes.WithLabelValues(string(route))
	}
	for _, reason := range fallbackReasons {
		m.fallbacks.WithLabelValues(reason)
	}
	for _, arm := range []Arm{ArmA, ArmB, ArmInterleaved} {
		m.abArms.WithLabelValues(string(arm))
	}
	for _, team := range []Team{TeamA, TeamB} {
		m.interleaved.WithLabelValues(string(team))
	}
	for _, result := range []string{"success", "failure"} {
		m.swaps.WithLabelValues(result)
	}
	for _, to := range []string{"closed", "half-open", "open"} {
		m.breakerTransitions.WithLabelValues(to)
	}
}

// watchImpressions exposes the impression log's counters, read at scrape time.
func watchImpressions(reg prometheus.Registerer, l *ImpressionLog) {
	watchLog(reg, "impressions", "Impressions written to the log.",
		"Impressions not written, by reason: buffer_full (the writer fell behind; never waited for), closed, write_error.", l.Counts)
}

// watchClicks exposes the click log's counters (POST /v1/click), read at scrape time.
func watchClicks(reg prometheus.Registerer, l *ClickLog) {
	watchLog(reg, "clicks", "Clicks written to the click log.",
		"Clicks not written, by reason: buffer_full (answered 503), closed, write_error.", l.Counts)
}

// watchLog registers icicle_<what>_written_total and icicle_<what>_dropped_total{reason} of a log whose
// counts are read at scrape time.
func watchLog(reg prometheus.Registerer, what, writtenHelp, droppedHelp string, counts func() ImpressionCounts) {
	counter := func(name, help string, labels prometheus.Labels, read func(ImpressionCounts) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(read(counts())) })
	}
	written, dropped := "icicle_"+what+"_written_total", "icicle_"+what+"_dropped_total"
	reg.MustRegister(
		counter(written, writtenHelp, nil, func(c ImpressionCounts) uint64 { return c.Written }),
		counter(dropped, droppedHelp, prometheus.Labels{"reason": "buffer_full"}, func(c ImpressionCounts) uint64 { return c.DroppedFull }),
		counter(dropped, droppedHelp, prometheus.Labels{"reason": "closed"}, func(c ImpressionCounts) uint64 { return c.DroppedClosed }),
		counter(dropped, droppedHelp, prometheus.Labels{"reason": "write_error"}, func(c ImpressionCounts) uint64 { return c.Failed }),
	)
}

// watchBlocks exports the serving model's block store (experimental.block_reading), read at scrape time: what it holds
// and its lookups. A swapped model brings its own, empty store, so the counters restart at a swap (Prometheus
// reads that as a counter reset). Without block reading every series is 0.
func (s *Server) watchBlocks(reg prometheus.Registerer) {
	stat := func(f func(inference.BlockStoreStats) float64) func() float64 {
		return func() float64 {
			st := s.modelInfo().BlockStore
			if st == nil {
				return 0
			}
			return f(st.Stats())
		}
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "icicle_block_store_bytes",
			Help: "Bytes of keys and values in the serving model's block store."}, stat(func(st inference.BlockStoreStats) float64 { return float64(st.Bytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "icicle_block_store_blocks",
			Help: "Blocks (candidate documents' prompt blocks, and the header) in the serving model's block store."}, stat(func(st inference.BlockStoreStats) float64 { return float64(st.Blocks) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "icicle_block_store_hits_total",
			Help: "Prompt blocks read from the serving model's block store."}, stat(func(st inference.BlockStoreStats) float64 { return float64(st.Hits) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "icicle_block_store_misses_total",
			Help: "Prompt blocks the serving model computed because its store did not hold them."}, stat(func(st inference.BlockStoreStats) float64 { return float64(st.Misses) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "icicle_block_store_evicted_total",
			Help: "Blocks dropped from the serving model's block store to make room."}, stat(func(st inference.BlockStoreStats) float64 { return float64(st.Evicted) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "icicle_block_store_refused_total",
			Help: "Blocks the serving model's full file-backed block store did not keep (experimental.block_dir)."}, stat(func(st inference.BlockStoreStats) float64 { return float64(st.Refused) })),
	)
}
