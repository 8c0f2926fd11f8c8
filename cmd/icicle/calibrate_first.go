package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/icicle-search/sidecar/retrieve"
)

// firstStageFit is the "fit" record of a params file: what the settings were fitted on and how they did.
type firstStageFit struct {
	Queries     int                `json:"queries"`
	QueriesFile string             `json:"queries_file"`
	Split       string             `json:"split"`
	Index       string             `json:"index"`
	Fields      []string           `json:"fields"`
	Encoder     string             `json:"encoder"`
	Objective   string             `json:"objective"`
	Result      retrieve.FitResult `json:"result"`
	Fitted      time.Time          `json:"fitted"`
}

// calibrateFirstStage is `icicle calibrate -first-stage FILE`: every labelled query is searched once,
// straight from Elasticsearch with the configured encoder (BM25's top depth, the kNN's top 100, every
// cosine exact), every setting of retrieve.Grid is replayed on what was found, and the best by Hits@1
// (then MRR@10) is written to FILE with its k-fold held-out score. The sidecar loads it with
// first_stage.params_file. A fit whose held-out score does not beat the setting served now (the
// configuration's, or its params_file's) on the same queries is refused and nothing is written, unless
// -force. No model runs: the first stage does not depend on it.
func calibrateFirstStage(ctx context.Context, f calibrateFlags, path string, out, log io.Writer) error {
	cfg, err := f.load()
	if err != nil {
		return err
	}
	qs, _, err := f.read(f.modelDir0(cfg.Model.Dir))
	if err != nil {
		return err
	}
	if len(qs) == 0 {
		return fmt.Errorf("no labelled queries of split %q in %s", f.split, f.queries)
	}
	logger := newLogger(cfg.Log, os.Stderr)
	enc, closeEnc, err := openIngestEncoder(cfg, 0, 1, logger)
	if err != nil {
		return err
	}
	if enc == nil {
		return fmt.Errorf("first_stage.encoder_dir is empty: there is nothing to fuse BM25 with")
	}
	defer closeEnc()
	es, err := newAdapter(cfg, enc.Dims(), logger)
	if err != nil {
		return err
	}
	defer es.Close()
	st, err := retrieve.New(es, enc, retrieve.DefaultParams, logger)
	if err != nil {
		return err
	}
	depth := cfg.FirstStage.Depth
	samples := make([]retrieve.Sample, len(qs))
	errs := make([]error, len(qs))
	start := time.Now()
	var mu sync.Mutex
	done := 0
	forEach(ctx, len(qs), f.concurrency, func(i int) {
		s, err := st.Gather(ctx, qs[i].Text, depth, 100)
		s.QueryID, s.Relevant = qs[i].ID, qs[i].Relevant
		samples[i], errs[i] = s, err
		mu.Lock()
		done++
		if done%100 == 0 {
			fmt.Fprintf(log, "calibrate: first stage: %d/%d queries searched\n", done, len(qs))
		}
		mu.Unlock()
	}, nil)
	if err := ctx.Err(); err != nil {
		return err
	}
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("query %s: %w", qs[i].ID, err)
		}
	}
	fmt.Fprintf(log, "calibrate: first stage: %d queries searched in %.1f s\n", len(qs), time.Since(start).Seconds())
	current, err := firstStageParams(cfg.FirstStage)
	if err != nil {
		return err
	}
	res, err := retrieve.Fit(samples, retrieve.Grid(depth), retrieve.FitOptions{Folds: f.folds, Anchor: &current, Z: f.shrink})
	if err != nil {
		return err
	}
	refused := res.Compare(samples, current)
	file := paramsFile{Params: res.Params}
	rec := firstStageFit{Queries: len(qs), QueriesFile: f.queries, Split: f.split, Index: es.Index(),
		Fields: cfg.Fields.Search, Encoder: enc.Name(), Objective: "Hits@1, then MRR@10", Result: res, Fitted: time.Now().UTC()}
	if file.Fit, err = json.Marshal(rec); err != nil {
		return err
	}
	p := res.Params
	fmt.Fprintf(out, "first stage fitted on %d queries of %s (split %q), index %s (BM25 over %s), encoder %s:\n", len(qs), f.queries, f.split,
		es.Index(), strings.Join(cfg.Fields.Search, ", "), enc.Name())
	fmt.Fprintf(out, "  chosen: method %s, dense_weight %s, rrf_k %g, depth %d, knn %d\n", p.Method, p.WeightText(), p.RRFK, p.Depth, p.KNN)
	if b := res.Passed; b != nil {
		fmt.Fprintf(out, "  the current setting is kept over the grid's best (method %s, dense_weight %s, rrf_k %g, knn %d: %.3f / %.3f in sample): not better by more than %g standard errors (-shrink)\n",
			b.Method, b.WeightText(), b.RRFK, b.KNN, res.PassedScore.Hits1, res.PassedScore.MRR10, f.shrink)
	}
	fmt.Fprintf(out, "  Hits@1 / MRR@10: chosen %.3f / %.3f (in sample), %.3f / %.3f held out (%d-fold); BM25 %.3f / %.3f; default %.3f / %.3f\n",
		res.Score.Hits1, res.Score.MRR10, res.HeldOut.Hits1, res.HeldOut.MRR10, res.Folds, res.BM25.Hits1, res.BM25.MRR10, res.Default.Hits1, res.Default.MRR10)
	fmt.Fprintf(out, "  current setting (%s): method %s, dense_weight %s, rrf_k %g, depth %d, knn %d: %.3f / %.3f\n",
		cmp.Or(cfg.FirstStage.ParamsFile, "the configuration"), current.Method, current.WeightText(), current.RRFK, current.Depth, current.KNN,
		res.Current.Hits1, res.Current.MRR10)
	if g := res.Gain; g != nil {
		fmt.Fprintf(out, "  Hits@1 held out less the current, query by query: %+.3f (95%% interval %+.3f to %+.3f)\n", g.Estimate, g.Low, g.High)
	}
	if refused != nil {
		if f.dryRun || f.force {
			fmt.Fprintf(out, "  %v\n", refused)
		} else {
			return fmt.Errorf("first stage: %s not written: %w (-force writes it anyway)", path, refused)
		}
	}
	if f.dryRun {
		return nil
	}
	b, err := json.MarshalIndent(file, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	fmt.Fprintf(out, "wrote %s (serve it with first_stage.params_file)\n", path)
	return nil
}
