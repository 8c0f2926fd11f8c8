// Package eval scores rankings against relevance labels and renders what `icicle eval` reports: Hits@k,
// MRR@10, the route mix, routing recall, P(hit | COPY), the expected calibration error of the router
// probability, fallback rate and latency percentiles, as markdown, JSON and PNG plots. It is pure and
// knows nothing of HTTP or Elasticsearch; docs/evaluation.md defines every metric.
package eval

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
)

// Subsets of a query set: the query's relevant document is in the model's seen corpus (D_train) or not
// (D_new).
const (
	SubsetSeen = "seen"
	SubsetNew  = "new"
)

// Routes of a top-1 result, as the sidecar's provenance names them; RouteNone is an empty ranking.
const (
	RouteCopy       = "copy"
	RouteParametric = "parametric"
	RouteBM25       = "bm25"
	RouteFirstStage = "first_stage"
	RouteNone       = "none"
)

// Outcome is one query's answer from one arm.
type Outcome struct {
	// QueryID is the query's id in the query set.
	QueryID string `json:"qid"`
	// Ranked holds docids best first.
	Ranked []string `json:"ranked"`
	// Relevant holds the relevant docids.
	Relevant map[string]bool `json:"relevant"`
	// Subset is SubsetSeen or SubsetNew.
	Subset string `json:"subset"`
	// Latency is the arm's wall time for the query, measured by the client.
	Latency time.Duration `json:"latency_ns"`
	// Route is the top result's provenance (RouteCopy, RouteParametric, RouteFirstStage, RouteBM25); empty when
	// Ranked is.
	Route string `json:"route,omitempty"`
	// ModelRoute is the route of the model's own top beam (RouteCopy or RouteParametric) when the response
	// says it though the top result shows another (policy gate keeping BM25's order reports it); empty
	// otherwise. Routing recall reads it before Route: it measures how the model routed, not what was shown.
	ModelRoute string `json:"model_route,omitempty"`
	// Fallback is set when the sidecar answered in BM25 order because of FallbackReason.
	Fallback       bool   `json:"fallback,omitempty"`
	FallbackReason string `json:"fallback_reason,omitempty"`
	// RouterProb is p([COPY]) at the first decoding step; nil when the model did not run.
	RouterProb *float64 `json:"router_prob,omitempty"`
	// InContext says whether a relevant document was among the candidates that fitted the model's prompt;
	// nil when unknown (the BM25 arm, or a failed request).
	InContext *bool `json:"gold_in_context,omitempty"`
	// Err is set when the request failed; the query then counts as a miss everywhere.
	Err string `json:"error,omitempty"`
}

// Rank returns the 1-based rank of the first relevant docid, 0 if none is ranked.
func (o Outcome) Rank() int {
	for i, d := range o.Ranked {
		if o.Relevant[d] {
			return i + 1
		}
	}
	return 0
}

// modelRoute is ModelRoute when the response gave it, else the shown route.
func (o Outcome) modelRoute() string {
	if o.ModelRoute != "" {
		return o.ModelRoute
	}
	return o.route()
}

// route is Route, or RouteNone for an empty ranking.
func (o Outcome) route() string {
	if o.Route == "" {
		return RouteNone
	}
	return o.Route
}

// Ratio is k of n: a share with its counts, so that a share of a handful of queries reads as such.
type Ratio struct {
	K, N int
}

// Value returns K/N, NaN when N is 0.
func (r Ratio) Value() float64 {
	if r.N == 0 {
		return math.NaN()
	}
	return float64(r.K) / float64(r.N)
}

// String renders "0.750 (3/4)", or "– (0/0)" when there is nothing to divide.
func (r Ratio) String() string {
	if r.N == 0 {
		return "– (0/0)"
	}
	return fmt.Sprintf("%.3f (%d/%d)", r.Value(), r.K, r.N)
}

// MarshalJSON writes {"k", "n", "value"}, value null when n is 0.
func (r Ratio) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		K     int      `json:"k"`
		N     int      `json:"n"`
		Value *float64 `json:"value"`
	}{r.K, r.N, finite(r.Value())})
}

// Latency holds nearest-rank percentiles in milliseconds.
type Latency struct {
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
}

