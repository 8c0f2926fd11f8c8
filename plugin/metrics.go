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
	}
	reg.MustRegister(m.requests, m.duration, m.stage, m.routes, m.fallbacks, m.inContext, m.breakerState)
	return m
}
