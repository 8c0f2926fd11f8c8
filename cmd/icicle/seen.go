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
	"strings"

	"github.com/icicle-search/sidecar/inference"
)

// errSeenDiffers is seen's answer when the index and the model disagree (exit status 1).
var errSeenDiffers = errors.New("the index's seen documents differ from the model's seen corpus")

// seen compares the documents marked seen in the index with the model's seen_docids.txt, or with -list
// prints every seen docid of the index, one per line, in byte order.
func seen(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("seen", flag.ContinueOnError)
	var cf configFlags
	cf.register(fs, "YAML config file")
	modelDir := fs.String("model-dir", "", "model directory whose seen_docids.txt is compared (default: model.dir from config)")
	list := fs.Bool("list", false, "print every docid marked seen in the index instead of comparing")
	asJSON := fs.Bool("json", false, "print the comparison as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := cf.load()
	if err != nil {
		return err
	}
	es, err := newAdapter(cfg, 0, newLogger(cfg.Log, os.Stderr))
	if err != nil {
		return err
	}
	defer es.Close()
	if *list {
		w := bufio.NewWriter(out)
		err := es.ListSeen(ctx, func(page []string) error {
			for _, d := range page {
				if _, err := fmt.Fprintln(w, d); err != nil {
					return err
				}
			}
			return nil
		})
		if ferr := w.Flush(); err == nil {
			err = ferr
		}
		return err
	}
	dir := *modelDir
	if dir == "" {
		dir = cfg.Model.Dir
	}
	model, err := inference.ReadDocIDs(filepath.Join(dir, "seen_docids.txt"))
	if err != nil {
		return fmt.Errorf("seen corpus: %w", err)
	}
	d, err := es.SeenDiff(ctx, model)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := json.NewEncoder(out).Encode(d); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(out, "index %s: %d documents marked seen; model %s: %d docids in seen_docids.txt\n",
			es.Index(), d.IndexSeen, dir, d.ModelSeen)
		fmt.Fprintf(out, "in the model, not marked seen in the index: %d%s\n", d.MissingInIndexCount, examples(d.MissingInIndex, d.MissingInIndexCount))
		fmt.Fprintf(out, "marked seen in the index, not in the model: %d%s\n", d.NotInModelCount, examples(d.NotInModel, d.NotInModelCount))
	}
	if !d.Consistent() {
		return errSeenDiffers
	}
	return nil
}

// examples formats the first docids of a list of n.
func examples(ds []string, n int) string {
	if len(ds) == 0 {
		return ""
	}
	more := ""
	if n > len(ds) {
		more = fmt.Sprintf(", ... %d more", n-len(ds))
	}
	return " (" + strings.Join(quoteAll(ds), ", ") + more + ")"
}

func quoteAll(ds []string) []string {
	q := make([]string, len(ds))
	for i, d := range ds {
		q[i] = fmt.Sprintf("%q", d)
	}
	return q
}
