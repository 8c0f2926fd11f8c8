package plugin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/internal/abtest"
	"github.com/icicle-search/sidecar/rank"
)

// metrics are the HTTP layer's collectors: requests by endpoint, status and mode, latency, the A/B arms and
// the reader swaps. The ranking's (stages, routes, fallbacks, gate, first stage, the guard's queue and
// breaker) are rank.Metrics, on the same registry.
type metrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	abArms      *prometheus.CounterVec
	interleaved *prometheus.CounterVec
	swaps       *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_requests_total",
			Help: "Requests by endpoint, HTTP status and ranking mode."}, []string{"endpoint", "status", "mode"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "icicle_request_duration_seconds",
			Help: "Total request latency.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"endpoint"}),
		abArms: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_ab_requests_total",
			Help: "A/B answers of /v1/search by arm (A, B, interleaved)."}, []string{"arm"}),
		interleaved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_ab_interleaved_results_total",
			Help: "Results shown in interleaved answers by the team that placed them (A, B); clicks are credited offline."}, []string{"team"}),
		swaps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "icicle_model_swaps_total",
			Help: "Hot model swaps by result (success, failure)."}, []string{"result"}),
	}
	reg.MustRegister(m.requests, m.duration, m.abArms, m.interleaved, m.swaps)
	for _, endpoint := range []string{"rerank", "search", "dropin"} {
		for _, mode := range rank.Modes {
			m.requests.WithLabelValues(endpoint, "200", string(mode))
		}
		m.duration.WithLabelValues(endpoint)
	}
	for _, arm := range []abtest.Arm{abtest.ArmA, abtest.ArmB, abtest.ArmInterleaved} {
		m.abArms.WithLabelValues(string(arm))
	}
	for _, team := range []abtest.Team{abtest.TeamA, abtest.TeamB} {
		m.interleaved.WithLabelValues(string(team))
	}
	for _, result := range []string{"success", "failure"} {
		m.swaps.WithLabelValues(result)
	}
	return m
}

// watchImpressions exposes the impression log's counters, read at scrape time.
func watchImpressions(reg prometheus.Registerer, l *abtest.ImpressionLog) {
	watchLog(reg, "impressions", "Impressions written to the log.",
		"Impressions not written, by reason: buffer_full (the writer fell behind; never waited for), closed, write_error.", l.Counts)
}

// watchClicks exposes the click log's counters (POST /v1/click), read at scrape time.
func watchClicks(reg prometheus.Registerer, l *abtest.ClickLog) {
	watchLog(reg, "clicks", "Clicks written to the click log.",
		"Clicks not written, by reason: buffer_full (answered 503), closed, write_error.", l.Counts)
}

// watchLog registers icicle_<what>_written_total and icicle_<what>_dropped_total{reason} of a log whose
// counts are read at scrape time.
func watchLog(reg prometheus.Registerer, what, writtenHelp, droppedHelp string, counts func() abtest.LogCounts) {
	counter := func(name, help string, labels prometheus.Labels, read func(abtest.LogCounts) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(read(counts())) })
	}
	written, dropped := "icicle_"+what+"_written_total", "icicle_"+what+"_dropped_total"
	reg.MustRegister(
		counter(written, writtenHelp, nil, func(c abtest.LogCounts) uint64 { return c.Written }),
		counter(dropped, droppedHelp, prometheus.Labels{"reason": "buffer_full"}, func(c abtest.LogCounts) uint64 { return c.DroppedFull }),
		counter(dropped, droppedHelp, prometheus.Labels{"reason": "closed"}, func(c abtest.LogCounts) uint64 { return c.DroppedClosed }),
		counter(dropped, droppedHelp, prometheus.Labels{"reason": "write_error"}, func(c abtest.LogCounts) uint64 { return c.Failed }),
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
