package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/internal/compress"
)

// enrich is `icicle enrich`: it gives every document of the index what the sidecar needs and lacks (the
// first stage's vector, a summary, the seen flag) with partial updates of the sidecar's own fields alone,
// in the sidecar's layout or in a team's own index (config fields.*). Resumable: an interrupted run leaves
// what it wrote, and the next run does only the rest.
func enrich(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("enrich", flag.ContinueOnError)
	var cf configFlags
	cf.register(fs, "YAML config file (Elasticsearch connection, fields.*, first_stage.encoder_dir, compressor)")
	page := fs.Int("page", 128, "documents read, enriched and written at once")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	vectors := fs.Bool("vectors", true, "add the first stage's vector (first_stage.encoder_dir) where it is missing or another encoder's")
	summaries := fs.Bool("summaries", true, "add a summary (the compressor of compressor.kind) where there is none")
	seenFlags := fs.Bool("seen", true, "add the seen flag where there is none: true for the docids of the model's seen_docids.txt")
	modelDir := fs.String("model-dir", "", "model directory whose seen_docids.txt marks documents seen (default: model.dir)")
	encFlags := registerEncoderFlags(fs)
	sliceFlag := fs.String("slice", "", "I/N: enrich only part I (0-based) of N, one worker of N on other machines or processes; N at most the index's primary shards")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := encFlags.check(); err != nil {
		return err
	}
	if *page < 1 || *page > 10000 {
		return fmt.Errorf("-page %d: want 1..10000", *page)
	}
	slice, slices, err := parseSlice(*sliceFlag)
	if err != nil {
		return err
	}
	cfg, err := cf.load()
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log, os.Stderr)
	var opts adapter.EnrichOptions
	dims := 0
	if *vectors {
		if cfg.FirstStage.EncoderDir == "" {
			return errors.New("-vectors: first_stage.encoder_dir is empty: there is no encoder to make vectors with (or -vectors=false)")
		}
		enc, closeEnc, err := openIngestEncoder(cfg, *encFlags.threads, encFlags.passageRuns(), log)
		if err != nil {
			return err
		}
		defer closeEnc()
		opts.Embed, opts.VectorModel, dims = embedDocs(enc), enc.Name(), enc.Dims()
	}
	if *summaries {
		comp, workers, err := newCompressor(cfg.Compressor)
		if err != nil {
			return err
		}
		opts.Summarize = summarizeDocs(comp, workers)
	}
	if *seenFlags {
		seen, err := readSeen(cmp.Or(*modelDir, cfg.Model.Dir))
		if err != nil {
			return err
		}
		opts.Seen = seen
	}
	cfg.Elasticsearch.RequestTimeout = max(cfg.Elasticsearch.RequestTimeout, 2*time.Minute)
	es, err := newAdapter(cfg, dims, log)
	if err != nil {
		return err
	}
	defer es.Close()
	if err := es.EnsureIndex(ctx); err != nil { // adds the sidecar's fields to an index that lacks them
		return fmt.Errorf("ensure index: %w", err)
	}
	start := time.Now()
	last := start
	opts.PageSize = *page
	opts.Slice, opts.Slices = slice, slices
	opts.Progress = func(done, total int) {
		if *quiet || time.Since(last) < 2*time.Second {
			return
		}
		last = time.Now()
		fmt.Fprintf(os.Stderr, "enrich: %s/%s documents, %.1f docs/s\n", thousands(int64(done)), thousands(int64(total)),
			float64(done)/time.Since(start).Seconds())
	}
	rep, err := es.Enrich(ctx, opts)
	secs := time.Since(start).Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(rep.Written) / secs
	}
	part := ""
	if slices > 1 {
		part = fmt.Sprintf(" slice %d/%d", slice, slices)
	}
	fmt.Fprintf(out, "enrich %s%s: %d documents lacked something; wrote %d (vectors %d, summaries %d, seen flags %d), changed meanwhile %d, failed %d; %.1f s, %.1f docs/s\n",
		cfg.Elasticsearch.Index, part, rep.Needed, rep.Written, rep.Vectors, rep.Summaries, rep.SeenFlags, rep.Changed, len(rep.Failed), secs, rate)
	for _, f := range rep.Failed {
		fmt.Fprintf(out, "  failed %q: %s\n", f.DocID, f.Reason)
	}
	if err != nil {
		return err
	}
	if len(rep.Failed) > 0 {
		return fmt.Errorf("%d documents failed (rerunning retries them)", len(rep.Failed))
	}
	return nil
}

// parseSlice reads -slice I/N ("" is the whole index: 0, 0).
func parseSlice(v string) (slice, slices int, err error) {
	if v == "" {
		return 0, 0, nil
	}
	i, n, ok := strings.Cut(v, "/")
	slice, err1 := strconv.Atoi(i)
	slices, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("-slice %q: want I/N, e.g. 0/4 (part I of N, 0-based)", v)
	}
	if slices < 1 || slice < 0 || slice >= slices {
		return 0, 0, fmt.Errorf("-slice %q: want 0 <= I < N", v)
	}
	return slice, slices, nil
}

// summarizeDocs turns a compressor into the adapter's Summarize callback, workers documents at once.
func summarizeDocs(comp compress.Compressor, workers int) func(ctx context.Context, docs []adapter.Doc) ([]string, error) {
	return func(ctx context.Context, docs []adapter.Doc) ([]string, error) {
		out := make([]string, len(docs))
		errs := make([]error, len(docs))
		var wg sync.WaitGroup
		sem := make(chan struct{}, max(workers, 1))
		for i, d := range docs {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				out[i], errs[i] = comp.Compress(ctx, d.Title, d.Text)
			})
		}
		wg.Wait()
		return out, errors.Join(errs...)
	}
}
