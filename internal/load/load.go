// Package load drives concurrent clients against a running sidecar on loopback and aggregates what came
// back: throughput, latency percentiles, errors by status, answers by mode and fallback reason, and the
// sidecar's resident memory (from its /metrics, or /proc/<pid>/status). `icicle load` is its command line.
package load

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/icicle-search/sidecar/internal/eval"
)

// clientIdleTimeout closes the load client's idle connections before the sidecar's http.Server does
// (its idle timeout is server.read_timeout, 10s by default), so a request never races a server-side
// close of the connection it reuses.
const clientIdleTimeout = 5 * time.Second

// StatusTransport is the ByStatus key of requests that got no HTTP answer (refused, reset, timed out).
const StatusTransport = "transport"

// ModeGatedIdle is a Sample's Mode for a gated answer whose model did not run (no router_prob: its gate
// never promotes, plugin.ReasonGateIdle), so that it is not counted as served by the model.
const ModeGatedIdle = "gated_idle"

// Sample is one request's result.
type Sample struct {
	// Status is the HTTP status, 0 when the request got no answer.
	Status  int
	Latency time.Duration
	// Mode and Reason are the answer's mode (ModeGatedIdle for a gated one without the model) and
	// fallback_reason (200 answers only).
	Mode, Reason string
	// ModelMS is the answer's timings.model: the sidecar's time in model admission and the model run.
	ModelMS float64
	// Err is the transport error of a request that got no answer.
	Err string
}

// Latency holds nearest-rank percentiles and the maximum in milliseconds.
type Latency struct {
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// fallbackMode is the mode of an answer that fell back to the first stage's order (plugin.ModeFirstStageFallback).
const fallbackMode = "first_stage_fallback"

// Summary aggregates a run's samples.
type Summary struct {
	// Requests counts the requests that completed (with or without an HTTP answer) within the run.
	Requests int     `json:"requests"`
	ElapsedS float64 `json:"elapsed_s"`
	// Throughput is Requests per second; OKThroughput counts only 200 answers.
	Throughput   float64 `json:"throughput_rps"`
	OKThroughput float64 `json:"ok_throughput_rps"`
	// Latency is over the 200 answers: a fast error must not flatter the percentiles.
	Latency Latency `json:"latency_ok"`
	// ByStatus counts requests by HTTP status, StatusTransport for none; ErrorRate is the share not 200.
	ByStatus  map[string]int `json:"by_status"`
	ErrorRate float64        `json:"error_rate"`
	// Modes counts the 200 answers by mode; Fallbacks counts first_stage_fallback answers by reason, and
	// FallbackRate is their share of the 200 answers.
	Modes        map[string]int `json:"modes"`
	Fallbacks    map[string]int `json:"fallbacks"`
	FallbackRate float64        `json:"fallback_rate"`
}

// Aggregate summarises samples collected over elapsed.
func Aggregate(samples []Sample, elapsed time.Duration) Summary {
	s := Summary{Requests: len(samples), ElapsedS: elapsed.Seconds(), ByStatus: map[string]int{}, Modes: map[string]int{},
		Fallbacks: map[string]int{}}
	var ok []time.Duration
	for _, x := range samples {
		if x.Status == 0 {
			s.ByStatus[StatusTransport]++
			continue
		}
		s.ByStatus[strconv.Itoa(x.Status)]++
		if x.Status != http.StatusOK {
			continue
		}
		ok = append(ok, x.Latency)
		s.Modes[x.Mode]++
		if x.Mode == fallbackMode {
			s.Fallbacks[x.Reason]++
		}
	}
	if elapsed > 0 {
		s.Throughput = float64(len(samples)) / elapsed.Seconds()
		s.OKThroughput = float64(len(ok)) / elapsed.Seconds()
	}
	if len(samples) > 0 {
		s.ErrorRate = float64(len(samples)-len(ok)) / float64(len(samples))
	}
	if len(ok) > 0 {
		s.FallbackRate = float64(s.Modes[fallbackMode]) / float64(len(ok))
		slices.Sort(ok)
		s.Latency = Latency{P50: ms(eval.Percentile(ok, 0.50)), P95: ms(eval.Percentile(ok, 0.95)),
			P99: ms(eval.Percentile(ok, 0.99)), Max: ms(ok[len(ok)-1])}
	}
	return s
}

// Memory is the sidecar's resident set size in bytes over a run; zero fields were not measured.
type Memory struct {
	// Source is "metrics" (process_resident_memory_bytes sampled from /metrics) or "proc" (/proc/<pid>/status).
	Source string `json:"source"`
	// Start, Max and End are sampled RSS values (Max is the largest sample, not a true peak).
	Start int64 `json:"start_bytes"`
	Max   int64 `json:"max_bytes"`
	End   int64 `json:"end_bytes"`
	// HWM is VmHWM, the kernel's peak RSS over the process's life (only with a pid).
	HWM int64 `json:"hwm_bytes,omitempty"`
	// Samples counts the successful samples.
	Samples int `json:"samples"`
}

// observe records one RSS sample.
func (m *Memory) observe(rss int64) {
	if m.Samples == 0 {
		m.Start = rss
	}
	m.Samples++
	m.Max, m.End = max(m.Max, rss), rss
}

// ParseRSS reads process_resident_memory_bytes from a Prometheus text exposition.
func ParseRSS(metrics []byte) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(metrics))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || name != "process_resident_memory_bytes" {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return 0, false
		}
		return int64(v), true
	}
	return 0, false
}

