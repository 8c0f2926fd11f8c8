package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
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
	// Refuse settings this build cannot honour rather than ignore them.
	if cfg.AB.Enabled || cfg.AB.ImpressionLog != "" {
		return errors.New("ab.enabled / ab.impression_log: A/B arms and the impression log are not implemented in this build; leave them unset")
	}

	model, info, err := loadModel(cfg.Model, cfg.Concurrency.MaxInflight, log)
	if err != nil {
		return err
	}
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

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv := plugin.New(es, model.Engine, plugin.Options{
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
		Model: info, Logger: log, Registry: reg, Ingester: es,
	})
	hs := &http.Server{
		Addr: cfg.Server.Addr, Handler: srv.Handler(),
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout, ReadTimeout: cfg.Server.ReadTimeout,
		WriteTimeout: cfg.Server.WriteTimeout,
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.ListenAndServe() }()
	log.Info("serving", "addr", cfg.Server.Addr, "model", info.Name, "seen_docids", info.SeenDocIDs)
	select {
	case err := <-errc:
		return fmt.Errorf("listen %s: %w", cfg.Server.Addr, err)
	case <-ctx.Done():
	}
	log.Info("shutting down: draining requests", "timeout", cfg.Server.ShutdownTimeout)
	sctx, scancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer scancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// loadModel initialises ONNX Runtime and opens the model directory with one session per concurrent
// request.
func loadModel(c config.Model, sessions int, log *slog.Logger) (*loader.Model, plugin.ModelInfo, error) {
	if err := ort.Init(c.ORTLibrary); err != nil {
		return nil, plugin.ModelInfo{}, fmt.Errorf("init onnx runtime %q (set model.ort_library or ICICLE_ORT_LIB; scripts/ort.sh installs it): %w", c.ORTLibrary, err)
	}
	m, err := loader.Open(c.Dir, loader.Options{Sessions: sessions, Quantized: c.Quantized, Logger: log,
		Runtime: ort.Options{Threads: c.IntraOpThreads, InterOpThreads: c.InterOpThreads, Provider: c.Provider}})
	if err != nil {
		return nil, plugin.ModelInfo{}, err
	}
	man := m.Manifest
	info := plugin.ModelInfo{Name: man.Name, Config: man.Config, Backbone: man.Backbone, ModelVersion: man.ModelVersion,
		DataVersion: man.DataVersion, SeenDocIDs: len(m.Seen), Dir: c.Dir}
	log.Info("model loaded", "name", man.Name, "file", m.File, "onnx_runtime", ort.Version(), "sessions", max(sessions, 1),
		"seen_docids", len(m.Seen), "trie_nodes", m.Engine.GlobalTrie().Len())
	return m, info, nil
}
