package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/icicle-search/sidecar/internal/abtest"
	"github.com/icicle-search/sidecar/internal/client"
	"github.com/icicle-search/sidecar/internal/dataset"
	"github.com/icicle-search/sidecar/rank"
)

// abReport joins the impression log with the click log and reports who won (docs/ab.md): for
// interleaving, wins/losses/ties with an exact sign test; for split mode, CTR and MRR of clicks per arm
// with 95% intervals. With -simulate-clicks-from it draws the clicks from qrels instead of reading them.
func abReport(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("ab-report", flag.ContinueOnError)
	impressions := fs.String("impressions", "", "impression log(s): comma-separated paths or globs (rotated files: 'impressions.jsonl*')")
	clicks := fs.String("clicks", "", "click log(s): comma-separated paths or globs; empty reads no clicks")
	experiment := fs.String("experiment", "", "keep only impressions of this ab.experiment (default: all)")
	alpha := fs.Float64("alpha", 0.05, "significance level that names a winner")
	asJSON := fs.Bool("json", false, "print the report as JSON instead of Markdown")
	out := fs.String("out", "", "write the report to this file instead of stdout")
	qrels := fs.String("simulate-clicks-from", "", "qrels TSV: draw the clicks from these labels over the impressions (each impression's query id is its request_id up to '#') instead of reading -clicks")
	writeClicks := fs.String("write-clicks", "", "with -simulate-clicks-from: also write the drawn clicks to this JSONL file (the click log's format)")
	var model abtest.ClickModel
	fs.Uint64Var(&model.Seed, "seed", 1, "with -simulate-clicks-from: the clicks' random seed")
	fs.Float64Var(&model.Decay, "click-decay", 1, "with -simulate-clicks-from: rank r is examined with probability 1/r^decay")
	fs.Float64Var(&model.Relevant, "click-relevant", 1, "with -simulate-clicks-from: P(click | examined, relevant)")
	fs.Float64Var(&model.Noise, "click-noise", 0, "with -simulate-clicks-from: P(click | examined, not relevant)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var errs []error
	switch {
	case *impressions == "":
		errs = append(errs, errors.New("-impressions: required (the sidecar's ab.impression_log)"))
	case !(*alpha > 0 && *alpha < 1):
		errs = append(errs, fmt.Errorf("-alpha: want a level in (0, 1), got %v", *alpha))
	}
	if *qrels != "" && *clicks != "" {
		errs = append(errs, errors.New("-clicks and -simulate-clicks-from: give one, the clicks are either read or drawn"))
	}
	if *writeClicks != "" && *qrels == "" {
		errs = append(errs, errors.New("-write-clicks: needs -simulate-clicks-from"))
	}
	if err := model.Check(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}

	var rep abtest.Report
	var imps []abtest.Impression
	if err := readLogs(*impressions, func(i abtest.Impression) { imps = append(imps, i) }, &rep.BadImpressions); err != nil {
		return fmt.Errorf("-impressions: %w", err)
	}
	var cl []abtest.Click
	var oracle abtest.Oracle
	if *qrels != "" {
		labels, err := dataset.ReadQrels(*qrels)
		if err != nil {
			return fmt.Errorf("-simulate-clicks-from: %w", err)
		}
		cl, oracle = abtest.Simulate(imps, labels, model)
		if *writeClicks != "" {
			if err := writeJSONL(*writeClicks, cl); err != nil {
				return fmt.Errorf("-write-clicks: %w", err)
			}
		}
	} else if *clicks != "" {
		if err := readLogs(*clicks, func(c abtest.Click) { cl = append(cl, c) }, &rep.BadClicks); err != nil {
			return fmt.Errorf("-clicks: %w", err)
		}
	}
	r := abtest.Analyse(imps, cl, abtest.Options{Experiment: *experiment, Alpha: *alpha})
	r.BadImpressions, r.BadClicks = rep.BadImpressions, rep.BadClicks
	if *qrels != "" {
		r.SetSimulation(*qrels, model, len(cl), oracle)
	}

	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return fmt.Errorf("-out: %w", err)
		}
		defer f.Close()
		w = f
	}
	if *asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return abtest.WriteMarkdown(w, r)
}

