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
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/internal/client"
	"github.com/icicle-search/sidecar/internal/dataset"
	"github.com/icicle-search/sidecar/internal/eval"
	"github.com/icicle-search/sidecar/plugin"
)

// evalFlags are the flags of `icicle eval`.
type evalFlags struct {
	labelledFlags
	corpus, out, reader             string
	readerN                         int
	concurrency, size, bins, warmup int
	sweep, paperShots               []int
	seed                            uint64
	timeout                         time.Duration
}

// evaluate is `icicle eval` (alias `compare`): labelled queries through arm A (Elasticsearch BM25 over all
// documents, by the adapter) and arm B (the running sidecar's /v1/search), then the N-shot sweep (the BM25
// top N new documents posted to /v1/rerank) and the paper's protocol (gold + N-1 random new documents, or N
// random ones for seen-document queries, posted to /v1/rerank). It prints markdown tables and, with -out,
// writes report.json, report.md and PNG plots. docs/evaluation.md defines every number.
func evaluate(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	var f evalFlags
	f.register(fs, "dev", 100, "Elasticsearch connection, model.dir", "")
	fs.StringVar(&f.corpus, "corpus", "data/nq_qed/corpus.jsonl.gz", "corpus JSONL whose documents not in seen_docids.txt are the paper protocol's random pool (D_new)")
	fs.IntVar(&f.concurrency, "concurrency", 4, "requests in flight at once; keep within the sidecar's concurrency.max_inflight + queue_size or answers fall back as overloaded")
	fs.IntVar(&f.size, "size", 10, "results asked of every arm (Hits@10 and MRR@10 need 10)")
	fs.IntVar(&f.warmup, "warmup", 5, "queries sent through BM25 and /v1/search first and not scored (cold caches skew latency and trip the ES budget)")
	fs.IntVar(&f.bins, "bins", 10, "equal-width bins of the calibration errors")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the paper protocol's random documents (per query, independent of -concurrency)")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "timeout of one request to the sidecar")
	fs.StringVar(&f.out, "out", "", "directory to write report.json, report.md and PNG plots into (created)")
	fs.StringVar(&f.reader, "reader", "", "base URL of a second sidecar serving a reader profile with policy.mode model (icicle serve -profile NAME): arm R, its own ranking, beside A, F and B on the same queries")
	fs.IntVar(&f.readerN, "reader-n", 20, "queries per subset sent to -reader (the first of each subset); a reader is slower than the first stage")
	sweep := fs.String("sweep", "3,10,20,50,100", "N of the N-shot sweep (comma-separated; empty: none)")
	paper := fs.String("paper-shots", "100", "N of the paper protocol (comma-separated, e.g. 3,10,20,50,100 for the appendix table; empty: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if f.sweep, err = parseInts(*sweep, 1, 100); err != nil {
		return fmt.Errorf("-sweep: %w", err)
	}
	if f.paperShots, err = parseInts(*paper, 2, 100); err != nil {
		return fmt.Errorf("-paper-shots: %w", err)
	}
	if f.n < 1 || f.concurrency < 1 || f.size < 1 || f.size > 100 || f.bins < 1 || f.warmup < 0 {
		return errors.New("-n, -concurrency and -bins must be positive, -warmup not negative, -size within 1..100")
	}
	return runEval(ctx, f, out, os.Stderr)
}

// labelledFlags are the flags of the commands that send labelled queries (BEIR queries + qrels) to a
// running sidecar: eval, calibrate and ab-simulate.
type labelledFlags struct {
	configFlags
	sidecar, queries, qrels, split, modelDir string
	n                                        int
}

// register defines the flags on fs with the command's default split and n; configFor says what the command
// reads from the config file, sidecarNeeds what the running sidecar must have set ("" for nothing).
func (l *labelledFlags) register(fs *flag.FlagSet, split string, n int, configFor, sidecarNeeds string) {
	sidecarHelp := "base URL of the running sidecar"
	if sidecarNeeds != "" {
		sidecarHelp += " (" + sidecarNeeds + ")"
	}
	l.configFlags.register(fs, "YAML config file ("+configFor+")")
	fs.StringVar(&l.sidecar, "sidecar", "http://127.0.0.1:8080", sidecarHelp)
	fs.StringVar(&l.queries, "queries", "data/nq_qed/queries.jsonl.gz", "BEIR queries JSONL (.gz allowed): qid (or _id), query (or text), optional split")
	fs.StringVar(&l.qrels, "qrels", "data/nq_qed/qrels.tsv", "qrels TSV: qid, docid, relevance (header line allowed)")
	fs.StringVar(&l.split, "split", split, "only queries with this split value (empty: all)")
	fs.IntVar(&l.n, "n", n, "queries per subset: the first n seen-document and the first n new-document queries of the split, in file order")
	fs.StringVar(&l.modelDir, "model-dir", "", "model directory whose seen_docids.txt splits queries into seen/new (default: model.dir)")
}

