// Command icicle is the ICICLE sidecar: it serves the reranking API next to Elasticsearch (serve),
// loads corpora into the index (ingest), evaluates the sidecar against plain BM25 on labelled queries
// (eval, alias compare), and loads a running sidecar with concurrent clients (load). This package only
// wires: config -> adapter, inference, plugin.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/config"
	"github.com/icicle-search/sidecar/inference"
)

const usage = `usage: icicle <command> [flags]

commands:
  serve     run the sidecar HTTP server
  ingest    bulk-index a BEIR corpus (JSONL, optionally .gz) into Elasticsearch, with the first stage's vectors
  vectors   compute a corpus's first-stage vectors into a file that ingest -vectors reads (no Elasticsearch needed)
  enrich    give the index's documents what the sidecar needs and lacks (the first stage's vectors); resumable
  seen      compare the index's seen documents with the model's seen_docids.txt (-list: print them)
  eval      BM25 vs the sidecar on labelled queries, N-shot sweep, paper protocol (alias: compare)
  calibrate fit the model's gate (gate.json) on labelled queries through a running sidecar (policy gate)
  load      concurrent clients against a running sidecar: throughput, latency, errors, fallbacks, RSS
  ab-report join the impression and click logs: who won the A/B experiment (sign test; CTR, MRR with CIs)
  ab-simulate  send labelled queries to a running sidecar and post clicks drawn from the qrels to /v1/click
  version   print the version, the source commit and the Go version

Run "icicle <command> -h" for the command's flags. Configuration: -config FILE (YAML), then
ICICLE_* environment variables; see config/example.yaml.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "serve":
		err = serve(ctx, args)
	case "ingest":
		err = ingest(ctx, args)
	case "vectors":
		err = vectors(ctx, args, os.Stdout)
	case "enrich":
		err = enrich(ctx, args, os.Stdout)
	case "seen":
		err = seen(ctx, args, os.Stdout)
	case "eval", "compare":
		err = evaluate(ctx, args, os.Stdout)
	case "calibrate":
		err = calibrate(ctx, args, os.Stdout)
	case "load":
		err = runLoad(ctx, args, os.Stdout)
	case "ab-report": // issue 14b
		err = abReport(args, os.Stdout)
	case "ab-simulate":
		err = abSimulate(ctx, args, os.Stdout)
	case "version", "-version", "--version":
		err = printVersion(args, os.Stdout)
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "icicle: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "icicle %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// configFlags are the -config and -profile flags every command that reads the configuration takes.
type configFlags struct {
	path, profile string
}

// register defines -config (with the command's own help) and -profile on fs.
func (c *configFlags) register(fs *flag.FlagSet, help string) {
	fs.StringVar(&c.path, "config", "", help)
	fs.StringVar(&c.profile, "profile", "", "reader profile: a name in config/profiles (b7, q1, r24e, reader135, gpu) or a "+
		"YAML file, applied before -config (default $"+config.EnvProfile+"; none: the first stage alone)")
}

// load reads the profile (-profile, else $ICICLE_PROFILE), the -config file and the environment.
func (c configFlags) load() (config.Config, error) {
	profile := c.profile
	if profile == "" {
		profile = os.Getenv(config.EnvProfile)
	}
	cfg, err := config.LoadWith(profile, c.path, os.LookupEnv)
	if err != nil {
		return config.Config{}, fmt.Errorf("load config: %w", err)
	}
	return cfg, nil
}

// newLogger builds the process logger from the log section.
func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(c.Level)))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// readSeen reads dir/seen_docids.txt, the model's seen corpus, as a set; without a model (dir "") nothing is
// seen.
func readSeen(dir string) (map[string]bool, error) {
	if dir == "" {
		return map[string]bool{}, nil
	}
	ids, err := inference.ReadDocIDs(filepath.Join(dir, "seen_docids.txt"))
	if err != nil {
		return nil, fmt.Errorf("seen corpus: %w", err)
	}
	seen := make(map[string]bool, len(ids))
	for _, d := range ids {
		seen[d] = true
	}
	return seen, nil
}

// newAdapter builds the Elasticsearch adapter from its config section.
// newAdapter builds the Elasticsearch adapter for cfg's connection and fields; vectorDims > 0 (the first
// stage's encoder) makes the index carry vectors.
func newAdapter(cfg config.Config, vectorDims int, log *slog.Logger) (*adapter.Adapter, error) {
	c, f := cfg.Elasticsearch, cfg.Fields
	return adapter.New(adapter.Options{
		Addresses: c.Addresses, CloudID: c.CloudID, APIKey: c.APIKey, Username: c.Username, Password: c.Password,
		CACertPath: c.CACert, CertFingerprint: c.CertFingerprint, Index: c.Index,
		RequestTimeout: c.RequestTimeout, MaxRetries: c.MaxRetries, VectorDims: vectorDims,
		VectorIndex: cfg.FirstStage.VectorIndex, Shards: c.Shards,
		Fields: adapter.Fields{DocID: f.DocID, Title: f.Title, Search: f.Search, Body: f.Body, Summary: f.Summary,
			Seen: f.Seen, Vector: f.Vector, VectorModel: f.VectorModel},
	}, log)
}
