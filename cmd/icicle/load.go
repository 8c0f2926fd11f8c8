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

	"github.com/icicle-search/sidecar/internal/load"
)

// runLoad is `icicle load`: concurrent clients post queries to a running sidecar on loopback for a while and
// it prints throughput, latency percentiles, errors by status, fallbacks by reason and the sidecar's
// resident memory (its /metrics, and /proc/<pid>/status with -pid).
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
	rc, err := openMaybeGzip(path)
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
