package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/icicle-search/sidecar/internal/client"
	"github.com/icicle-search/sidecar/internal/dataset"
	"github.com/icicle-search/sidecar/internal/load"
	"github.com/icicle-search/sidecar/plugin"
)

// runLoad is `icicle load`: concurrent clients post queries to a running sidecar on loopback for a while and
// it prints throughput, latency percentiles, errors by status, fallbacks by reason and the sidecar's
// resident memory (its /metrics, and /proc/<pid>/status with -pid). That is the closed loop (-clients);
// -rate, or -rates with a measured -capacity, is the open loop (runOpenLoad).
func runLoad(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	url := fs.String("url", "http://127.0.0.1:8080", "base URL of the sidecar (loopback only)")
	path := fs.String("path", "/v1/search", "endpoint posted to with {\"query\", \"size\"}")
	clients := fs.Int("clients", 16, "concurrent clients, each posting back to back")
	duration := fs.Duration("duration", 60*time.Second, "length of the run")
	queriesPath := fs.String("queries", "data/nq_qed/queries.jsonl.gz", "queries: BEIR JSONL (.gz allowed; \"query\" or \"text\") or one query per line")
	n := fs.Int("n", 1000, "use at most the first n queries, cycled")
	size := fs.Int("size", 10, "results asked per request")
	pid := fs.Int("pid", 0, "sidecar pid: also report VmRSS and VmHWM from /proc/PID/status")
	jsonOut := fs.String("json", "", "also write the summary as JSON to this file")
	var o openFlags
	fs.Float64Var(&o.rate, "rate", 0, "open loop: requests arrive at this rate (req/s) whatever the answers' latency; 0: closed loop (-clients)")
	fs.StringVar(&o.rates, "rates", "", "open loop sweep: comma-separated multiples of the model capacity (e.g. 0.5,1,2,4), each run for -duration")
	fs.Float64Var(&o.capacity, "capacity", 0, "model capacity in req/s for -rates; 0 measures it first: sessions / median model time over -calibrate requests from -sessions clients (every session busy)")
	fs.IntVar(&o.sessions, "sessions", 0, "the sidecar's model sessions, for the measured capacity (0: read concurrency.max_inflight from its /v1/model)")
	fs.IntVar(&o.calibrate, "calibrate", 40, "requests that measure the median model time with every session busy")
	fs.StringVar(&o.arrivals, "arrivals", load.ArrivalsPoisson, "open loop arrival process: poisson or constant")
	fs.IntVar(&o.maxRequests, "max-requests", 0, "open loop: at most this many arrivals per run (0: bounded by -duration only)")
	fs.StringVar(&o.plot, "plot", "", "open loop sweep: write the PNG plot (served-by-model share and p99 against the rate) here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	queries, err := readQueryTexts(*queriesPath, *n)
	if err != nil {
		return err
	}
	if len(queries) == 0 {
		return fmt.Errorf("no queries in %s", *queriesPath)
	}
	if o.rate > 0 || o.rates != "" {
		return runOpenLoad(ctx, o, *url, *path, *duration, queries, *size, *jsonOut, out)
	}
	fmt.Fprintf(os.Stderr, "load: %d clients, %s, %d queries, POST %s%s\n", *clients, *duration, len(queries), *url, *path)
	res, err := load.Run(ctx, load.Options{URL: *url, Path: *path, Clients: *clients, Duration: *duration, Queries: queries, Size: *size})
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if *pid > 0 {
		status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(*pid), "status"))
		if err != nil {
			return fmt.Errorf("-pid: %w", err)
		}
		rss, hwm, err := load.ParseProcStatus(status)
		if err != nil {
			return fmt.Errorf("-pid %d: %w", *pid, err)
		}
		res.Memory.HWM = hwm
		if res.Memory.Samples == 0 {
			res.Memory.Source, res.Memory.Start, res.Memory.Max, res.Memory.End, res.Memory.Samples = "proc", rss, rss, rss, 1
		}
	}
	sum := load.Aggregate(res.Samples, res.Elapsed)
	load.WriteMarkdown(out, sum, res.Memory)
	if *jsonOut != "" {
		b, err := json.MarshalIndent(struct {
			Summary load.Summary `json:"summary"`
			Memory  load.Memory  `json:"memory"`
			Clients int          `json:"clients"`
			URL     string       `json:"url"`
		}{sum, res.Memory, *clients, *url + *path}, "", " ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			return fmt.Errorf("-json: %w", err)
		}
	}
	return nil
}