// read reads the labelled queries: qrels, then the queries of the split, each tagged seen or new by
// modelDir's seen corpus, which it also returns.
func (l labelledFlags) read(modelDir string) ([]dataset.Labelled, map[string]bool, error) {
	seen, err := readSeen(modelDir)
	if err != nil {
		return nil, nil, err
	}
	qrels, err := dataset.ReadQrels(l.qrels)
	if err != nil {
		return nil, nil, err
	}
	qs, err := dataset.ReadLabelled(l.queries, l.split, l.n, qrels, seen)
	return qs, seen, err
}

// parseInts reads a comma-separated list of integers within lo..hi, sorted and deduplicated.
func parseInts(s string, lo, hi int) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		v, err := strconv.Atoi(part)
		if err != nil || v < lo || v > hi {
			return nil, fmt.Errorf("%q: want integers within %d..%d", part, lo, hi)
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// sameIndex refuses an evaluation whose BM25 arm (arm A: this process's elasticsearch.index) would search
// another index than the sidecar serves (its /v1/model "index"; empty from a sidecar that does not say it): the
// arms would rank different corpora, and the report would compare nothing.
func sameIndex(sidecar, own string) error {
	if sidecar == "" || sidecar == own {
		return nil
	}
	return fmt.Errorf("the sidecar serves index %q and this eval's BM25 arm would search %q: give eval the same "+
		"elasticsearch.index (ICICLE_ELASTICSEARCH_INDEX=%s)", sidecar, own, sidecar)
}

// evalRun holds what every phase of one evaluation shares.
type evalRun struct {
	f      evalFlags
	es     *adapter.Adapter
	client *client.Client
	qs     []dataset.Labelled
	log    io.Writer
}

func runEval(ctx context.Context, f evalFlags, out, log io.Writer) error {
	started := time.Now()
	cfg, err := f.load()
	if err != nil {
		return err
	}
	dir := cmp.Or(f.modelDir, cfg.Model.Dir)
	qs, seen, err := f.read(dir)
	if err != nil {
		return err
	}
	if len(qs) == 0 {
		return fmt.Errorf("no labelled queries of split %q in %s", f.split, f.queries)
	}
	es, err := newAdapter(cfg, 0, nil)
	if err != nil {
		return err
	}
	defer es.Close()
	client := client.New(f.sidecar, f.timeout, f.concurrency)
	var model plugin.ModelEndpoint
	if err := client.Get(ctx, "/v1/model", &model); err != nil {
		return fmt.Errorf("sidecar %s not answering (start it with `icicle serve`): %w", f.sidecar, err)
	}
	if err := sameIndex(model.Index, es.Index()); err != nil {
		return err
	}
	r := &evalRun{f: f, es: es, client: client, qs: qs, log: log}
	meta := eval.Meta{Queries: map[string]int{}, QueriesFile: f.queries, QrelsFile: f.qrels, Split: f.split, ModelDir: dir,
		SeenDocIDs: len(seen), Sidecar: f.sidecar, Model: model.Name, Index: es.Index(), Concurrency: f.concurrency,
		Seed: f.seed, Bins: f.bins, Started: started.UTC()}
	for _, q := range qs {
		meta.Queries[q.Subset]++
	}

	for _, q := range qs[:min(f.warmup, len(qs))] {
		_, _ = es.SearchAll(ctx, q.Text, f.size)
		_, _ = client.Search(ctx, plugin.SearchRequest{Query: q.Text, Size: f.size})
	}
	var arms []eval.Arm
	a, first, b := r.armsAB(ctx)
	arms = append(arms, a, first, b)
	if f.reader != "" {
		rd, err := r.readerArm(ctx, a, first, b)
		if err != nil {
			return err
		}
		arms = append(arms, rd...)
	}
	if len(f.sweep) > 0 {
		arms = append(arms, r.sweep(ctx)...)
	}
	if len(f.paperShots) > 0 {
		pool, err := r.newPool(ctx, seen)
		if err != nil {
			return err
		}
		meta.NewDocIDs = len(pool)
		arms = append(arms, r.paper(ctx, pool)...)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	meta.TookS = time.Since(started).Seconds()
	rep := eval.Report{Meta: meta, Arms: arms}
	rep.WriteMarkdown(out)
	if f.out != "" {
		if err := writeReport(f.out, rep); err != nil {
			return err
		}
		fmt.Fprintf(log, "eval: wrote %s\n", f.out)
	}
	return allFailed(arms)
}

// allFailed is an error when some arm got no answer at all: the numbers would be zeros, not results.
func allFailed(arms []eval.Arm) error {
	for _, a := range arms {
		s := a.Summaries[eval.SubsetAll]
		if s.N > 0 && s.Errors == s.N {
			first := a.Outcomes[0].Err
			return fmt.Errorf("arm %q: every request failed (first: %s)", a.Name, first)
		}
	}
	return nil
}

func writeReport(dir string, rep eval.Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	var js, md bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	rep.WriteMarkdown(&md)
	for name, b := range map[string][]byte{"report.json": js.Bytes(), "report.md": md.Bytes()} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	}
	if _, err := eval.WritePlots(dir, rep); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// armsAB runs, on every query, arm A (BM25 over all documents, by the adapter: what a team runs today),
// the first stage alone (the sidecar's /v1/search with policy first_stage: BM25 and the dense encoder, the model
// not called) and arm B (the sidecar's /v1/search under its policy). For arm B it reads the model's
// candidates from the response to tell whether the relevant document was among those that fitted the
// prompt.
func (r *evalRun) armsAB(ctx context.Context) (eval.Arm, eval.Arm, eval.Arm) {
	a := make([]eval.Outcome, len(r.qs))
	f := make([]eval.Outcome, len(r.qs))
	b := make([]eval.Outcome, len(r.qs))
	r.parallel(ctx, "A/B", func(i int) {
		q := r.qs[i]
		a[i] = r.outcome(q)
		a[i].Route = eval.RouteBM25
		start := time.Now()
		hits, err := r.es.SearchAll(ctx, q.Text, r.f.size)
		a[i].Latency = time.Since(start)
		if err != nil {
			a[i].Err, a[i].Route = err.Error(), ""
		}
		for _, h := range hits {
			a[i].Ranked = append(a[i].Ranked, h.DocID)
		}

		f[i] = r.outcome(q)
		start = time.Now()
		resp, err := r.client.Search(ctx, plugin.SearchRequest{Query: q.Text, Size: r.f.size, Policy: plugin.PolicyFirstStage})
		f[i].Latency = time.Since(start)
		if err != nil {
			f[i].Err = err.Error()
		} else {
			r.fill(&f[i], resp)
		}

		b[i] = r.outcome(q)
		start = time.Now()
		resp, err = r.client.Search(ctx, plugin.SearchRequest{Query: q.Text, Size: r.f.size})
		b[i].Latency = time.Since(start)
		if err != nil {
			b[i].Err = err.Error()
			return
		}
		r.fill(&b[i], resp)
	})
	return eval.NewArm("A: BM25 all docs", eval.ProtocolBM25All, 0, a, r.f.bins),
		eval.NewArm("F: first stage alone", eval.ProtocolFirstStage, 0, f, r.f.bins),
		eval.NewArm("B: sidecar /v1/search", eval.ProtocolSearch, 0, b, r.f.bins)
}

// readerArm asks the reader sidecar (-reader) for its own ranking on the first -reader-n queries of each
// subset, and returns arm R with arms A, F and B cut to the same queries (ProtocolOnReaderQueries).
func (r *evalRun) readerArm(ctx context.Context, arms ...eval.Arm) ([]eval.Arm, error) {
	client := client.New(r.f.reader, r.f.timeout, 1)
	var model plugin.ModelEndpoint
	if err := client.Get(ctx, "/v1/model", &model); err != nil {
		return nil, fmt.Errorf("-reader %s not answering: %w", r.f.reader, err)
	}
	if !model.Reader || model.Policy.Mode != plugin.PolicyModel {
		return nil, fmt.Errorf("-reader %s: want a sidecar serving a reader with policy.mode model (icicle serve -profile NAME, "+
			"ICICLE_POLICY_MODE=model), got reader %v, policy %q", r.f.reader, model.Reader, model.Policy.Mode)
	}
	if err := sameIndex(model.Index, r.es.Index()); err != nil {
		return nil, err
	}
	var idx []int
	taken := map[string]int{}
	for i, q := range r.qs {
		if taken[q.Subset] < r.f.readerN {
			taken[q.Subset]++
			idx = append(idx, i)
		}
	}
	outs := make([]eval.Outcome, len(idx))
	start := time.Now()
	// One at a time: a reader on a few cores answers one query at a time fastest (its own admission control
	// would answer more at once from the first stage, as overloaded).
	forEach(ctx, len(idx), 1, func(k int) {
		q := r.qs[idx[k]]
		outs[k] = r.outcome(q)
		t0 := time.Now()
		resp, err := client.Search(ctx, plugin.SearchRequest{Query: q.Text, Size: r.f.size})
		outs[k].Latency = time.Since(t0)
		if err != nil {
			outs[k].Err = err.Error()
			return
		}
		r.fill(&outs[k], resp)
	}, nil)
	fmt.Fprintf(r.log, "eval: %-32s %4d queries %6.1f s\n", "reader "+model.Name, len(idx), time.Since(start).Seconds())
	out := make([]eval.Arm, 0, len(arms)+1)
	for _, a := range arms {
		cut := make([]eval.Outcome, len(idx))
		for k, i := range idx {
			cut[k] = a.Outcomes[i]
		}
		out = append(out, eval.NewArm(a.Name, eval.ProtocolOnReaderQueries, 0, cut, r.f.bins))
	}
	name := "R: reader " + model.Name
	if model.Profile != "" {
		name = "R: reader profile " + model.Profile
	}
	return append(out, eval.NewArm(name, eval.ProtocolReader, 0, outs, r.f.bins)), nil
}

// sweep posts the BM25 top N new documents of every query to /v1/rerank, for each N of -sweep. The top
// max(N) is fetched once per query; a smaller N is its prefix.
func (r *evalRun) sweep(ctx context.Context) []eval.Arm {
	maxN := slices.Max(r.f.sweep)
	top := make([][]adapter.Hit, len(r.qs))
	errs := make([]error, len(r.qs))
	r.parallel(ctx, "BM25 top N over new documents", func(i int) {
		top[i], errs[i] = r.es.SearchNew(ctx, r.qs[i].Text, maxN)
	})
	var arms []eval.Arm
	for _, n := range r.f.sweep {
		outs := make([]eval.Outcome, len(r.qs))
		r.parallel(ctx, fmt.Sprintf("sweep N=%d", n), func(i int) {
			if errs[i] != nil {
				outs[i] = r.outcome(r.qs[i])
				outs[i].Err = errs[i].Error()
				return
			}
			outs[i] = r.rerank(ctx, r.qs[i], top[i][:min(n, len(top[i]))])
		})
		arms = append(arms, eval.NewArm(fmt.Sprintf("top %d", n), eval.ProtocolTopN, n, outs, r.f.bins))
	}
	return arms
}

// newPool returns the stored documents of the corpus that are not in the seen corpus: D_new, the paper
// protocol's random documents, with the titles and summaries the index holds.
func (r *evalRun) newPool(ctx context.Context, seen map[string]bool) ([]adapter.Hit, error) {
	cr, err := adapter.OpenCorpus(r.f.corpus, adapter.CorpusLimits{})
	if err != nil {
		return nil, fmt.Errorf("paper protocol pool: %w", err)
	}
	defer cr.Close()
	var ids []string
	for d := range cr.All() {
		if !seen[d.DocID] {
			ids = append(ids, d.DocID)
		}
	}
	if err := cr.Err(); err != nil {
		return nil, fmt.Errorf("paper protocol pool: %w", err)
	}
	var pool []adapter.Hit
	for chunk := range slices.Chunk(ids, 500) {
		found, err := r.es.Resolve(ctx, chunk)
		if err != nil {
			return nil, fmt.Errorf("paper protocol pool: %w", err)
		}
		for _, d := range chunk {
			if h, ok := found[d]; ok {
				pool = append(pool, h)
			}
		}
	}
	if len(pool) < slices.Max(r.f.paperShots)+1 {
		return nil, fmt.Errorf("paper protocol pool: %d of the corpus's %d new documents are in index %s; ingest %s first",
			len(pool), len(ids), r.es.Index(), r.f.corpus)
	}
	fmt.Fprintf(r.log, "eval: paper protocol pool: %d new documents (of %d in %s)\n", len(pool), len(ids), r.f.corpus)
	return pool, nil
}

// paper runs the paper's protocol for each N of -paper-shots (eval.PaperContext): a new-document query
// gets its gold document at a random position among N-1 random documents of the pool; a seen-document
// query gets N random documents (all-noise). The draws depend only on -seed and the query id.
func (r *evalRun) paper(ctx context.Context, pool []adapter.Hit) []eval.Arm {
	index := make(map[string]int, len(pool))
	for i, h := range pool {
		index[h.DocID] = i
	}
	var arms []eval.Arm
	for _, n := range r.f.paperShots {
		outs := make([]eval.Outcome, len(r.qs))
		r.parallel(ctx, fmt.Sprintf("paper N=%d", n), func(i int) {
			q := r.qs[i]
			gold := -1
			if q.Subset == eval.SubsetNew {
				// The first relevant document in the pool, in docid order (nq_qed has one per query).
				for _, d := range sortedKeys(q.Relevant) {
					if j, ok := index[d]; ok {
						gold = j
						break
					}
				}
				if gold < 0 {
					outs[i] = r.outcome(q)
					outs[i].Err = "paper protocol: no relevant document of the query is in the index"
					return
				}
			}
			picks := eval.PaperContext(q.ID, r.f.seed, n, len(pool), gold, func(j int) bool { return q.Relevant[pool[j].DocID] })
			hits := make([]adapter.Hit, len(picks))
			for k, j := range picks {
				hits[k] = pool[j]
			}
			outs[i] = r.rerank(ctx, q, hits)
		})
		arms = append(arms, eval.NewArm(fmt.Sprintf("paper %d", n), eval.ProtocolPaper, n, outs, r.f.bins))
	}
	return arms
}

// rerank posts hits to /v1/rerank as Elasticsearch hits and scores the answer.
func (r *evalRun) rerank(ctx context.Context, q dataset.Labelled, hits []adapter.Hit) eval.Outcome {
	o := r.outcome(q)
	req := plugin.RerankRequest{Query: q.Text, Size: r.f.size, Hits: make([]plugin.ESHit, len(hits))}
	for i, h := range hits {
		src := plugin.HitSource{Title: &h.Title, DocID: &h.DocID}
		if h.Summary != "" {
			src.Summary = &h.Summary
		}
		raw, _ := json.Marshal(src) // strings only: cannot fail
		req.Hits[i] = plugin.ESHit{ID: h.ID, Score: &h.Score, Source: raw}
	}
	start := time.Now()
	resp, err := r.client.Rerank(ctx, req)
	o.Latency = time.Since(start)
	if err != nil {
		o.Err = err.Error()
		return o
	}
	r.fill(&o, resp)
	return o
}

// outcome starts q's outcome.
func (r *evalRun) outcome(q dataset.Labelled) eval.Outcome {
	return eval.Outcome{QueryID: q.ID, Relevant: q.Relevant, Subset: q.Subset}
}

// fill copies a sidecar response into o.
func (r *evalRun) fill(o *eval.Outcome, resp plugin.Response) {
	for j, res := range resp.Results {
		o.Ranked = append(o.Ranked, res.DocID)
		if j == 0 {
			o.Route = string(res.Provenance)
		}
	}
	if resp.RouterProb != nil { // the model ran: was a relevant document among the candidates it read?
		in := false
		for _, d := range resp.Context {
			in = in || o.Relevant[d]
		}
		o.InContext = &in
	}
	o.Fallback = resp.Mode == plugin.ModeFirstStageFallback
	o.FallbackReason = resp.FallbackReason
	o.RouterProb = resp.RouterProb
	if g := resp.Gate; g != nil && g.ModelTop != "" { // the model's own route, whatever the gate showed
		o.ModelRoute = eval.RouteParametric
		if g.Features.RouteCopy == 1 {
			o.ModelRoute = eval.RouteCopy
		}
	}
}

// parallel runs fn for every query index on -concurrency workers and reports the phase's time.
func (r *evalRun) parallel(ctx context.Context, phase string, fn func(i int)) {
	start := time.Now()
	forEach(ctx, len(r.qs), r.f.concurrency, fn, nil)
	fmt.Fprintf(r.log, "eval: %-32s %4d queries %6.1f s\n", phase, len(r.qs), time.Since(start).Seconds())
}

// forEach runs fn(i) for i in 0..n-1 on workers goroutines and returns when all have run, or when ctx ends
// (the indices not yet handed out are then skipped). sent, if set, is called after each index is handed out.
func forEach(ctx context.Context, n, workers int, fn func(i int), sent func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				fn(i)
			}
		})
	}
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		next <- i
		if sent != nil {
			sent(i)
		}
	}
	close(next)
	wg.Wait()
}

// sortedKeys returns a set's keys in order, for deterministic choices.
func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
