package rank

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/icicle-search/sidecar/retrieve"
)

// Metrics are the pipeline's and the guard's Prometheus collectors: what was ranked how, why readers fell
// back, and the reader's queue, runs and breaker. Every labelled series exists at 0 from the start.
type Metrics struct {
	stage     *prometheus.HistogramVec
	routes    *prometheus.CounterVec
	fallbacks *prometheus.CounterVec
	inContext prometheus.Histogram
	gate      *prometheus.CounterVec
	baselines *prometheus.CounterVec

	queued             prometheus.Gauge
	running            prometheus.Gauge
	queueWait          prometheus.Histogram
	admissionRefused   prometheus.Counter
	breakerState       prometheus.Gauge
	breakerTransitions *prometheus.CounterVec
}

// NewMetrics registers the collectors on reg (nil: a private registry).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	buckets := prometheus.ExponentialBuckets(0.001, 2, 14)
	m := &Metrics{
		stage: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "icicle_stage_duration_seconds",
			Help:    "Latency of the Elasticsearch and model stages (model_prefill and model_decode split the model's answered runs).",
			Buckets: buckets}, []string{"stage"}),
		routes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_routes_total",
			Help: "Top-1 results by route (copy, parametric)."}, []string{"route"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_fallbacks_total",
			Help: "Responses that fell back to the first stage's order, by reason."}, []string{"reason"}),
		inContext: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "icicle_candidates_in_context",
			Help: "Candidates in the model's prompt.", Buckets: []float64{0, 1, 3, 10, 20, 50, 100}}),
		gate: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_gate_decisions_total",
			Help: "Gate decisions (policy gate): promote_model (the model's top moved to rank 1) or keep_first_stage."},
			[]string{"decision"}),
		baselines: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_first_stage_total",
			Help: "First-stage rankings by baseline (hybrid: BM25 and the dense encoder; bm25: BM25 alone) and the reason a configured encoder was not used."},
			[]string{"baseline", "reason"}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{Name: "icicle_model_queued",
			Help: "Requests waiting for a model session (at most concurrency.queue_size)."}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Name: "icicle_model_running",
			Help: "Requests running the model (at most concurrency.max_inflight, the session count)."}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "icicle_model_queue_wait_seconds",
			Help: "Time a request waited for a model session, admitted or shed as overloaded.", Buckets: buckets}),
		admissionRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "icicle_model_admission_refused_total",
			Help: "Model runs not started because the cost model predicted they would not end within the time left (answered overloaded)."}),
		breakerState: prometheus.NewGauge(prometheus.GaugeOpts{Name: "icicle_breaker_state",
			Help: "Model circuit breaker: 0 closed, 1 half-open, 2 open."}),
		breakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_breaker_transitions_total",
			Help: "Model circuit breaker state changes by the state entered (closed, half-open, open)."}, []string{"to"}),
	}
	reg.MustRegister(m.stage, m.routes, m.fallbacks, m.inContext, m.gate, m.baselines, m.queued, m.running,
		m.queueWait, m.admissionRefused, m.breakerState, m.breakerTransitions)
	for _, stage := range []string{"es", "model"} {
		m.stage.WithLabelValues(stage)
	}
	for _, route := range []Route{RouteCopy, RouteParametric} {
		m.routes.WithLabelValues(string(route))
	}
	for _, reason := range FallbackReasons {
		m.fallbacks.WithLabelValues(reason)
	}
	for _, d := range []string{GatePromote, GateKeep} {
		m.gate.WithLabelValues(d)
	}
	for _, l := range [][2]string{{retrieve.BaselineHybrid, ""}, {retrieve.BaselineBM25, ""},
		{retrieve.BaselineBM25, retrieve.ReasonEncoderError}, {retrieve.BaselineBM25, retrieve.ReasonDenseUnavailable}} {
		m.baselines.WithLabelValues(l[0], l[1])
	}
	for _, to := range []string{"closed", "half-open", "open"} {
		m.breakerTransitions.WithLabelValues(to)
	}
	return m
}

// ObserveStage records the time of one stage ("es" for an Elasticsearch call made outside the pipeline: the
// drop-in's search, A/B arm A).
func (m *Metrics) ObserveStage(stage string, seconds float64) {
	m.stage.WithLabelValues(stage).Observe(seconds)
}