// readQueryTexts reads up to n query texts: JSONL objects with "query" (or "text"), or plain lines.
func readQueryTexts(path string, n int) ([]string, error) {
	rc, err := dataset.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read queries: %w", err)
	}
	defer rc.Close()
	var out []string
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for line := 1; sc.Scan() && len(out) < n; line++ {
		text := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(text, "{") {
			var q struct{ Query, Text string }
			if err := json.Unmarshal([]byte(text), &q); err != nil {
				return nil, fmt.Errorf("read queries: %s:%d: %w", path, line, err)
			}
			text = strings.TrimSpace(q.Query + q.Text)
		}
		if text != "" {
			out = append(out, text)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read queries: %s: %w", path, err)
	}
	return out, nil
}

type openFlags struct {
	rate, capacity                   float64
	rates, arrivals, plot            string
	sessions, calibrate, maxRequests int
}

// runOpenLoad is the open loop: one run at -rate, or a sweep over -rates x the capacity (measured
// first unless -capacity is given), printed as one markdown table, with -plot and -json.
func runOpenLoad(ctx context.Context, o openFlags, url, path string, duration time.Duration, queries []string, size int, jsonOut string, out io.Writer) error {
	type run struct{ rate, multiple float64 }
	var runs []run
	var cal load.Calibration
	capacity := o.capacity
	if o.rates != "" {
		if capacity <= 0 {
			var err error
			if o.sessions <= 0 {
				var info plugin.ModelEndpoint
				if err := client.New(url, 10*time.Second, 1).Get(ctx, "/v1/model", &info); err != nil {
					return fmt.Errorf("read the sidecar's sessions from /v1/model (or set -sessions): %w", err)
				}
				o.sessions = max(info.Concurrency.MaxInflight, 1)
			}
			fmt.Fprintf(os.Stderr, "load: measuring the model time over %d requests from %d clients\n", o.calibrate, o.sessions)
			if cal, err = load.Calibrate(ctx, url, path, queries, o.calibrate, o.sessions); err != nil {
				return err
			}
			capacity = cal.Capacity
			fmt.Fprintf(out, "Capacity: %d sessions / median model time %.1f ms with every session busy (%d of %d requests answered by the model) = %.2f req/s\n\n",
				cal.Sessions, cal.MedianModelMS, cal.Model, cal.Requests, capacity)
		}
		for f := range strings.SplitSeq(o.rates, ",") {
			m, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || !(m > 0) {
				return fmt.Errorf("-rates: %q is not a positive multiple", f)
			}
			runs = append(runs, run{m * capacity, m})
		}
	} else {
		runs = []run{{o.rate, 0}}
		if capacity > 0 {
			runs[0].multiple = o.rate / capacity
		}
	}
	var rows []load.RateRow
	for _, r := range runs {
		fmt.Fprintf(os.Stderr, "load: open loop, %s arrivals at %.2f req/s for %s, POST %s%s\n", o.arrivals, r.rate, duration, url, path)
		res, err := load.RunOpen(ctx, load.OpenOptions{URL: url, Path: path, Rate: r.rate, Arrivals: o.arrivals, Duration: duration,
			MaxRequests: o.maxRequests, Queries: queries, Size: size})
		if err != nil {
			return err
		}
		row := load.NewRateRow(r.rate, r.multiple, res)
		for _, e := range row.TransportErrors {
			fmt.Fprintf(os.Stderr, "load: %.2f req/s: no answer: %s\n", r.rate, e)
		}
		rows = append(rows, row)
	}
	load.WriteRateTable(out, rows)
	if o.plot != "" {
		if err := load.WriteRatePlot(o.plot, rows, capacity); err != nil {
			return fmt.Errorf("-plot: %w", err)
		}
	}
	if jsonOut != "" {
		b, err := json.MarshalIndent(struct {
			Calibration load.Calibration `json:"calibration"`
			Capacity    float64          `json:"capacity_rps"`
			Arrivals    string           `json:"arrivals"`
			Runs        []load.RateRow   `json:"runs"`
		}{cal, capacity, o.arrivals, rows}, "", " ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonOut, b, 0o644); err != nil {
			return fmt.Errorf("-json: %w", err)
		}
	}
	return nil
}
