package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/internal/vecfile"
)

// vectors is `icicle vectors`: the first stage's vector of every document of a corpus, computed by the
// configured encoder (first_stage.encoder_dir) into a file that `icicle ingest -vectors` reads. A corpus is
// embedded once, where it is cheap, and ingested anywhere without running the encoder again; the file names
// its encoder, and ingest refuses it for another.
func vectors(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("vectors", flag.ContinueOnError)
	var cf configFlags
	cf.register(fs, "YAML config file (first_stage.encoder_dir)")
	corpus := fs.String("corpus", "", "BEIR corpus JSONL (.gz allowed): docid, title, text")
	dst := fs.String("out", "", "vector file to write (gzip: a header line, then each document's key and half-precision vector)")
	encFlags := registerEncoderFlags(fs)
	batch := fs.Int("batch", 64, "documents given to the encoder at once (it batches by length within its own limits)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := encFlags.check(); err != nil {
		return err
	}
	if *corpus == "" || *dst == "" {
		return errors.New("-corpus and -out are required")
	}
	cfg, err := cf.load()
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log, os.Stderr)
	enc, closeEnc, err := openIngestEncoder(cfg, *encFlags.threads, encFlags.passageRuns(), log)
	if err != nil {
		return err
	}
	defer closeEnc()
	if enc == nil {
		return errors.New("first_stage.encoder_dir is empty: no encoder to compute vectors with")
	}
	docs, err := readCorpus(*corpus)
	if err != nil {
		return err
	}
	w, err := vecfile.Create(*dst, enc.Name(), enc.Dims(), len(docs))
	if err != nil {
		return err
	}
	start := time.Now()
	embed := embedDocs(enc)
	for i := 0; i < len(docs); i += *batch {
		part := docs[i:min(i+*batch, len(docs))]
		vs, err := embed(ctx, part)
		if err != nil {
			_ = w.Close()
			return fmt.Errorf("embed documents %d..%d: %w", i+1, i+len(part), err)
		}
		for j, d := range part {
			if err := w.Add(d.Title, d.Text, vs[j]); err != nil {
				_ = w.Close()
				return err
			}
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	took := time.Since(start)
	fmt.Fprintf(out, "vectors %s: %d documents by %s into %s in %.1f s (%.1f documents a second)\n", *corpus, len(docs),
		enc.Name(), *dst, took.Seconds(), float64(len(docs))/took.Seconds())
	return nil
}

// readCorpus reads every accepted document of a BEIR corpus file; a rejected record is an error.
func readCorpus(path string) ([]adapter.Doc, error) {
	r, err := adapter.OpenCorpus(path, adapter.CorpusLimits{})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var docs []adapter.Doc
	for d := range r.All() {
		docs = append(docs, d)
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if rj := r.Rejected(); len(rj) > 0 {
		return nil, fmt.Errorf("read %s: %d records rejected, the first: %s", path, len(rj), rj[0].Error())
	}
	return docs, nil
}
