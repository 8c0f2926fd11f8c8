//go:build integration && ort && tokenizers

package integration

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/dropin"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/internal/abtest"
	"github.com/icicle-search/sidecar/internal/compress"
	"github.com/icicle-search/sidecar/internal/gate"
	"github.com/icicle-search/sidecar/plugin"
	"github.com/icicle-search/sidecar/rank"
	"github.com/icicle-search/sidecar/retrieve"
)

// sidecarOptions are an in-process sidecar's settings in one flat struct: the HTTP layer's (plugin.Options)
// and the ranking's (rank.Options, rank.GuardOptions). newSidecar wires them as cmd/icicle does.
type sidecarOptions struct {
	MaxBodyBytes        int64
	RequestTimeout      time.Duration
	ESBudgetFraction    float64
	MaxQueryChars       int
	MaxHits             int
	Fields              dropin.SourceFields
	AllowPolicyOverride bool
	Model               plugin.ModelInfo
	Ingester            plugin.Ingester
	Compressor          compress.Compressor
	AB                  plugin.ABOptions
	Impressions         *abtest.ImpressionLog
	Clicks              *abtest.ClickLog
	CallerCredentials   string
	WriteToken          string
	AllowedIndices      []string

	MaxCandidates         int
	Decode                inference.Options
	FirstStage            rank.FirstStage
	MaxInflight           int
	QueueSize             int
	ConsecutiveFailures   int
	OpenTimeout           time.Duration
	Policy                string
	Gate                  *gate.Gate
	RouteByFirstStage     bool
	MemoryFromFirstStage  bool
	MinTopScore           float64
	RunModelWhenGateNever bool
	// Swapper, when set, is the reader instead of engine (a swappable one that knows its seen corpus).
	Swapper *plugin.Swapper
}

// newSidecar is an in-process sidecar over es with engine as its reader (nil: none) and, without
// o.FirstStage, BM25 over es as its first stage.
func newSidecar(es *adapter.Adapter, engine rank.Ranker, o sidecarOptions) *plugin.Server {
	log := slog.New(slog.DiscardHandler)
	first := o.FirstStage
	if first == nil {
		bm25 := retrieve.DefaultParams
		bm25.Method = retrieve.MethodBM25
		st, err := retrieve.New(es, nil, bm25, log)
		if err != nil {
			panic(err) // static parameters
		}
		first = st
	}
	var source rank.Source
	switch {
	case o.Swapper != nil:
		source = o.Swapper
	case engine != nil:
		source = rank.Fixed{Reader: rank.NewICICLE(engine, o.Decode, o.RouteByFirstStage), G: o.Gate, N: o.Model.Name}
	}
	reg := prometheus.NewRegistry()
	metrics := rank.NewMetrics(reg)
	guard := rank.NewGuard(rank.GuardOptions{MaxInflight: o.MaxInflight, QueueSize: o.QueueSize,
		ConsecutiveFailures: o.ConsecutiveFailures, OpenTimeout: o.OpenTimeout, Logger: log,
		RunBudget: time.Duration(float64(o.RequestTimeout) * (0.9 - o.ESBudgetFraction))}, metrics)
	pipe, err := rank.New(first, es, source, guard, metrics, rank.Options{Policy: o.Policy,
		RunModelWhenGateNever: o.RunModelWhenGateNever, MaxCandidates: o.MaxCandidates, BeamWidth: o.Decode.BeamWidth,
		RouteByFirstStage: o.RouteByFirstStage, MemoryFromFirstStage: o.MemoryFromFirstStage, MinTopScore: o.MinTopScore,
		RequestTimeout: o.RequestTimeout, ReserveFraction: o.ESBudgetFraction, Logger: log})
	if err != nil {
		panic(err)
	}
	return plugin.New(es, pipe, o.Swapper, plugin.Options{MaxBodyBytes: o.MaxBodyBytes, RequestTimeout: o.RequestTimeout,
		MaxQueryChars: o.MaxQueryChars, MaxHits: o.MaxHits, Fields: o.Fields, AllowPolicyOverride: o.AllowPolicyOverride,
		Model: o.Model, Ingester: o.Ingester, Compressor: o.Compressor, AB: o.AB, Impressions: o.Impressions,
		Clicks: o.Clicks, CallerCredentials: o.CallerCredentials, WriteToken: o.WriteToken,
		AllowedIndices: o.AllowedIndices, Registry: reg})
}