// Summary aggregates the outcomes of one arm over one subset. docs/evaluation.md defines each field.
type Summary struct {
	// N counts the queries; Errors those whose request failed.
	N      int `json:"queries"`
	Errors int `json:"errors"`
	// Hits1, Hits10 and MRR (MRR@10) are means over N.
	Hits1  float64 `json:"hits_at_1"`
	Hits10 float64 `json:"hits_at_10"`
	MRR    float64 `json:"mrr_at_10"`
	// Routes counts the top-1 provenance: copy, parametric, bm25, none.
	Routes map[string]int `json:"routes_top1"`
	// FallbackRate is the share of the N answers in BM25 order because the model failed, was shed or was
	// doubted; Fallbacks counts them by reason.
	FallbackRate float64        `json:"fallback_rate"`
	Fallbacks    map[string]int `json:"fallbacks"`
	// InContext is the share of queries whose relevant document fitted the model's prompt.
	InContext Ratio `json:"gold_in_context"`
	// RoutingRecall is the share of the queries with a right route whose top-1 took it: copy when the
	// relevant document is in context, parametric when it is a seen document not in context.
	RoutingRecall Ratio `json:"routing_recall"`
	// CopyRecall and ParametricRecall are RoutingRecall's two halves.
	CopyRecall       Ratio `json:"routing_recall_copy"`
	ParametricRecall Ratio `json:"routing_recall_parametric"`
	// HitGivenCopy is P(hit@1 | top-1 route is copy).
	HitGivenCopy Ratio `json:"p_hit_given_copy"`
	// RouteECE is the paper's ECE (Appendix H) of the routing decision; TopECE the ECE of the taken
	// route's probability against top-1 correctness. Nil when no query has a router probability.
	RouteECE  *float64 `json:"ece_route"`
	TopECE    *float64 `json:"ece_top1"`
	RouteBins []Bin    `json:"reliability_route,omitempty"`
	TopBins   []Bin    `json:"reliability_top1,omitempty"`
	Latency   Latency  `json:"latency"`
}

// Summarise scores the outcomes whose Subset is subset ("" takes all), with bins equal-width calibration
// bins.
func Summarise(outs []Outcome, subset string, bins int) Summary {
	s := Summary{Routes: map[string]int{}, Fallbacks: map[string]int{}}
	var lat []time.Duration
	var routeConf, topConf []float64
	var routeOK, topOK []bool
	fallbacks := 0
	for _, o := range outs {
		if subset != "" && o.Subset != subset {
			continue
		}
		s.N++
		lat = append(lat, o.Latency)
		if o.Err != "" {
			s.Errors++
			continue
		}
		r := o.Rank()
		if r == 1 {
			s.Hits1++
		}
		if r >= 1 && r <= 10 {
			s.Hits10++
			s.MRR += 1 / float64(r)
		}
		route := o.route()
		s.Routes[route]++
		if o.Fallback {
			fallbacks++
			s.Fallbacks[o.FallbackReason]++
		}
		if route == RouteCopy {
			s.HitGivenCopy.N++
			if r == 1 {
				s.HitGivenCopy.K++
			}
		}
		if o.InContext != nil {
			s.InContext.N++
			switch {
			case *o.InContext:
				s.InContext.K++
				s.CopyRecall.N++
				if o.modelRoute() == RouteCopy {
					s.CopyRecall.K++
				}
			case o.Subset == SubsetSeen:
				s.ParametricRecall.N++
				if o.modelRoute() == RouteParametric {
					s.ParametricRecall.K++
				}
			}
		}
		if o.RouterProb != nil {
			if o.InContext != nil {
				c, ok := RouteConfidence(*o.RouterProb, *o.InContext)
				routeConf, routeOK = append(routeConf, c), append(routeOK, ok)
			}
			if c, ok, valid := TopConfidence(*o.RouterProb, route, r == 1); valid {
				topConf, topOK = append(topConf, c), append(topOK, ok)
			}
		}
	}
	s.RoutingRecall = Ratio{K: s.CopyRecall.K + s.ParametricRecall.K, N: s.CopyRecall.N + s.ParametricRecall.N}
	if len(routeConf) > 0 {
		s.RouteBins = Reliability(routeConf, routeOK, bins)
		s.RouteECE = finite(ECE(s.RouteBins))
	}
	if len(topConf) > 0 {
		s.TopBins = Reliability(topConf, topOK, bins)
		s.TopECE = finite(ECE(s.TopBins))
	}
	if s.N == 0 {
		return s
	}
	n := float64(s.N)
	s.Hits1, s.Hits10, s.MRR = s.Hits1/n, s.Hits10/n, s.MRR/n
	s.FallbackRate = float64(fallbacks) / n
	slices.Sort(lat)
	s.Latency = Latency{P50: msf(Percentile(lat, 0.50)), P95: msf(Percentile(lat, 0.95)), P99: msf(Percentile(lat, 0.99))}
	return s
}

// Percentile returns the nearest-rank percentile p in (0, 1] of sorted values: the smallest value with at
// least p of the values at or below it. It returns the zero value for no values.
func Percentile[T any](sorted []T, p float64) T {
	var zero T
	if len(sorted) == 0 {
		return zero
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// finite returns &v, or nil for NaN and infinities (JSON has neither).
func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
