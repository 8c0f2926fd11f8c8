package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/config"
	"github.com/icicle-search/sidecar/dropin"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/inference/loader"
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/internal/abtest"
	"github.com/icicle-search/sidecar/internal/gate"
	"github.com/icicle-search/sidecar/plugin"
	"github.com/icicle-search/sidecar/rank"
	"github.com/icicle-search/sidecar/retrieve"
)

func serve(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var cf configFlags
	cf.register(fs, "YAML config file (default: built-in defaults and ICICLE_* environment)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := cf.load()
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
	// Deferred first, so it runs last: after the model's and the encoder's sessions are closed.
	defer func() {
		if err := ort.Shutdown(); err != nil {
			log.Error("shut down onnx runtime", "err", err)
		}
	}()
	// The first stage's encoder: a configured one that cannot open stops the start, naming the file.
	enc, err := openEncoder(cfg.FirstStage, 1, log)
	if err != nil {
		return err
	}
	if enc != nil {
		defer enc.Close()
	}
	params, err := firstStageParams(cfg.FirstStage)
	if err != nil {
		return err
	}
	if warn := fieldsMismatch(cfg.FirstStage, cfg.Fields.Search); warn != "" {
		log.Warn(warn)
	}
	es, err := newAdapter(cfg, vectorDims(enc), log)
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
	if enc != nil {
		if n, err := es.CountWithoutVector(checkCtx, enc.Name()); err == nil && n > 0 {
			log.Warn("documents without the encoder's vector rank by BM25 alone until `icicle enrich` gives them one",
				"documents", n, "encoder", enc.Name())
		}
	}
	cancel()

	// Every model, the first and those hot-swapped in later (docs/model-swap.md), opens with the same
	// sessions and threads (planRun); the Swapper closes each after its last request. A model that reads by
	// blocks fills its store from the index in the background (blockfill.go). Without one (model.dir empty,
	// the default) the first stage answers every request and no model session is opened.
	plan := planRun(cfg.Concurrency.MaxInflight, cfg.Model.IntraOpThreads, runtime.NumCPU())
	var fillFrom *adapter.Adapter
	if cfg.Experimental.BlockFill {
		fillFrom = es
	}
	serving := plugin.Settings(cfg.ServingSettings())
	open := func(dir string) (plugin.LoadedModel, error) {
		return openModel(dir, cfg.Model, plan, cfg.Decode.BeamWidth, cfg.Experimental, serving, fillFrom, log)
	}
	cfg.Concurrency.MaxInflight = plan.sessions // the guard admits as many reads as the reader has sessions
	var (
		models *plugin.Swapper // nil: no reader
		info   plugin.ModelInfo
	)
	if cfg.Model.Dir != "" {
		first, err := open(cfg.Model.Dir)
		if err != nil {
			return err
		}
		info = first.Info
		sw := plugin.NewSwapper(first, open, log)
		defer func() {
			if err := sw.Close(); err != nil {
				log.Error("close model", "err", err)
			}
		}()
		models = sw
		checkCtx, cancel = context.WithTimeout(ctx, 30*time.Second)
		if n, err := es.SeenCount(checkCtx); err == nil && n != info.SeenDocIDs {
			log.Warn("seen corpus differs between the index and the model", "index_seen", n, "model_seen", info.SeenDocIDs)
		}
		cancel()
	} else {
		log.Info("no reader model (model.dir is empty): the first stage answers every request")
	}
	var embedder retrieve.Embedder
	if enc != nil {
		embedder = enc
	}
	stage, err := retrieve.New(es, embedder, params, log)
	if err != nil {
		return err
	}
	log.Info("first stage", "encoder", stage.Encoder(), "method", params.Method, "dense_weight", params.DenseWeight, "dense_weight_spread", params.DenseWeightSpread,
		"rrf_k", params.RRFK, "depth", params.Depth, "knn", params.KNN, "params_file", cfg.FirstStage.ParamsFile)

	var impressions *abtest.ImpressionLog
	if path := cfg.AB.ImpressionLog; path != "" {
		if impressions, err = abtest.OpenImpressionLog(path, abtest.LogOptions{
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

	// POST /v1/click appends to the click log, with the impression log's rotation and queue.
	var clicks *abtest.ClickLog
	if path := cfg.AB.ClickLog; path != "" {
		if clicks, err = abtest.OpenClickLog(path, abtest.LogOptions{
			Buffer: cfg.AB.ImpressionBuffer, MaxBytes: cfg.AB.ImpressionLogMaxBytes, Logger: log}); err != nil {
			return err
		}
		defer func() { // after the HTTP server has drained, as the impression log
			if err := clicks.Close(); err != nil {
				log.Error("close click log", "path", path, "err", err)
			}
		}()
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// POST /v1/ingest gives each document the first stage's vector, so a new document is found by meaning at
	// once; the ingest command does the same.
	var (
		ingestEmbed       func(context.Context, []adapter.Doc) ([][]float32, error)
		ingestVectorModel string
	)
	if enc != nil {
		ingestEmbed, ingestVectorModel = embedDocs(enc), enc.Name()
	}
	// The ranking: the first stage, the reader (when one is configured) under the guard, the policy.
	var source rank.Source
	if models != nil {
		source = models
	}
	pipe, err := newPipeline(cfg, stage, es, source, rank.NewMetrics(reg), log)
	if err != nil {
		return err
	}
	srv := plugin.New(es, pipe, models, plugin.Options{
		MaxBodyBytes: cfg.Server.MaxBodyBytes, RequestTimeout: cfg.Server.RequestTimeout,
		MaxQueryChars: cfg.Server.MaxQueryChars, MaxHits: cfg.Server.MaxHits,
		Fields:      dropin.SourceFields{DocID: cfg.Fields.DocID, Title: cfg.Fields.Title, Summary: cfg.Fields.Summary},
		MetricsPath: cfg.Metrics.Path, MetricsOff: !cfg.Metrics.Enabled,
		AllowPolicyOverride: cfg.Policy.AllowOverride, Profile: cfg.Profile(), Experimental: experimentalSettings(cfg),
		TrustedProxies: cfg.Server.TrustedProxies,
		Model:          info, Logger: log, Registry: reg, Ingester: es, Compressor: comp, CompressWorkers: compWorkers,
		AB: plugin.ABOptions{Enabled: cfg.AB.Enabled, Mode: cfg.AB.Mode, SplitB: cfg.AB.SplitB, KeyHeader: cfg.AB.KeyHeader,
			Experiment: cfg.AB.Experiment},
		Embed: ingestEmbed, VectorModel: ingestVectorModel,
		Impressions: impressions, AdminToken: cfg.Server.AdminToken,
		Clicks: clicks, CallerCredentials: cfg.Elasticsearch.CallerCredentials, WriteToken: cfg.Server.WriteToken,
		SeparateAdmin:  cfg.Server.AdminAddr != "",
		AllowedIndices: cfg.Elasticsearch.AllowedIndices, AllowScripts: cfg.Dropin.AllowScripts,
		RankWindowSize: cfg.Dropin.RankWindowSize,
	})
	servers := []*http.Server{newHTTPServer(cfg.Server, cfg.Server.Addr, srv.Handler())}
	if cfg.Server.AdminAddr != "" {
		servers = append(servers, newHTTPServer(cfg.Server, cfg.Server.AdminAddr, srv.AdminHandler()))
	}
	errc := make(chan error, len(servers))
	for _, hs := range servers {
		ln, err := net.Listen("tcp", hs.Addr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", hs.Addr, err)
		}
		go func() {
			err := serveOn(ln, hs, cfg.Server)
			errc <- fmt.Errorf("serve %s: %w", hs.Addr, err)
		}()
	}
	log.Info("serving", "addr", cfg.Server.Addr, "admin_addr", cfg.Server.AdminAddr, "tls", cfg.Server.TLSCertFile != "",
		"policy", cfg.Policy.Mode, "caller_credentials", cfg.Elasticsearch.CallerCredentials, "model", info.Name, "seen_docids", info.SeenDocIDs,
		"compressor", comp.ID(), "ab", cfg.AB.Enabled, "ab_mode", cfg.AB.Mode, "impression_log", cfg.AB.ImpressionLog, "click_log", cfg.AB.ClickLog,
		"admin", cfg.Server.AdminToken != "", "writes", cfg.Server.WriteToken != "")
	for done := false; !done; {
		select {
		case err := <-errc:
			return err
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
	var errs []error
	for _, hs := range servers {
		if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("shutdown %s: %w", hs.Addr, err))
		}
	}
	return errors.Join(errs...)
}

// newHTTPServer is one listener of the sidecar with the configured timeouts.
func newHTTPServer(c config.Server, addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr: addr, Handler: h,
		ReadHeaderTimeout: c.ReadHeaderTimeout, ReadTimeout: c.ReadTimeout, WriteTimeout: c.WriteTimeout,
	}
}

// serveOn serves hs on ln until it is shut down: https with server.tls_cert_file and tls_key_file (TLS
// 1.2 at least), plain http without them.
func serveOn(ln net.Listener, hs *http.Server, c config.Server) error {
	if c.TLSCertFile == "" {
		return hs.Serve(ln)
	}
	hs.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	return hs.ServeTLS(ln, c.TLSCertFile, c.TLSKeyFile)
}

// runPlan is how many sessions the model runs and with how many intra-op threads each.
type runPlan struct {
	sessions, threads int
	chosen            string
}

// planRun fills in the sessions (concurrency.max_inflight) and intra-op threads (model.intra_op_threads)
// left at 0 (auto), so that sessions x threads is the number of cores: sessions sharing cores with more
// threads than cores slow every run down (measured on 2 cores: reader135 370 ms p50 alone with 2 threads,
// 830-880 ms when two sessions of 2 threads ran at once). With both automatic: one session with every
// core, the lowest latency at the same capacity (docs/evaluation.md, "Admission control").
func planRun(sessions, threads, cores int) runPlan {
	cores = max(cores, 1)
	switch {
	case sessions > 0 && threads > 0:
		return runPlan{sessions, threads, "configured"}
	case sessions > 0:
		return runPlan{sessions, max(1, cores/sessions), fmt.Sprintf("threads: %d cores / %d sessions", cores, sessions)}
	case threads > 0:
		return runPlan{max(1, cores/threads), threads, fmt.Sprintf("sessions: %d cores / %d threads", cores, threads)}
	}
	return runPlan{1, cores, fmt.Sprintf("auto: one session with the %d cores", cores)}
}

// openBlockStore returns the block store of the model in dir (nil when block reading is off): in memory, or
// with experimental.block_dir the model's file there, its blocks of earlier runs read back.
func openBlockStore(dir string, x config.Experimental, log *slog.Logger) (*inference.BlockStore, error) {
	if x.BlockReading == config.BlockReadingOff {
		return nil, nil
	}
	maxBytes, quant := int64(x.BlockStoreMB)<<20, x.BlockPrecision == config.BlockPrecisionInt8
	if x.BlockDir == "" {
		return inference.NewBlockStore(maxBytes, quant), nil
	}
	if err := os.MkdirAll(x.BlockDir, 0o755); err != nil {
		return nil, fmt.Errorf("experimental.block_dir: %w", err)
	}
	start := time.Now()
	path, spec, err := loader.BlockFile(x.BlockDir, dir, x.BlockReading, x.BlockPrecision)
	if err != nil {
		return nil, fmt.Errorf("experimental.block_dir: %w", err)
	}
	s, err := inference.OpenBlockStore(path, maxBytes, quant, spec)
	if err != nil {
		return nil, fmt.Errorf("experimental.block_dir: %w", err)
	}
	st := s.Stats()
	log.Info("block store opened", "file", path, "blocks", st.Loaded, "bytes", st.Bytes, "took_ms", time.Since(start).Milliseconds())
	return s, nil
}

// decodeOptions are the engine's per-request options: the beam width (decode.beam_width) and the
// experimental settings that shape the decoding. What requests run with and what a model is warmed up with.
func decodeOptions(beamWidth int, x config.Experimental) inference.Options {
	return inference.Options{BeamWidth: beamWidth, MaxPromptTokens: x.MaxPromptTokens, MaxSummaryTokens: x.MaxSummaryTokens,
		TitleOnly: x.TitleOnly, SummaryCandidates: x.SummaryCandidates, Scoring: x.Scoring, CopyLogPrior: x.CopyLogPrior,
		CopyShift: rank.RankPrior(x.CopyRankPrior), MemoryShift: rank.RankPrior(x.MemoryRankPrior)}
}

// experimentalSettings are the experimental section's settings by key, as /v1/model lists them.
func experimentalSettings(cfg config.Config) map[string]string {
	out := map[string]string{}
	for k, v := range cfg.ServingSettings() {
		if strings.HasPrefix(k, "experimental.") {
			out[k] = v
		}
	}
	return out
}

// openModel opens a model directory with plan's sessions and threads and times a full-size warm-up run
// (the cost model's first estimate, and /v1/model's run section); ONNX Runtime is initialised once, before.
// serving are the sidecar's settings (servingSettings): the model's gate applies only if fitted under them.
func openModel(dir string, c config.Model, plan runPlan, beamWidth int, x config.Experimental, serving plugin.Settings,
	fillFrom *adapter.Adapter, log *slog.Logger) (plugin.LoadedModel, error) {
	// A reading keeps each route's best answer when the first stage settles the routes (rank.RouteByFirstStage).
	routeByFirstStage := x.RouteByFirstStage
	// Each model its own store: a swapped model starts empty (or with its own file) and fills as it serves.
	blocks, err := openBlockStore(dir, x, log)
	if err != nil {
		return plugin.LoadedModel{}, err
	}
	m, err := loader.Open(dir, loader.Options{Sessions: plan.sessions, Quantized: c.Quantized, Logger: log,
		Blocks: blocks, BlockLayout: x.BlockReading,
		Runtime: ort.Options{Threads: plan.threads, InterOpThreads: c.InterOpThreads, Provider: c.Provider, CUDADevice: c.DeviceID,
			NoSpin: plan.sessions > 1}})
	if err != nil {
		return plugin.LoadedModel{}, errors.Join(err, blocks.Close())
	}
	closeModel := func() error { return errors.Join(m.Close(), blocks.Close()) }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	opts := decodeOptions(beamWidth, x)
	tokens, took, err := m.Engine.WarmUp(ctx, opts)
	cancel()
	if err != nil {
		_ = closeModel()
		return plugin.LoadedModel{}, fmt.Errorf("open model %s: %w", dir, err)
	}
	man := m.Manifest
	// The gate travels with the model (gate.json beside the manifest); none is the safe default. A gate fitted
	// by an earlier version recorded its settings under their earlier names.
	g, err := gate.Load(dir)
	if err == nil && g.Fit != nil && g.Fit.Serving != nil {
		renamed := make(map[string]string, len(g.Fit.Serving))
		for k, v := range g.Fit.Serving {
			renamed[config.CurrentKey(k)] = v
		}
		g.Fit.Serving = renamed
	}
	if err != nil {
		_ = closeModel()
		return plugin.LoadedModel{}, err
	}
	if why := g.ServingMismatch(serving); len(why) > 0 && !g.Never {
		log.Warn("model gate fitted under other settings: not applied, policy gate answers the first stage's order (refit with scripts/calibrate.sh under these settings)",
			"gate", g.Source, "differences", why)
		g = g.Unfitted(why)
	}
	info := plugin.ModelInfo{Name: man.Name, Config: man.Config, Backbone: man.Backbone, ModelVersion: man.ModelVersion,
		DataVersion: man.DataVersion, SeenDocIDs: len(m.Seen), Dir: dir, Gate: plugin.NewGateInfo(g), Serving: &serving,
		Run: &plugin.RunInfo{Sessions: plan.sessions, IntraOpThreads: plan.threads, Chosen: plan.chosen,
			WarmPromptTokens: tokens, WarmRunMS: float64(took.Microseconds()) / 1000},
		BlockStore: blocks, BlockLayout: x.BlockReading}
	if g.Never {
		log.Warn("model gate never overrides the first stage: policy gate answers its order without running the model (unless experimental.run_model_when_gate_never)", "gate", g.Source)
	} else {
		log.Info("model gate loaded", "gate", g.Source, "threshold", g.Threshold)
	}
	log.Info("model loaded", "name", man.Name, "dir", dir, "file", m.File, "onnx_runtime", ort.Version(), "sessions", plan.sessions,
		"intra_op_threads", plan.threads, "chosen", plan.chosen, "warm_prompt_tokens", tokens, "warm_run_ms", took.Milliseconds(),
		"capacity_qps_estimate", float64(plan.sessions)/took.Seconds(),
		"seen_docids", len(m.Seen), "trie_nodes", m.Engine.GlobalTrie().Len(), "blocks_computed_by", cmp.Or(m.BlockFile, m.File))
	if blocks != nil && fillFrom != nil {
		stop := startBlockFill(fillFrom, m.Engine, blocks, opts, log.With("model", man.Name, "dir", dir))
		closeEngine := closeModel
		closeModel = func() error { stop(); return closeEngine() }
	}
	reader := rank.NewICICLE(m.Engine, opts, routeByFirstStage)
	return plugin.LoadedModel{Reader: reader, Info: info, Seen: m.Seen, Close: closeModel, Gate: g}, nil
}
