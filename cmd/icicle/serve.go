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
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/inference/tok"
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

	engine, tk, info, err := loadModel(cfg.Model, cfg.Concurrency.MaxInflight, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := engine.Close(); err != nil {
			log.Error("close model", "err", err)
		}
		if err := tk.Close(); err != nil {
			log.Error("close tokenizer", "err", err)
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
	srv := plugin.New(es, engine, plugin.Options{
		MaxBodyBytes: cfg.Server.MaxBodyBytes, RequestTimeout: cfg.Server.RequestTimeout,
		ESBudgetFraction: cfg.Server.ESBudgetFraction, MaxQueryChars: cfg.Server.MaxQueryChars,
		MaxHits: cfg.Server.MaxHits, MaxCandidates: cfg.Decode.MaxCandidates,
		Decode: inference.Options{BeamWidth: cfg.Decode.BeamWidth, MaxPromptTokens: cfg.Decode.MaxPromptTokens,
			MaxSummaryTokens: cfg.Decode.MaxSummaryTokens, TitleOnly: cfg.Decode.TitleOnly},
		MaxInflight: cfg.Concurrency.MaxInflight, QueueSize: cfg.Concurrency.QueueSize,
		ConsecutiveFailures: cfg.Breaker.ConsecutiveFailures, OpenTimeout: cfg.Breaker.OpenTimeout,
		HalfOpenMaxRequests: cfg.Breaker.HalfOpenMaxRequests, BreakerCountInterval: cfg.Breaker.Interval,
		MinCopyProb: cfg.Policy.MinCopyProb, MinTopScore: cfg.Policy.MinTopScore,
		Model: info, Logger: log, Registry: reg,
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

// loadModel initialises ONNX Runtime and builds the engine with one model session per concurrent
// request.
func loadModel(c config.Model, sessions int, log *slog.Logger) (_ *inference.Engine, _ *tok.Tokenizer, _ plugin.ModelInfo, err error) {
	man, err := inference.LoadManifest(c.Dir)
	if err != nil {
		return nil, nil, plugin.ModelInfo{}, err
	}
	lib := c.ORTLibrary
	if err := ort.Init(lib); err != nil {
		return nil, nil, plugin.ModelInfo{}, fmt.Errorf("init onnx runtime %q (set model.ort_library or ICICLE_ORT_LIB; scripts/ort.sh installs it): %w", lib, err)
	}
	tk, err := tok.Load(man.Path(man.Tokenizer))
	if err != nil {
		return nil, nil, plugin.ModelInfo{}, fmt.Errorf("load tokenizer: %w", err)
	}
	defer func() {
		if err != nil {
			tk.Close()
		}
	}()
	seen, err := inference.ReadDocIDs(man.Path(man.SeenDocIDs))
	if err != nil {
		return nil, nil, plugin.ModelInfo{}, err
	}
	onnxFile := man.ONNX
	if c.Quantized {
		if man.ONNXQuantized == "" {
			return nil, nil, plugin.ModelInfo{}, fmt.Errorf("model.quantized: %s has no onnx_quantized file", c.Dir)
		}
		onnxFile = man.ONNXQuantized
	}
	var models []inference.Model
	for range max(sessions, 1) {
		m, err := ort.Load(man.Path(onnxFile), man.Spec(), ort.Options{Threads: c.IntraOpThreads, InterOpThreads: c.InterOpThreads, Provider: c.Provider}, log)
		if err != nil {
			for _, m := range models {
				m.Close()
			}
			return nil, nil, plugin.ModelInfo{}, fmt.Errorf("load model: %w", err)
		}
		models = append(models, m)
	}
	engine, err := inference.NewEngine(man, tk, models, seen, inference.EngineOptions{Logger: log})
	if err != nil {
		for _, m := range models {
			m.Close()
		}
		return nil, nil, plugin.ModelInfo{}, err
	}
	info := plugin.ModelInfo{Name: man.Name, Config: man.Config, Backbone: man.Backbone, ModelVersion: man.ModelVersion,
		DataVersion: man.DataVersion, SeenDocIDs: len(seen), Dir: c.Dir}
	log.Info("model loaded", "name", man.Name, "file", onnxFile, "onnx_runtime", ort.Version(), "sessions", len(models),
		"seen_docids", len(seen), "trie_nodes", engine.GlobalTrie().Len())
	return engine, tk, info, nil
}