// readLogs reads every file that the comma-separated paths or globs name, in name order (rotated logs'
// timestamp suffixes sort by time), as JSONL of T.
func readLogs[T any](patterns string, add func(T), bad *abtest.BadLines) error {
	var files []string
	for _, p := range strings.Split(patterns, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		m, err := filepath.Glob(p)
		if err != nil {
			return fmt.Errorf("%q: %w", p, err)
		}
		if len(m) == 0 {
			return fmt.Errorf("%q: no such file", p)
		}
		slices.Sort(m)
		files = append(files, m...)
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		err = abtest.ReadJSONL(f, name, add, bad)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func writeJSONL[T any](path string, rows []T) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// abSimulate is the A/B loop run against a live sidecar: it sends labelled queries to /v1/search (each
// query's id as X-Request-ID, "#k" appended for its k-th repeat), draws clicks from the qrels over each
// answer, and posts them to /v1/click with the write token, so that the sidecar's own impression and click
// logs are what `icicle ab-report` reads. It prints what it sent and which arm the labels favour.
func abSimulate(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("ab-simulate", flag.ContinueOnError)
	var l labelledFlags
	l.register(fs, "dev", 100, "model.dir, server.write_token", "ab.enabled, ab.impression_log and ab.click_log set")
	sidecar, queries, qrelsPath, split, n, modelDir := &l.sidecar, &l.queries, &l.qrels, &l.split, &l.n, &l.modelDir
	repeat := fs.Int("repeat", 1, "send each query this many times (request ids qid#1, qid#2, ...), as returning users do")
	size := fs.Int("size", 10, "results per answer")
	token := fs.String("write-token", "", "bearer token of /v1/click (default: server.write_token from config, e.g. ICICLE_SERVER_WRITE_TOKEN)")
	concurrency := fs.Int("concurrency", 2, "queries in flight at once")
	timeout := fs.Duration("timeout", 30*time.Second, "timeout of one request")
	var model abtest.ClickModel
	fs.Uint64Var(&model.Seed, "seed", 1, "the clicks' random seed")
	fs.Float64Var(&model.Decay, "click-decay", 1, "rank r is examined with probability 1/r^decay")
	fs.Float64Var(&model.Relevant, "click-relevant", 1, "P(click | examined, relevant)")
	fs.Float64Var(&model.Noise, "click-noise", 0, "P(click | examined, not relevant)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := model.Check(); err != nil {
		return err
	}
	switch {
	case *n < 1:
		return fmt.Errorf("-n: want at least 1, got %d", *n)
	case *repeat < 1:
		return fmt.Errorf("-repeat: want at least 1, got %d", *repeat)
	case *size < 1 || *size > 100:
		return fmt.Errorf("-size: want 1..100, got %d", *size)
	case *concurrency < 1:
		return fmt.Errorf("-concurrency: want at least 1, got %d", *concurrency)
	}
	cfg, err := l.load()
	if err != nil {
		return err
	}
	bearer := cmp.Or(*token, cfg.Server.WriteToken)
	if bearer == "" {
		return errors.New("-write-token: required (or server.write_token / ICICLE_SERVER_WRITE_TOKEN): /v1/click takes only authenticated clicks")
	}
	seen, err := readSeen(cmp.Or(*modelDir, cfg.Model.Dir))
	if err != nil {
		return err
	}
	labels, err := dataset.ReadQrels(*qrelsPath)
	if err != nil {
		return err
	}
	qs, err := dataset.ReadLabelled(*queries, *split, *n, labels, seen)
	if err != nil {
		return err
	}
	if len(qs) == 0 {
		return fmt.Errorf("-queries: no labelled query of split %q in %s", *split, *queries)
	}

	hc := &http.Client{Timeout: *timeout}
	base := strings.TrimRight(*sidecar, "/")
	type job struct{ id, text string }
	jobs := make(chan job)
	var mu sync.Mutex
	var imps []abtest.Impression
	var st simStats
	var wg sync.WaitGroup
	for range *concurrency {
		wg.Go(func() {
			for j := range jobs {
				imp, err := searchImpression(ctx, hc, base, j.id, j.text, *size)
				mu.Lock()
				if err != nil {
					st.searchErrors++
					if st.firstErr == nil {
						st.firstErr = err
					}
				} else {
					imps = append(imps, imp)
				}
				mu.Unlock()
			}
		})
	}
	start := time.Now()
send:
	for k := 1; k <= *repeat; k++ {
		for _, q := range qs {
			select {
			case jobs <- job{id: fmt.Sprintf("%s#%d", q.ID, k), text: q.Text}:
			case <-ctx.Done():
				break send
			}
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(imps) == 0 {
		return fmt.Errorf("no answer from %s/v1/search: %w", base, st.firstErr)
	}
	for _, imp := range imps {
		if imp.ImpressionID == "" {
			return fmt.Errorf("%s/v1/search answered without an impression_id: set ab.impression_log on the sidecar", base)
		}
	}
	clicks, oracle := abtest.Simulate(imps, labels, model)
	for _, c := range clicks {
		if err := postClick(ctx, hc, base, bearer, c); err != nil {
			st.clickErrors++
			if st.firstErr == nil {
				st.firstErr = err
			}
			continue
		}
		st.clicks++
	}
	arms := map[abtest.Arm]int{}
	for _, imp := range imps {
		arms[cmp.Or(imp.Arm, "(experiment off)")]++
	}
	fmt.Fprintf(stdout, "ab-simulate: %d queries x %d repeats sent to %s in %s: %d answers (arms %v), %d search errors; "+
		"%d clicks drawn from %s (seed %d, examination 1/r^%g, P(click|relevant) %g, noise %g), %d posted to /v1/click, %d failed.\n",
		len(qs), *repeat, base, time.Since(start).Round(time.Millisecond), len(imps), arms, st.searchErrors,
		len(clicks), *qrelsPath, model.Seed, cmp.Or(model.Decay, 1), cmp.Or(model.Relevant, 1), model.Noise, st.clicks, st.clickErrors)
	if oracle.FirstRelevantA+oracle.FirstRelevantB+oracle.FirstRelevantNone > 0 {
		fmt.Fprintf(stdout, "Labels (no clicks): the highest-ranked relevant result was team A's in %d interleaved answers, team B's in %d, absent in %d.\n",
			oracle.FirstRelevantA, oracle.FirstRelevantB, oracle.FirstRelevantNone)
	}
	if oracle.MRRA.N+oracle.MRRB.N > 0 {
		fmt.Fprintf(stdout, "Labels (no clicks): MRR of the first relevant result, arm A %.4f (n %d), arm B %.4f (n %d).\n",
			oracle.MRRA.Value, oracle.MRRA.N, oracle.MRRB.Value, oracle.MRRB.N)
	}
	fmt.Fprintf(stdout, "The labels favour arm %s. Now: icicle ab-report -impressions <ab.impression_log> -clicks <ab.click_log>\n",
		cmp.Or(oracle.Favoured, "neither"))
	if st.firstErr != nil {
		return fmt.Errorf("%d search and %d click requests failed; first: %w", st.searchErrors, st.clickErrors, st.firstErr)
	}
	return nil
}

type simStats struct {
	searchErrors, clickErrors, clicks int
	firstErr                          error
}

// searchImpression posts one query to /v1/search with X-Request-ID rid and returns the answer as the
// impression ab-report will read (its impression id, arm and the results with their teams).
func searchImpression(ctx context.Context, hc *http.Client, base, rid, query string, size int) (abtest.Impression, error) {
	body, _ := json.Marshal(map[string]any{"query": query, "size": size})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/search", bytes.NewReader(body))
	if err != nil {
		return abtest.Impression{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-ID", rid)
	var out struct {
		RequestID    string    `json:"request_id"`
		ImpressionID string    `json:"impression_id"`
		Mode         rank.Mode `json:"mode"`
		AB           *struct {
			Arm        abtest.Arm `json:"arm"`
			Experiment string     `json:"experiment"`
		} `json:"ab"`
		Results []abtest.Shown `json:"results"`
	}
	if err := client.DoJSON(hc, req, http.StatusOK, &out); err != nil {
		return abtest.Impression{}, err
	}
	imp := abtest.Impression{Time: time.Now().UTC(), ImpressionID: out.ImpressionID, RequestID: out.RequestID, Mode: out.Mode, Shown: out.Results}
	if out.AB != nil {
		imp.Arm, imp.Experiment = out.AB.Arm, out.AB.Experiment
	}
	return imp, nil
}

// postClick posts one click to /v1/click with the bearer token.
func postClick(ctx context.Context, hc *http.Client, base, token string, c abtest.Click) error {
	body, _ := json.Marshal(map[string]any{"impression_id": c.ImpressionID, "docid": c.DocID, "position": c.Position})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/click", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	return client.DoJSON(hc, req, http.StatusAccepted, nil)
}
