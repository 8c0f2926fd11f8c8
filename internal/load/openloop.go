package load

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Arrival processes of the open-loop mode.
const (
	// ArrivalsPoisson draws exponential gaps of mean 1/Rate: independent users.
	ArrivalsPoisson = "poisson"
	// ArrivalsConstant sends exactly every 1/Rate.
	ArrivalsConstant = "constant"
)

// OpenOptions configure RunOpen: requests arrive at a fixed rate whatever the answers' latency, as
// users do, unlike Run's closed loop where a slow answer delays the next request.
type OpenOptions struct {
	// URL is the sidecar's base URL (loopback); Path the endpoint posted to (default /v1/search).
	URL, Path string
	// Rate is the arrival rate in requests per second (> 0); Arrivals the process (default poisson).
	Rate     float64
	Arrivals string
	// Duration bounds the arrivals; MaxRequests, when > 0, bounds their number too. Requests that
	// arrived before the end are waited for (at most the client's timeout) and counted.
	Duration    time.Duration
	MaxRequests int
	// MaxOutstanding bounds the requests in flight at once (default 1024); an arrival beyond it is not
	// sent and is counted in OpenResult.Missed, so the client never turns into a closed loop silently.
	MaxOutstanding int
	// Queries are sent in order, cycled; Size is each request's size (default 10).
	Queries []string
	Size    int
	// Seed seeds the Poisson gaps (0: 1), so a run can be repeated.
	Seed uint64
	// SampleEvery is the /metrics sampling interval for Memory (default 1s; negative: no sampling).
	SampleEvery time.Duration
	// Client sends the requests (default: a 30 s timeout and MaxOutstanding idle connections).
	Client *http.Client
}

// OpenResult is an open-loop run: its samples (latency measured from each request's scheduled
// arrival, so a client that falls behind cannot hide queueing), the arrivals not sent, memory, and the
// breaker's state changes seen on /metrics (icicle_breaker_transitions_total, end minus start).
type OpenResult struct {
	Samples []Sample
	Elapsed time.Duration
	Sent    int
	Missed  int
	Memory  Memory
	// BreakerTransitions counts the breaker's state changes during the run by the state entered
	// (closed, half-open, open); nil when /metrics did not have the counter.
	BreakerTransitions map[string]int
}

