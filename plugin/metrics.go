package plugin

import "github.com/prometheus/client_golang/prometheus"

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

	// Issue 14 (gate).
	gateDecisions *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_requests_total",
			Help: "Requests by endpoint, HTTP status and ranking mode."}, []string{"endpoint", "status", "mode"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "icicle_request_duration_seconds",
			Help: "Total request latency.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"endpoint"}),
		stage: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "icicle_stage_duration_seconds",
			Help: "Latency of the Elasticsearch and model stages.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"stage"}),
		routes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_routes_total",
			Help: "Top-1 results by route (copy, parametric)."}, []string{"route"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_fallbacks_total",
			Help: "Responses that fell back to BM25, by reason."}, []string{"reason"}),
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
	reg.MustRegister(m.requests, m.duration, m.stage, m.routes, m.fallbacks, m.inContext, m.breakerState,
		m.abArms, m.interleaved, m.swaps)
	// Issue 14 (gate): decisions of policy gate, each label registered at zero.
	m.gateDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_gate_decisions_total",
		Help: "Gate decisions (policy gate): promote_model (the model's top moved to rank 1) or keep_bm25."}, []string{"decision"})
	for _, d := range []string{GatePromote, GateKeep} {
		m.gateDecisions.WithLabelValues(d)
	}
	reg.MustRegister(m.gateDecisions)
	return m
}

// watchImpressions exposes the impression log's counters, read at scrape time.
func watchImpressions(reg prometheus.Registerer, l *ImpressionLog) {
	counter := func(name, help string, labels prometheus.Labels, read func(ImpressionCounts) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(read(l.Counts())) })
	}
	const dropped = "Impressions not written, by reason: buffer_full (the writer fell behind; never waited for), closed, write_error."
	reg.MustRegister(
		counter("icicle_impressions_written_total", "Impressions written to the log.", nil,
			func(c ImpressionCounts) uint64 { return c.Written }),
		counter("icicle_impressions_dropped_total", dropped, prometheus.Labels{"reason": "buffer_full"},
			func(c ImpressionCounts) uint64 { return c.DroppedFull }),
		counter("icicle_impressions_dropped_total", dropped, prometheus.Labels{"reason": "closed"},
			func(c ImpressionCounts) uint64 { return c.DroppedClosed }),
		counter("icicle_impressions_dropped_total", dropped, prometheus.Labels{"reason": "write_error"},
			func(c ImpressionCounts) uint64 { return c.Failed }),
	)
}