// ParseProcStatus reads VmRSS and VmHWM (kB in the file) from /proc/<pid>/status, in bytes.
func ParseProcStatus(status []byte) (rss, hwm int64, err error) {
	found := 0
	for line := range strings.SplitSeq(string(status), "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if !ok || key != "VmRSS" && key != "VmHWM" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("parse %s: %q", key, rest)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parse %s: %w", key, err)
		}
		if key == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
		found++
	}
	if found != 2 {
		return 0, 0, errors.New("VmRSS or VmHWM missing (kernel thread, or not a /proc/<pid>/status file)")
	}
	return rss, hwm, nil
}

// CheckLoopback refuses a URL whose host is not a loopback address or "localhost": a load test is for
// one's own machine.
func CheckLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("url %q: want http://HOST:PORT", raw)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("url %q: only loopback hosts (127.0.0.0/8, ::1, localhost) are load-tested", raw)
}

// Options configure Run.
type Options struct {
	// URL is the sidecar's base URL (loopback); Path the endpoint posted to (default /v1/search) with
	// {"query", "size"}.
	URL, Path string
	// Clients post back to back, each waiting for its answer; Duration bounds the run.
	Clients  int
	Duration time.Duration
	// Queries are cycled through in order across all clients.
	Queries []string
	// Size is the request's size (default 10).
	Size int
	// SampleEvery is the /metrics sampling interval for Memory (default 1s; negative: no sampling).
	SampleEvery time.Duration
	// Client sends the requests (default: a client with a 30 s timeout and Clients idle connections).
	Client *http.Client
}

// Result is a run's samples and memory.
type Result struct {
	Samples []Sample
	Elapsed time.Duration
	Memory  Memory
}

// Run posts queries from opts.Clients clients until opts.Duration has passed or ctx is done. A request
// cut off by the end of the run is not counted.
func Run(ctx context.Context, opts Options) (Result, error) {
	if err := CheckLoopback(opts.URL); err != nil {
		return Result{}, err
	}
	if opts.Clients < 1 || len(opts.Queries) == 0 || opts.Duration <= 0 {
		return Result{}, errors.New("load: want at least one client, one query and a positive duration")
	}
	base, path, client, bodies := prepare(opts.URL, opts.Path, opts.Size, opts.Client, opts.Clients, opts.Queries)

	var res Result
	var memMu sync.Mutex
	sample := func(ctx context.Context) {
		if rss, ok := scrapeRSS(ctx, client, base); ok {
			memMu.Lock()
			res.Memory.Source = "metrics"
			res.Memory.observe(rss)
			memMu.Unlock()
		}
	}
	sample(ctx)

	runCtx, cancel := context.WithTimeout(ctx, opts.Duration)
	defer cancel()
	start := time.Now()
	var next atomic.Int64
	perClient := make([][]Sample, opts.Clients)
	var wg sync.WaitGroup
	for c := range opts.Clients {
		wg.Go(func() {
			for runCtx.Err() == nil {
				i := int(next.Add(1)-1) % len(bodies)
				s, ok := post(runCtx, client, base+path, bodies[i])
				if ok {
					perClient[c] = append(perClient[c], s)
				}
			}
		})
	}
	sampleEvery(runCtx, &wg, opts.SampleEvery, sample)
	wg.Wait()
	res.Elapsed = time.Since(start)
	sample(ctx)
	for _, s := range perClient {
		res.Samples = append(res.Samples, s...)
	}
	return res, ctx.Err()
}

