package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/icicle-search/sidecar/internal/eval"
	"github.com/icicle-search/sidecar/plugin"
)

// compare runs labelled queries through arm A (Elasticsearch BM25 over all documents) and arm B (the
// running sidecar's /v1/search) and prints a markdown table split by seen and new relevant documents.
func compare(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "YAML config file (Elasticsearch connection, model.dir)")
	sidecar := fs.String("sidecar", "http://127.0.0.1:8080", "base URL of the running sidecar")
	queriesPath := fs.String("queries", "data/nq_qed/queries.jsonl.gz", "BEIR queries JSONL (.gz allowed): qid, query, optional split")
	qrelsPath := fs.String("qrels", "data/nq_qed/qrels.tsv", "qrels TSV: qid, docid, relevance (header line allowed)")
	split := fs.String("split", "dev", "only queries with this split value (empty: all)")
	n := fs.Int("n", 100, "number of queries (the first n of the split, in file order)")
	modelDir := fs.String("model-dir", "", "model directory whose seen_docids.txt splits queries into seen/new (default: model.dir)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	dir := *modelDir
	if dir == "" {
		dir = cfg.Model.Dir
	}
	seen, err := readSeen(dir)
	if err != nil {
		return err
	}
	qrels, err := readQrels(*qrelsPath)
	if err != nil {
		return err
	}
	queries, err := readQueries(*queriesPath, *split, *n, qrels)
	if err != nil {
		return err
	}
	es, err := newAdapter(cfg.Elasticsearch, nil)
	if err != nil {
		return err
	}
	defer es.Close()
	client := &http.Client{Timeout: 30 * time.Second}
	var armA, armB []eval.Outcome
	for i, q := range queries {
		subset := "new"
		for d := range qrels[q.ID] {
			if seen[d] {
				subset = "seen"
			}
		}
		start := time.Now()
		hits, err := es.SearchAll(ctx, q.Text, 10)
		if err != nil {
			return fmt.Errorf("query %d (%s): bm25: %w", i, q.ID, err)
		}
		a := eval.Outcome{Relevant: qrels[q.ID], Subset: subset, Latency: time.Since(start), Route: "bm25"}
		for _, h := range hits {
			a.Ranked = append(a.Ranked, h.DocID)
		}
		armA = append(armA, a)

		start = time.Now()
		resp, err := postSearch(ctx, client, *sidecar, q.Text)
		if err != nil {
			return fmt.Errorf("query %d (%s): sidecar: %w", i, q.ID, err)
		}
		b := eval.Outcome{Relevant: qrels[q.ID], Subset: subset, Latency: time.Since(start), Fallback: resp.Mode == plugin.ModeBM25Fallback}
		for j, r := range resp.Results {
			b.Ranked = append(b.Ranked, r.DocID)
			if j == 0 {
				b.Route = string(r.Provenance)
			}
		}
		armB = append(armB, b)
	}
	fmt.Fprintf(out, "%d %s queries from %s; seen = relevant document in %s/seen_docids.txt (%d docids)\n\n",
		len(queries), *split, *queriesPath, dir, len(seen))
	arms := []eval.Arm{{Name: "A: BM25 (all docs)", Outcomes: armA}, {Name: "B: ICICLE sidecar", Outcomes: armB}}
	eval.WriteTable(out, arms, []string{"", "seen", "new"})
	return nil
}

func postSearch(ctx context.Context, c *http.Client, base, query string) (plugin.Response, error) {
	body, _ := json.Marshal(plugin.SearchRequest{Query: query, Size: 10})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/v1/search", bytes.NewReader(body))
	if err != nil {
		return plugin.Response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := c.Do(req)
	if err != nil {
		return plugin.Response{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return plugin.Response{}, err
	}
	if res.StatusCode != http.StatusOK {
		return plugin.Response{}, fmt.Errorf("status %d: %s", res.StatusCode, raw)
	}
	var out plugin.Response
	if err := json.Unmarshal(raw, &out); err != nil {
		return plugin.Response{}, fmt.Errorf("decode response: %w", err)
	}
	return out, nil
}

type query struct{ ID, Text string }

// openMaybeGzip opens path, gunzipping a .gz file.
func openMaybeGzip(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(path, ".gz") {
		return f, nil
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{zr, f}, nil
}

func readQueries(path, split string, n int, qrels map[string]map[string]bool) ([]query, error) {
	rc, err := openMaybeGzip(path)
	if err != nil {
		return nil, fmt.Errorf("read queries: %w", err)
	}
	defer rc.Close()
	var out []query
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for line := 1; sc.Scan() && len(out) < n; line++ {
		var q struct{ Qid, Query, Split string }
		if err := json.Unmarshal(sc.Bytes(), &q); err != nil {
			return nil, fmt.Errorf("read queries: %s:%d: %w", path, line, err)
		}
		if (split == "" || q.Split == split) && len(qrels[q.Qid]) > 0 {
			out = append(out, query{ID: q.Qid, Text: q.Query})
		}
	}
	return out, sc.Err()
}

func readQrels(path string) (map[string]map[string]bool, error) {
	rc, err := openMaybeGzip(path)
	if err != nil {
		return nil, fmt.Errorf("read qrels: %w", err)
	}
	defer rc.Close()
	out := make(map[string]map[string]bool)
	sc := bufio.NewScanner(rc)
	for line := 1; sc.Scan(); line++ {
		f := strings.Split(sc.Text(), "\t")
		if len(f) < 3 || line == 1 && f[0] == "qid" {
			continue
		}
		if f[2] == "0" {
			continue
		}
		if out[f[0]] == nil {
			out[f[0]] = make(map[string]bool)
		}
		out[f[0]][f[1]] = true
	}
	return out, sc.Err()
}
