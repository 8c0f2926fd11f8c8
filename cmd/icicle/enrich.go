package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

// enrich is `icicle enrich`: it gives every document of the index what the sidecar needs and lacks, today
// the first stage's vector (from first_stage.encoder_dir), without touching anything else. Resumable: an
// interrupted run leaves what it wrote, and the next run does only the rest.
func enrich(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("enrich", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "YAML config file (Elasticsearch connection, first_stage.encoder_dir)")
	page := fs.Int("page", 128, "documents read, embedded and written at once")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *page < 1 || *page > 10000 {
		return fmt.Errorf("-page %d: want 1..10000", *page)
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log, os.Stderr)
	if cfg.FirstStage.EncoderDir == "" {
		return errors.New("first_stage.encoder_dir is empty: there is no encoder to make vectors with")
	}
	enc, closeEnc, err := openIngestEncoder(cfg, log)
	if err != nil {
		return err
	}
	defer closeEnc()
	cfg.Elasticsearch.RequestTimeout = max(cfg.Elasticsearch.RequestTimeout, 2*time.Minute)
	es, err := newAdapter(cfg.Elasticsearch, enc.Dims(), log)
	if err != nil {
		return err
	}
	defer es.Close()
	if err := es.EnsureIndex(ctx); err != nil { // adds the vector fields to an index that has none
		return fmt.Errorf("ensure index: %w", err)
	}
	start := time.Now()
	last := start
	rep, err := es.Backfill(ctx, backfillOptions(enc, *page, func(done, total int) {
		if *quiet || time.Since(last) < 2*time.Second {
			return
		}
		last = time.Now()
		secs := time.Since(start).Seconds()
		fmt.Fprintf(os.Stderr, "enrich: %s/%s documents, %.1f docs/s\n", thousands(int64(done)), thousands(int64(total)), float64(done)/secs)
	}))
	secs := time.Since(start).Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(rep.Written) / secs
	}
	fmt.Fprintf(out, "enrich %s: %d documents lacked %s's vector; wrote %d, changed meanwhile %d, failed %d; %.1f s, %.1f docs/s\n",
		cfg.Elasticsearch.Index, rep.Needed, enc.Name(), rep.Written, rep.Changed, len(rep.Failed), secs, rate)
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
