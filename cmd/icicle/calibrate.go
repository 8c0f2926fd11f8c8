package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/internal/client"
	"github.com/icicle-search/sidecar/internal/dataset"
	"github.com/icicle-search/sidecar/internal/eval"
	"github.com/icicle-search/sidecar/internal/gate"
	"github.com/icicle-search/sidecar/plugin"
	"github.com/icicle-search/sidecar/retrieve"
)

// calibrateFlags are the flags of `icicle calibrate`.
type calibrateFlags struct {
	labelledFlags
	subsets, outDir       string
	folds, concurrency    int
	shrink                float64
	timeout               time.Duration
	dryRun, force         bool
	samplesOut, samplesIn string
	docids                string
	firstStage            string
}

// modelDir0 is -model-dir, else the configured model.dir.
func (f calibrateFlags) modelDir0(configured string) string { return cmp.Or(f.modelDir, configured) }

// calibrate is `icicle calibrate`: labelled queries (BEIR queries + qrels, as `icicle eval` reads them)
// through a running sidecar with policy.mode gate, whose responses carry the gate's features and the
// model's and BM25's first docids; the gate is fitted on them with k-fold cross-validation (internal/gate)
// and written as gate.json into the model directory. Going through the sidecar means the features are the
// ones the server computes, from the same searches, on the user's own index.
func calibrate(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("calibrate", flag.ContinueOnError)
	var f calibrateFlags
	// The split defaults to train: never the queries `icicle eval` reports.
	f.register(fs, "train", 300, "model.dir", "policy.mode gate, serving the model to calibrate")
	fs.StringVar(&f.subsets, "subsets", "new,seen", "comma-separated subsets to fit on: new (relevant document not in seen_docids.txt), seen")
	fs.StringVar(&f.outDir, "out", "", "directory to write gate.json into (default: -model-dir)")
	fs.IntVar(&f.folds, "folds", 5, "k of the k-fold cross-validation that picks the threshold")
	fs.IntVar(&f.concurrency, "concurrency", 2, "requests in flight at once; within the sidecar's concurrency.max_inflight + queue_size")
	fs.DurationVar(&f.timeout, "timeout", 60*time.Second, "timeout of one request to the sidecar")
	fs.BoolVar(&f.dryRun, "dry-run", false, "fit and print, but write nothing")
	fs.Float64Var(&f.shrink, "shrink", retrieve.DefaultShrinkZ, "with -first-stage: keep the current setting unless the grid's best beats it by more than this many standard errors of the per-query Hits@1 difference (0: take the best)")
	fs.BoolVar(&f.force, "force", false, "with -first-stage: write the fit even when it is not better held out than the current setting")
	fs.StringVar(&f.docids, "docids", "", "only queries with a relevant document in this file (one docid a line): e.g. the documents the model never trained on")
	fs.StringVar(&f.samplesOut, "samples-out", "", "also write every labelled query's features and labels to this JSONL file")
	fs.StringVar(&f.samplesIn, "samples", "", "fit on a -samples-out file instead of asking the sidecar (refit without re-running the model)")
	fs.StringVar(&f.firstStage, "first-stage", "", "fit the first stage's fusion instead of the gate, straight from Elasticsearch with first_stage.encoder_dir (no sidecar), and write it to this JSON file (first_stage.params_file); -split '' and a large -n for sets without splits")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if f.n < 1 || f.concurrency < 1 || f.folds < 2 {
		return errors.New("-n and -concurrency must be positive, -folds at least 2")
	}
	if f.shrink < 0 || math.IsNaN(f.shrink) {
		return fmt.Errorf("-shrink %v: want a number of standard errors, 0 or more", f.shrink)
	}
	if f.firstStage != "" {
		return calibrateFirstStage(ctx, f, f.firstStage, out, os.Stderr)
	}
	return runCalibrate(ctx, f, out, os.Stderr)
}

