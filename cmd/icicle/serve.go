package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/icicle-search/sidecar/config"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/inference/loader"
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/plugin"
)

func serve(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "YAML config file (default: built-in defaults and ICICLE_* environment)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log, os.Stderr)
	// POST /v1/ingest summarises documents sent without a summary as `icicle ingest` does.
	comp, compWorkers, err := newCompressor(cfg.Compressor)
	if err != nil {
		return fmt.Errorf("summary compressor (compressor.kind %q): %w", cfg.Compressor.Kind, err)
	}
	// SIGHUP reloads model.dir (the configured directory, not one posted to /v1/admin/model since).
	// Caught from here on, so that one sent while the model loads does not kill the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	if err := ort.Init(cfg.Model.ORTLibrary); err != nil {
		return fmt.Errorf("init onnx runtime %q (set model.ort_library or ICICLE_ORT_LIB; scripts/ort.sh installs it): %w", cfg.Model.ORTLibrary, err)
	}
	// Every model, the first and those hot-swapped in later (docs/model-swap.md), opens with the same
	// session options; the Swapper closes each after its last request.
	open := func(dir string) (plugin.LoadedModel, error) {
		return openModel(dir, cfg.Model, cfg.Concurrency.MaxInflight, log)
	}
	first, err := open(cfg.Model.Dir)
	if err != nil {
		_ = ort.Shutdown()
		return err
	}
	info := first.Info
	model := plugin.NewSwapper(first, open, log)
	defer func() {
		if err := model.Close(); err != nil {
			log.Error("close model", "err", err)
		}
		if err := ort.Shutdown(); err != nil {
			log.Error("shut down onnx runtime", "err", err)
		}
	}()

	es, err := newAdapter(cfg.Elasticsearch, log)
	if err != nil {
		return fmt.Errorf("elasticsearch client: %w", err)
	}
	defer es.Close()
	checkCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if err := es.EnsureIndex(checkCtx); err != nil {
		cancel()
		return fmt.Errorf("elasticsearch: %w", err)
	}
	if ci, err := es.Check(checkCtx); err == nil {
		log.Info("elasticsearch ready", "version", ci.Version, "index", cfg.Elasticsearch.Index)
	}
	if n, err := es.SeenCount(checkCtx); err == nil && n != info.SeenDocIDs {
		log.Warn("seen corpus differs between the index and the model", "index_seen", n, "model_seen", info.SeenDocIDs)
	}
	cancel()

	var impressions *plugin.ImpressionLog
	if path := cfg.AB.ImpressionLog; path != "" {
		if impressions, err = plugin.OpenImpressionLog(path, plugin.ImpressionLogOptions{
			Buffer: cfg.AB.ImpressionBuffer, MaxBytes: cfg.AB.ImpressionLogMaxBytes, Logger: log}); err != nil {
			return err
		}
		// Deferred after the model's close, so it runs before it: after the HTTP server has drained.
		defer func() {
			if err := impressions.Close(); err != nil {
				log.Error("close impression log", "path", path, "err", err)
			}
		}()
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv := plugin.New(es, model, plugin.Options{
		MaxBodyBytes: cfg.Server.MaxBodyBytes, RequestTimeout: cfg.Server.RequestTimeout,
		ESBudgetFraction: cfg.Server.ESBudgetFraction, MaxQueryChars: cfg.Server.MaxQueryChars,
		MaxHits: cfg.Server.MaxHits, MaxCandidates: cfg.Decode.MaxCandidates,
		Decode: inference.Options{BeamWidth: cfg.Decode.BeamWidth, MaxPromptTokens: cfg.Decode.MaxPromptTokens,
			MaxSummaryTokens: cfg.Decode.MaxSummaryTokens, TitleOnly: cfg.Decode.TitleOnly},
		MaxInflight: cfg.Concurrency.MaxInflight, QueueSize: cfg.Concurrency.QueueSize,
		ConsecutiveFailures: cfg.Breaker.ConsecutiveFailures, OpenTimeout: cfg.Breaker.OpenTimeout,
		HalfOpenMaxRequests: cfg.Breaker.HalfOpenMaxRequests, BreakerCountInterval: cfg.Breaker.Interval,
		Policy: cfg.Policy.Mode, FusionK: cfg.Policy.FusionK,
		MinCopyProb: cfg.Policy.MinCopyProb, MinTopScore: cfg.Policy.MinTopScore,
		Model: info, Logger: log, Registry: reg, Ingester: es, Compressor: comp, CompressWorkers: compWorkers,
		AB: plugin.ABOptions{Enabled: cfg.AB.Enabled, Mode: cfg.AB.Mode, SplitB: cfg.AB.SplitB, KeyHeader: cfg.AB.KeyHeader,
			Experiment: cfg.AB.Experiment},
		Impressions: impressions, AdminToken: cfg.Server.AdminToken,
	})
	hs := &http.Server{
		Addr: cfg.Server.Addr, Handler: srv.Handler(),
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout, ReadTimeout: cfg.Server.ReadTimeout,
		WriteTimeout: cfg.Server.WriteTimeout,
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.ListenAndServe() }()
	log.Info("serving", "addr", cfg.Server.Addr, "model", info.Name, "seen_docids", info.SeenDocIDs,
		"compressor", comp.ID(), "ab", cfg.AB.Enabled, "ab_mode", cfg.AB.Mode, "impression_log", cfg.AB.ImpressionLog, "admin", cfg.Server.AdminToken != "")
	for done := false; !done; {
		select {
		case err := <-errc:
			return fmt.Errorf("listen %s: %w", cfg.Server.Addr, err)
		case <-hup:
			log.Info("SIGHUP: reloading the model", "dir", cfg.Model.Dir)
			_, _ = srv.SwapModel(cfg.Model.Dir) // logged and counted there; a failure keeps the old model
		case <-ctx.Done():
			done = true
		}
	}
	log.Info("shutting down: draining requests", "timeout", cfg.Server.ShutdownTimeout)
	sctx, scancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer scancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// openModel opens a model directory with one session per concurrent request; ONNX Runtime is
// initialised once, before.
func openModel(dir string, c config.Model, sessions int, log *slog.Logger) (plugin.LoadedModel, error) {
	m, err := loader.Open(dir, loader.Options{Sessions: sessions, Quantized: c.Quantized, Logger: log,
		Runtime: ort.Options{Threads: c.IntraOpThreads, InterOpThreads: c.InterOpThreads, Provider: c.Provider, CUDADevice: c.DeviceID}})
	if err != nil {
		return plugin.LoadedModel{}, err
	}
	man := m.Manifest
	info := plugin.ModelInfo{Name: man.Name, Config: man.Config, Backbone: man.Backbone, ModelVersion: man.ModelVersion,
		DataVersion: man.DataVersion, SeenDocIDs: len(m.Seen), Dir: dir}
	log.Info("model loaded", "name", man.Name, "dir", dir, "file", m.File, "onnx_runtime", ort.Version(), "sessions", max(sessions, 1),
		"seen_docids", len(m.Seen), "trie_nodes", m.Engine.GlobalTrie().Len())
	return plugin.LoadedModel{Reranker: m.Engine, Info: info, Seen: m.Seen, Close: m.Close}, nil
}