// RunOpen sends requests at opts.Rate until opts.Duration (or MaxRequests) and waits for those sent.
func RunOpen(ctx context.Context, opts OpenOptions) (OpenResult, error) {
	if err := CheckLoopback(opts.URL); err != nil {
		return OpenResult{}, err
	}
	if !(opts.Rate > 0) || len(opts.Queries) == 0 || opts.Duration <= 0 {
		return OpenResult{}, errors.New("load: want a positive rate, one query and a positive duration")
	}
	arrivals := opts.Arrivals
	if arrivals == "" {
		arrivals = ArrivalsPoisson
	}
	if arrivals != ArrivalsPoisson && arrivals != ArrivalsConstant {
		return OpenResult{}, fmt.Errorf("load: arrivals %q: want %s or %s", arrivals, ArrivalsPoisson, ArrivalsConstant)
	}
	maxOut := opts.MaxOutstanding
	if maxOut <= 0 {
		maxOut = 1024
	}
	base, path, client, bodies := prepare(opts.URL, opts.Path, opts.Size, opts.Client, maxOut, opts.Queries)
	seed := opts.Seed
	if seed == 0 {
		seed = 1
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	gap := func() time.Duration {
		mean := float64(time.Second) / opts.Rate
		if arrivals == ArrivalsConstant {
			return time.Duration(mean)
		}
		return time.Duration(rng.ExpFloat64() * mean)
	}

	var res OpenResult
	var mu sync.Mutex
	sample := func(ctx context.Context) {
		if rss, ok := scrapeRSS(ctx, client, base); ok {
			mu.Lock()
			res.Memory.Source = "metrics"
			res.Memory.observe(rss)
			mu.Unlock()
		}
	}
	before, haveBefore := scrapeTransitions(ctx, client, base)
	sample(ctx)

	runCtx, cancel := context.WithTimeout(ctx, opts.Duration)
	defer cancel()
	var wg sync.WaitGroup
	sampleEvery(runCtx, &wg, opts.SampleEvery, sample)
	outstanding := make(chan struct{}, maxOut)
	start := time.Now()
	next := start
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
loop:
	for i := 0; opts.MaxRequests <= 0 || i < opts.MaxRequests; i++ {
		next = next.Add(gap())
		if !next.Before(start.Add(opts.Duration)) {
			break
		}
		timer.Reset(time.Until(next))
		select {
		case <-runCtx.Done():
			break loop
		case <-timer.C:
		}
		select {
		case outstanding <- struct{}{}:
		default:
			res.Missed++
			continue
		}
		res.Sent++
		scheduled, body := next, bodies[i%len(bodies)]
		wg.Go(func() {
			defer func() { <-outstanding }()
			// The parent ctx, not runCtx: a request sent before the end is waited for and counted.
			s, _ := post(ctx, client, base+path, body)
			s.Latency = time.Since(scheduled)
			mu.Lock()
			res.Samples = append(res.Samples, s)
			mu.Unlock()
		})
	}
	cancel() // stops the sampler; the requests run on ctx
	wg.Wait()
	res.Elapsed = time.Since(start)
	sample(ctx)
	if after, ok := scrapeTransitions(ctx, client, base); ok && haveBefore {
		res.BreakerTransitions = map[string]int{}
		for to, n := range after {
			res.BreakerTransitions[to] = int(n - before[to])
		}
	}
	return res, ctx.Err()
}

// ParseTransitions reads icicle_breaker_transitions_total{to="..."} from a Prometheus text exposition.
func ParseTransitions(metrics []byte) (map[string]float64, bool) {
	const name = "icicle_breaker_transitions_total{"
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(metrics))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name)
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		to, ok2 := strings.CutPrefix(labels, `to="`)
		if !ok || !ok2 {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			continue
		}
		out[strings.TrimSuffix(to, `"`)] = v
	}
	return out, len(out) > 0
}

func scrapeTransitions(ctx context.Context, c *http.Client, base string) (map[string]float64, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, false
	}
	res, err := c.Do(req)
	if err != nil {
		return nil, false
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil || res.StatusCode != http.StatusOK {
		return nil, false
	}
	return ParseTransitions(raw)
}

// RateRow is one open-loop run of a sweep, as the table and the plot show it.
type RateRow struct {
	// Rate is the offered arrival rate (req/s); Multiple the rate as a multiple of the model capacity.
	Rate     float64 `json:"rate_rps"`
	Multiple float64 `json:"capacity_multiple"`
	Summary  Summary `json:"summary"`
	// Errors counts answers that are errors: no answer, or a 5xx other than the documented 503/504.
	Errors int `json:"errors"`
	// TransportErrors are the first few errors of requests that got no answer.
	TransportErrors []string `json:"transport_errors,omitempty"`
	// ModelShare is the share of requests the model answered (mode gated, reranked or fused).
	ModelShare         float64        `json:"model_share"`
	Sent               int            `json:"sent"`
	Missed             int            `json:"missed"`
	BreakerTransitions map[string]int `json:"breaker_transitions"`
	Memory             Memory         `json:"memory"`
}

// NewRateRow summarises an open-loop run at rate (multiple x the capacity).
func NewRateRow(rate, multiple float64, r OpenResult) RateRow {
	s := Aggregate(r.Samples, r.Elapsed)
	row := RateRow{Rate: rate, Multiple: multiple, Summary: s, Sent: r.Sent, Missed: r.Missed,
		BreakerTransitions: r.BreakerTransitions, Memory: r.Memory}
	for status, n := range s.ByStatus {
		if status == StatusTransport || strings.HasPrefix(status, "5") && status != "503" && status != "504" {
			row.Errors += n
		}
	}
	for _, x := range r.Samples {
		if x.Status == 0 && len(row.TransportErrors) < 5 {
			row.TransportErrors = append(row.TransportErrors, x.Err)
		}
	}
	if s.Requests > 0 {
		row.ModelShare = float64(modelServed(s.Modes)) / float64(s.Requests)
	}
	return row
}