// post sends one request; ok is false when the run's end cut it off.
func post(ctx context.Context, c *http.Client, url string, body []byte) (Sample, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Sample{}, false
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	res, err := c.Do(req)
	if err != nil {
		return Sample{Latency: time.Since(start), Err: err.Error()}, ctx.Err() == nil
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	s := Sample{Status: res.StatusCode, Latency: time.Since(start)}
	if err != nil {
		return Sample{Latency: s.Latency}, ctx.Err() == nil
	}
	if res.StatusCode == http.StatusOK {
		var r struct {
			Mode       string   `json:"mode"`
			Reason     string   `json:"fallback_reason"`
			RouterProb *float64 `json:"router_prob"`
			Timings    struct {
				Model float64 `json:"model_ms"`
			} `json:"timings"`
		}
		_ = json.Unmarshal(raw, &r)
		s.Mode, s.Reason, s.ModelMS = r.Mode, r.Reason, r.Timings.Model
		if s.Mode == "gated" && r.RouterProb == nil {
			s.Mode = ModeGatedIdle
		}
	}
	return s, true
}

// scrapeRSS reads process_resident_memory_bytes from base/metrics.
func scrapeRSS(ctx context.Context, c *http.Client, base string) (int64, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, false
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, false
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil || res.StatusCode != http.StatusOK {
		return 0, false
	}
	return ParseRSS(raw)
}

// WriteMarkdown writes the summary and memory as a markdown table.
func WriteMarkdown(w io.Writer, s Summary, m Memory) {
	fmt.Fprintln(w, "| requests | s | req/s | ok req/s | p50 ms | p95 ms | p99 ms | max ms | error rate | by status | fallback rate | fallbacks | modes | RSS start / max / end MiB | VmHWM MiB |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	rss, hwm := "–", "–"
	if m.Samples > 0 {
		rss = fmt.Sprintf("%.0f / %.0f / %.0f (%s)", mib(m.Start), mib(m.Max), mib(m.End), m.Source)
	}
	if m.HWM > 0 {
		hwm = fmt.Sprintf("%.0f", mib(m.HWM))
	}
	fmt.Fprintf(w, "| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.4f | %s | %.4f | %s | %s | %s | %s |\n",
		s.Requests, s.ElapsedS, s.Throughput, s.OKThroughput, s.Latency.P50, s.Latency.P95, s.Latency.P99, s.Latency.Max,
		s.ErrorRate, counts(s.ByStatus), s.FallbackRate, counts(s.Fallbacks), counts(s.Modes), rss, hwm)
}

// counts renders "a 3, b 1" in key order, "–" when empty.
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "–"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", cmp.Or(k, `""`), m[k])
	}
	return strings.Join(parts, ", ")
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// sampleEvery calls sample every period (0: every second) until ctx ends, in a goroutine of wg; a negative
// period samples nothing. Both the closed- and the open-loop runs read the sidecar's RSS this way.
func sampleEvery(ctx context.Context, wg *sync.WaitGroup, period time.Duration, sample func(context.Context)) {
	if period < 0 {
		return
	}
	if period == 0 {
		period = time.Second
	}
	wg.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				sample(ctx)
			}
		}
	})
}

// prepare fills the defaults both loops share: the sidecar's base URL, the path (/v1/search), a client
// keeping conns idle connections (unless one is given) and each query's request body (size 10 by default).
func prepare(url, path string, size int, client *http.Client, conns int, queries []string) (string, string, *http.Client, [][]byte) {
	path = cmp.Or(path, "/v1/search")
	size = cmp.Or(size, 10)
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = conns
		tr.MaxIdleConns = conns
		// Shorter than the sidecar's idle timeout (its read_timeout, 10s by default): a POST on a
		// connection the server is closing is not retried and would count as a transport error.
		tr.IdleConnTimeout = clientIdleTimeout
		client = &http.Client{Timeout: 30 * time.Second, Transport: tr}
	}
	bodies := make([][]byte, len(queries))
	for i, q := range queries {
		bodies[i], _ = json.Marshal(map[string]any{"query": q, "size": size})
	}
	return strings.TrimRight(url, "/"), path, client, bodies
}
