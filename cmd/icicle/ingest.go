package main

import (
	"context"
	"flag"
	"fmt"
	"iter"
	"os"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/internal/compress"
)

func ingest(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "YAML config file")
	corpus := fs.String("corpus", "data/nq_qed/corpus.jsonl.gz", "BEIR corpus JSONL (.gz allowed): docid, title, text, optional summary")
	modelDir := fs.String("model-dir", "", "model directory whose seen_docids.txt marks documents seen (default: model.dir from config)")
	refresh := fs.Bool("refresh", true, "make documents searchable before returning")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log, os.Stderr)
	dir := *modelDir
	if dir == "" {
		dir = cfg.Model.Dir
	}
	seen, err := readSeen(dir)
	if err != nil {
		return err
	}
	es, err := newAdapter(cfg.Elasticsearch, log)
	if err != nil {
		return err
	}
	defer es.Close()
	if err := es.EnsureIndex(ctx); err != nil {
		return fmt.Errorf("ensure index: %w", err)
	}
	r, err := adapter.OpenCorpus(*corpus, adapter.CorpusLimits{})
	if err != nil {
		return err
	}
	defer r.Close()
	var compressed, nSeen int
	docs := func(yield func(adapter.Doc) bool) {
		for d := range r.All() {
			if d.Summary == "" {
				d.Summary = compress.Extractive(d.Text)
				compressed++
			}
			d.Seen = seen[d.DocID]
			if d.Seen {
				nSeen++
			}
			if !yield(d) {
				return
			}
		}
	}
	rep, err := es.Ingest(ctx, iter.Seq[adapter.Doc](docs), adapter.IngestOptions{Refresh: *refresh})
	if err != nil {
		return fmt.Errorf("ingest %s: %w", *corpus, err)
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("read %s: %w", *corpus, err)
	}
	fmt.Printf("ingest %s into %s: indexed %d, updated %d, failed %d, rejected %d; seen %d, summaries computed %d (%s)\n",
		*corpus, cfg.Elasticsearch.Index, rep.Indexed, rep.Updated, len(rep.Failed), len(r.Rejected()), nSeen, compressed, compress.Name)
	for _, f := range rep.Failed {
		fmt.Printf("  failed %q: %s\n", f.DocID, f.Reason)
	}
	for _, rj := range r.Rejected() {
		fmt.Printf("  rejected %s\n", rj.Error())
	}
	if len(rep.Failed) > 0 {
		return fmt.Errorf("%d documents failed", len(rep.Failed))
	}
	return nil
}