// WriteRateTable writes the sweep as a markdown table.
func WriteRateTable(w io.Writer, rows []RateRow) {
	fmt.Fprintln(w, "| rate req/s (x capacity) | sent | missed | req/s | p50 / p95 / p99 ms | errors | by status | served by model | fallbacks | breaker changes | RSS max MiB |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		br := "–"
		if r.BreakerTransitions != nil {
			br = counts(nonZero(r.BreakerTransitions))
			if br == "–" {
				br = "none"
			}
		}
		rss := "–"
		if r.Memory.Samples > 0 {
			rss = fmt.Sprintf("%.0f", mib(r.Memory.Max))
		}
		s := r.Summary
		fmt.Fprintf(w, "| %.2f (%.2gx) | %d | %d | %.2f | %.0f / %.0f / %.0f | %d | %s | %.3f | %s | %s | %s |\n",
			r.Rate, r.Multiple, r.Sent, r.Missed, s.Throughput, s.Latency.P50, s.Latency.P95, s.Latency.P99, r.Errors,
			counts(s.ByStatus), r.ModelShare, counts(s.Fallbacks), br, rss)
	}
}

func nonZero(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// Calibration is the model's measured service time with every session busy: Sessions clients each
// send one request after another, so no request queues and none runs alone. On a CPU the sessions
// share the cores, so this is the time that sets the capacity, not the time of a query on an idle
// machine.
type Calibration struct {
	// Requests were sent; Model of them were answered by the model (gated, reranked or fused).
	Requests, Model int
	// MedianModelMS is the median timings.model of the model's answers.
	MedianModelMS float64
	// Sessions is the number of model sessions; Capacity = Sessions / median model time, in req/s.
	Sessions int
	Capacity float64
}

// Calibrate sends n requests from sessions clients, each waiting for its answer (so every session is
// busy and none queues), and measures the median model time; the capacity is sessions / median.
func Calibrate(ctx context.Context, baseURL, path string, queries []string, n, sessions int) (Calibration, error) {
	if err := CheckLoopback(baseURL); err != nil {
		return Calibration{}, err
	}
	if path == "" {
		path = "/v1/search"
	}
	client := &http.Client{Timeout: 30 * time.Second}
	var ms []time.Duration
	c := Calibration{Sessions: max(sessions, 1)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := 0
	for range c.Sessions {
		wg.Go(func() {
			for ctx.Err() == nil {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				body, _ := json.Marshal(map[string]any{"query": queries[i%len(queries)], "size": 10})
				s, _ := post(ctx, client, strings.TrimRight(baseURL, "/")+path, body)
				mu.Lock()
				c.Requests++
				if s.Status == http.StatusOK && servedModes[s.Mode] {
					c.Model++
					ms = append(ms, time.Duration(s.ModelMS*float64(time.Millisecond)))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return c, err
	}
	if len(ms) == 0 {
		return c, fmt.Errorf("calibrate: none of %d requests was answered by the model", n)
	}
	slices.Sort(ms)
	c.MedianModelMS = float64(ms[len(ms)/2].Microseconds()) / 1000
	c.Capacity = float64(c.Sessions) / (c.MedianModelMS / 1000)
	return c, nil
}

// servedModes are the response modes of an answer the model served: its ranking (reranked), fused with
// the first stage's (fused), or judged by the model's gate (gated: the model ran and the gate decided). The
// other modes (first_stage, first_stage_fallback, bm25) never ran the model or fell back; a gated answer
// whose gate never promotes did not run it either (model_skipped).
var servedModes = map[string]bool{"reranked": true, "fused": true, "gated": true}

// modelServed counts the answers of modes (mode -> count) that the model served.
func modelServed(modes map[string]int) int {
	n := 0
	for m, c := range modes {
		if servedModes[m] {
			n += c
		}
	}
	return n
}