func runCalibrate(ctx context.Context, f calibrateFlags, out, log io.Writer) error {
	cfg, err := f.load()
	if err != nil {
		return err
	}
	dir := cmp.Or(f.modelDir, cfg.Model.Dir)
	outDir := cmp.Or(f.outDir, dir)
	if f.samplesIn != "" {
		rows, err := readSamples(f.samplesIn)
		if err != nil {
			return err
		}
		var ss []gate.Sample
		perSubset := map[string]int{}
		model := ""
		for i, r := range rows {
			ss = append(ss, r.Sample())
			perSubset[r.Subset]++
			model = r.Model
			if !maps.Equal(r.Serving, rows[0].Serving) {
				return fmt.Errorf("samples %s: line %d was answered under other settings than line 1 (serving %v, not %v): fit each setting's samples on their own",
					f.samplesIn, i+1, r.Serving, rows[0].Serving)
			}
		}
		// The runs the samples came from (a file may join several, e.g. new- and seen-document runs).
		var runs []string
		for _, r := range rows {
			if r.Data != "" && !slices.Contains(runs, r.Data) {
				runs = append(runs, r.Data)
			}
		}
		// the file's name, not its path (as -docids): gate.json is committed with the model and read on other machines
		data := fmt.Sprintf("refitted from %s (new %d, seen %d)", filepath.Base(f.samplesIn), perSubset[eval.SubsetNew], perSubset[eval.SubsetSeen])
		if len(runs) > 0 {
			data = strings.Join(runs, " | ") + "; " + data
		}
		var serving map[string]string
		if len(rows) > 0 {
			serving = rows[0].Serving
		}
		return fitAndWrite(ss, data, model, serving, f, outDir, out)
	}
	all, _, err := f.read(dir)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for s := range strings.SplitSeq(f.subsets, ",") {
		switch s = strings.TrimSpace(s); s {
		case eval.SubsetNew, eval.SubsetSeen:
			want[s] = true
		case "":
		default:
			return fmt.Errorf("-subsets: %q: want new, seen", s)
		}
	}
	var only map[string]bool
	if f.docids != "" {
		ids, err := inference.ReadDocIDs(f.docids)
		if err != nil {
			return fmt.Errorf("-docids: %w", err)
		}
		only = make(map[string]bool, len(ids))
		for _, d := range ids {
			only[d] = true
		}
	}
	nDocIDs := len(only)
	var qs []dataset.Labelled
	for _, q := range all {
		if !want[q.Subset] {
			continue
		}
		keep := only == nil
		for d := range q.Relevant {
			keep = keep || only[d]
		}
		if keep {
			qs = append(qs, q)
		}
	}
	if len(qs) < f.folds {
		return fmt.Errorf("%d labelled queries of split %q, subsets %q in %s: want at least -folds (%d)", len(qs), f.split, f.subsets, f.queries, f.folds)
	}
	client := client.New(f.sidecar, f.timeout, f.concurrency)
	var model plugin.ModelInfo
	if err := client.Get(ctx, "/v1/model", &model); err != nil {
		return fmt.Errorf("sidecar %s not answering (start it with `icicle serve`, policy.mode gate): %w", f.sidecar, err)
	}

	var serving map[string]string // nil from a sidecar that does not say
	if model.Serving != nil {
		serving = *model.Serving
	}
	start := time.Now()
	samples := make([]*gate.Sample, len(qs))
	errs := make([]error, len(qs))
	skipped := make([]string, len(qs))
	forEach(ctx, len(qs), f.concurrency, func(i int) {
		resp, err := client.Search(ctx, plugin.SearchRequest{Query: qs[i].Text, Size: 10})
		switch {
		case err != nil:
			errs[i] = err
		case resp.Mode == plugin.ModeFirstStageFallback:
			skipped[i] = resp.FallbackReason
		case resp.Gate == nil:
			errs[i] = fmt.Errorf("answer in mode %q without a gate section: run the sidecar with policy.mode gate", resp.Mode)
		case resp.Gate.ModelTop == "":
			errs[i] = fmt.Errorf("the sidecar did not run the model (%s): run it with experimental.run_model_when_gate_never true", resp.Gate.Reason)
		default:
			g := resp.Gate
			samples[i] = &gate.Sample{Features: g.Features, ModelRight: qs[i].Relevant[g.ModelTop], BM25Right: qs[i].Relevant[g.FirstStageTop]}
		}
	}, func(i int) {
		if (i+1)%50 == 0 {
			fmt.Fprintf(log, "calibrate: %d/%d queries (%.0f s)\n", i+1, len(qs), time.Since(start).Seconds())
		}
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	var ss []gate.Sample
	var rows []sampleRow
	fallbacks := map[string]int{}
	perSubset := map[string]int{}
	for i, s := range samples {
		if errs[i] != nil {
			return fmt.Errorf("query %s: %w", qs[i].ID, errs[i])
		}
		if s == nil {
			fallbacks[skipped[i]]++
			continue
		}
		ss = append(ss, *s)
		rows = append(rows, sampleRow{QueryID: qs[i].ID, Subset: qs[i].Subset, Model: model.Name, Serving: serving, Features: s.Features,
			ModelRight: s.ModelRight, BM25Right: s.BM25Right})
		perSubset[qs[i].Subset]++
	}
	data := fmt.Sprintf("%s + %s, split %q, subsets %s (new %d, seen %d; first %d each), index %s via %s",
		f.queries, f.qrels, f.split, f.subsets, perSubset[eval.SubsetNew], perSubset[eval.SubsetSeen], f.n, cfg.Elasticsearch.Index, f.sidecar)
	if f.docids != "" {
		// the file's name and size, not its path: gate.json is committed with the model and read on other machines
		data += fmt.Sprintf(", relevant document among the %d docids of %s", nDocIDs, filepath.Base(f.docids))
	}
	fmt.Fprintf(out, "calibrate: %d queries answered by the model in %.0f s (fallbacks skipped: %v)\n", len(ss), time.Since(start).Seconds(), fallbacks)
	if f.samplesOut != "" {
		for i := range rows {
			rows[i].Data = data
		}
		if err := writeSamples(f.samplesOut, rows); err != nil {
			return err
		}
	}
	return fitAndWrite(ss, data, model.Name, serving, f, outDir, out)
}

// fitAndWrite fits the gate, prints what it found and writes gate.json into outDir.
func fitAndWrite(ss []gate.Sample, data, model string, serving map[string]string, f calibrateFlags, outDir string, out io.Writer) error {
	g, err := gate.Fit(ss, gate.FitOptions{Folds: f.folds, Info: gate.FitInfo{Data: data, Model: model, Serving: serving}})
	if err != nil {
		return fmt.Errorf("fit the gate: %w", err)
	}
	fi := g.Fit
	fmt.Fprintf(out, "  model top != BM25 top on %d of %d; promoting would be right on %d, wrong on %d\n", fi.Changes, fi.N, fi.Positives, fi.Negatives)
	if g.Never {
		fmt.Fprintf(out, "  gate: NEVER fires: %s. The model is not trusted over BM25 on this data.\n", fi.Note)
	} else {
		fmt.Fprintf(out, "  gate: threshold %.4f; %d-fold CV: %d right, %d wrong promotions (gain %+d; per fold %v)\n",
			g.Threshold, fi.Folds, fi.CVRight, fi.CVWrong, fi.CVGain, fi.FoldGains)
	}
	if f.dryRun {
		return nil
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("write gate: %w", err)
	}
	path, err := g.Save(outDir)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "calibrate: wrote %s (reload the model: SIGHUP or POST /v1/admin/model)\n", path)
	return nil
}

// sampleRow is one line of a -samples-out file.
type sampleRow struct {
	QueryID string `json:"qid"`
	Subset  string `json:"subset"`
	Model   string `json:"model"`
	Data    string `json:"data"`
	// Serving is the sidecar's serving section (/v1/model) when the query was answered.
	Serving    map[string]string `json:"serving,omitempty"`
	Features   gate.Features     `json:"features"`
	ModelRight bool              `json:"model_right"`
	BM25Right  bool              `json:"bm25_right"`
}

func (r sampleRow) Sample() gate.Sample {
	return gate.Sample{Features: r.Features, ModelRight: r.ModelRight, BM25Right: r.BM25Right}
}

func writeSamples(path string, rows []sampleRow) error {
	var b strings.Builder
	for _, r := range rows {
		line, err := json.Marshal(r)
		if err != nil {
			return err
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write samples: %w", err)
	}
	return nil
}

func readSamples(path string) ([]sampleRow, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read samples: %w", err)
	}
	var rows []sampleRow
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r sampleRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("read samples: %s:%d: %w", path, i+1, err)
		}
		rows = append(rows, r)
	}
	return rows, nil
}
