package config

import (
	"bytes"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite testdata/defaults.golden.yaml")

// envMap returns an env lookup function backed by m.
func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// fieldErrors flattens err (joined and wrapped) into its FieldErrors, in order.
func fieldErrors(t *testing.T, err error) []*FieldError {
	t.Helper()
	var out []*FieldError
	var walk func(error)
	walk = func(e error) {
		if fe, ok := e.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

func keys(fes []*FieldError) []string {
	out := make([]string, len(fes))
	for i, fe := range fes {
		out[i] = fe.Key
	}
	return out
}

func marshal(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	require.NoError(t, enc.Encode(v))
	require.NoError(t, enc.Close())
	return buf.Bytes()
}

func TestDefaultValidates(t *testing.T) {
	require.NoError(t, Default().Validate())
}

func TestDefaultIsFresh(t *testing.T) {
	a := Default()
	a.Elasticsearch.Addresses[0] = "http://changed:9200"
	require.Equal(t, "http://127.0.0.1:9200", Default().Elasticsearch.Addresses[0])
}

// TestDefaultsGolden pins the fully defaulted configuration as YAML; run with -update after changing a
// default on purpose.
func TestDefaultsGolden(t *testing.T) {
	golden := filepath.Join("testdata", "defaults.golden.yaml")
	got := marshal(t, Default())
	if *update {
		require.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test ./config -run TestDefaultsGolden -update")
	require.Equal(t, string(want), string(got), "defaults changed: rerun with -update if intended")

	// The rendering loads back to the same value.
	cfg, err := Load(golden, nil)
	require.NoError(t, err)
	require.Equal(t, Default(), cfg)
}

// keyPaths lists every key path of a YAML document ("server", "server.addr", ...).
func keyPaths(t *testing.T, data []byte) []string {
	t.Helper()
	var root yaml.Node
	require.NoError(t, yaml.Unmarshal(data, &root))
	ix := yamlIndex{keys: map[int][]string{}, values: map[int][]string{}, all: map[string]bool{}}
	ix.walk(&root, "")
	var out []string
	for k := range ix.all {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestExampleIsDefault: config/example.yaml, the keys a team sets, shows them at their defaults.
func TestExampleIsDefault(t *testing.T) {
	cfg, err := Load("example.yaml", nil)
	require.NoError(t, err)
	require.Equal(t, Default(), cfg)

	data, err := os.ReadFile("example.yaml")
	require.NoError(t, err)
	all := keyPaths(t, marshal(t, Default()))
	for _, k := range keyPaths(t, data) {
		require.Contains(t, all, k)
	}
}

// TestProfiles loads every shipped reader profile over the defaults: each validates, names a reader, and sets
// only the reader's keys; b7's settings are the ones its gate was fitted under.
func TestProfiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("profiles", "*.yaml"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 4)
	old := ProfileDirs
	ProfileDirs = []string{"profiles"}
	t.Cleanup(func() { ProfileDirs = old })
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			cfg, err := LoadWith(name, "", nil)
			require.NoError(t, err)
			require.Equal(t, name, cfg.Profile())
			require.NotEmpty(t, cfg.Model.Dir, "a profile names its reader")
			// By path as well as by name.
			byPath, err := LoadWith(f, "", nil)
			require.NoError(t, err)
			require.Equal(t, cfg, byPath)
		})
	}

	cfg, err := LoadWith("b7", "", nil)
	require.NoError(t, err)
	want := Default()
	want.profile = "b7"
	want.Model.Dir, want.Model.Quantized = "models/b7", true
	want.Decode.MaxCandidates, want.Experimental.CopyRankPrior = 100, 4
	want.Experimental.MemoryScope, want.Experimental.MemoryRankPrior = MemoryFirstStage, 4
	want.Experimental.RouteByFirstStage = true
	want.Experimental.BlockReading, want.Experimental.BlockPrecision = BlockReadingShared, "int8"
	want.Experimental.BlockStoreMB, want.Experimental.BlockDir = 6144, ".run/blocks"
	require.Equal(t, want, cfg)
}

// TestLoadWithLayers: the profile, then the team's file, then the environment, each over the one before.
func TestLoadWithLayers(t *testing.T) {
	dir := t.TempDir()
	team := filepath.Join(dir, "team.yaml")
	require.NoError(t, os.WriteFile(team, []byte("elasticsearch:\n  index: team-docs\ndecode:\n  max_candidates: 20\n"), 0o644))
	cfg, err := LoadWith(filepath.Join("profiles", "b7.yaml"), team,
		envMap(map[string]string{"ICICLE_EXPERIMENTAL_COPY_RANK_PRIOR": "2"}))
	require.NoError(t, err)
	require.Equal(t, "team-docs", cfg.Elasticsearch.Index)
	require.Equal(t, 20, cfg.Decode.MaxCandidates, "the team's file over the profile")
	require.Equal(t, 2.0, cfg.Experimental.CopyRankPrior, "the environment over both")
	require.Equal(t, "models/b7", cfg.Model.Dir)

	// A profile that sets a team's key is refused, naming the key.
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("model:\n  dir: models/b7\nelasticsearch:\n  index: other\n"), 0o644))
	_, err = LoadWith(bad, "", nil)
	require.ErrorContains(t, err, "elasticsearch.index: a reader profile sets only the reader's settings")

	_, err = LoadWith("no-such-profile", "", nil)
	require.ErrorContains(t, err, `reader profile "no-such-profile": not found`)
}

// TestPolicyAlias: "bm25", the former name of the first-stage policy, loads as first_stage.
func TestPolicyAlias(t *testing.T) {
	cfg, err := Load("", envMap(map[string]string{"ICICLE_POLICY_MODE": "bm25"}))
	require.NoError(t, err)
	require.Equal(t, PolicyFirstStage, cfg.Policy.Mode)
}

// TestMovedEnv: a variable of a key that moved to the experimental section is an error naming the new one.
func TestMovedEnv(t *testing.T) {
	_, err := Load("", envMap(map[string]string{"ICICLE_DECODE_COPY_RANK_PRIOR": "2"}))
	require.ErrorContains(t, err, "decode.copy_rank_prior (env ICICLE_DECODE_COPY_RANK_PRIOR): moved to "+
		"experimental.copy_rank_prior (environment ICICLE_EXPERIMENTAL_COPY_RANK_PRIOR)")
}

func TestLoadGood(t *testing.T) {
	want := map[string]func(c *Config){
		"full.good.yaml": func(c *Config) {
			c.Server = Server{
				Addr: "0.0.0.0:9090", ReadHeaderTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second,
				WriteTimeout: 10 * time.Second, ShutdownTimeout: 20 * time.Second, MaxBodyBytes: 1 << 20,
				RequestTimeout: 1500 * time.Millisecond, ESBudgetFraction: 0.25, MaxQueryChars: 512, MaxHits: 200,
				AdminToken: "0123456789abcdef-admin",
				WriteToken: "0123456789abcdef-write", AdminAddr: "127.0.0.1:9091",
				TrustedProxies: []string{"10.0.0.0/8", "192.168.1.7"},
			}
			c.Elasticsearch = Elasticsearch{
				Addresses: []string{"https://es-1.internal:9200", "https://es-2.internal:9200"},
				APIKey:    "aWQ6YXBpX2tleQ==", CACert: "/etc/icicle/ca.pem",
				CertFingerprint: "AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89",
				Index:           "nq-docs", Shards: 3, RequestTimeout: 3 * time.Second, MaxRetries: 0,
				CallerCredentials: CallerService,
				AllowedIndices:    []string{"nq-docs", "nq-docs-2025"},
			}
			c.Dropin = Dropin{RankWindowSize: 50, AllowScripts: true}
			c.Model = Model{
				Dir: "/models/nq", Quantized: true, Provider: "cuda", IntraOpThreads: 4, InterOpThreads: 0,
				ORTLibrary: "/opt/ort/lib/libonnxruntime.so",
			}
			c.Decode = Decode{BeamWidth: 20, MaxCandidates: 50}
			c.Experimental = Experimental{MaxSummaryTokens: 128, MaxPromptTokens: 4096, TitleOnly: true,
				BlockReading: BlockReadingOff, BlockStoreMB: 1024, BlockPrecision: BlockPrecisionFloat32, BlockFill: true, BlockDir: "",
				Scoring: ScoringVocab, CopyLogPrior: -1.5, CopyRankPrior: 2, MemoryScope: MemoryFirstStage, MemoryRankPrior: 1.5,
				MinCopyProb: 0.2, MinTopScore: -12.5, FusionK: 10}
			c.Breaker = Breaker{ConsecutiveFailures: 3, Interval: 0, OpenTimeout: time.Minute, HalfOpenMaxRequests: 2}
			c.Policy = Policy{Mode: PolicyFusion, AllowOverride: true}
			c.Concurrency = Concurrency{MaxInflight: 4, QueueSize: 0, QueueTimeout: 100 * time.Millisecond}
			c.AB = AB{Enabled: true, SplitB: 0.1, Mode: ABInterleave, KeyHeader: "X-Session-Id", Experiment: "nq-2025-q3",
				ImpressionLog: "/var/log/icicle/impressions.jsonl", ImpressionLogMaxBytes: 0, ImpressionBuffer: 100}
			c.Log = Log{Level: "debug", Format: "json"}
			c.Metrics = Metrics{Enabled: false, Path: "/internal/metrics"}
			c.Compressor = Compressor{Kind: CompressorLLM, LLMURL: "https://llm.internal/v1", LLMModel: "Qwen/Qwen2.5-14B-Instruct",
				APIKey: "sk-test", Timeout: 2 * time.Minute, MaxRetries: 5, MaxTokens: 200, Concurrency: 16}
		},
		"minimal.good.yaml": func(c *Config) {
			c.Elasticsearch.Addresses = []string{"http://elasticsearch:9200"}
			c.Model.Dir = "/models/tiny"
		},
		"cloud.good.yaml": func(c *Config) {
			c.Elasticsearch.Addresses = nil
			c.Elasticsearch.CloudID = "icicle:ZXUtd2VzdC0xLmF3cy5mb3VuZC5pbyRhYmMkZGVm"
			c.Elasticsearch.Username = "icicle"
			c.Elasticsearch.Password = "s3cret"
		},
		"empty.good.yaml": func(*Config) {},
	}
	files, err := filepath.Glob(filepath.Join("testdata", "*.good.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			edit, ok := want[filepath.Base(path)]
			require.True(t, ok, "add an expectation for %s to TestLoadGood", path)
			expected := Default()
			edit(&expected)

			got, err := Load(path, nil)
			require.NoError(t, err)
			require.Equal(t, expected, got)
		})
	}
}

func TestLoadBad(t *testing.T) {
	// Every problem is reported at once, in file (decoding) or field (validation) order.
	want := map[string][]string{
		"unknown_key.bad.yaml": {"server.adress", "model.quantised", "metric"},
		"wrong_type.bad.yaml": {
			"server.read_timeout", "server.max_hits", "server.es_budget_fraction", "elasticsearch.addresses",
			"model.quantized", "model.dir", "decode", "breaker.interval",
		},
		"bad_values.bad.yaml": {
			"server.addr", "server.request_timeout", "server.es_budget_fraction", "server.max_hits", "server.admin_token",
			"elasticsearch.addresses[1]", "elasticsearch.api_key", "elasticsearch.cert_fingerprint",
			"elasticsearch.index", "elasticsearch.max_retries", "elasticsearch.shards",
			"model.provider",
			"decode.beam_width", "decode.max_candidates",
			"experimental.summary_candidates", "experimental.block_reading", "experimental.block_store_mb",
			"experimental.block_precision", "experimental.scoring", "experimental.copy_log_prior",
			"experimental.copy_rank_prior", "experimental.memory_scope", "experimental.memory_rank_prior",
			"experimental.min_copy_prob", "experimental.min_top_score",
			"breaker.consecutive_failures", "breaker.open_timeout",
			"policy.mode",
			"concurrency.max_inflight",
			"ab.split_b", "ab.mode", "ab.key_header", "ab.experiment", "ab.impression_log_max_bytes", "ab.impression_buffer",
			"log.level", "log.format",
			"metrics.path",
			"compressor.llm_url", "compressor.llm_model", "compressor.timeout", "compressor.max_retries",
			"compressor.max_tokens", "compressor.concurrency",
		},
		"duplicate_key.bad.yaml": {"decode.beam_width"},
		"removed_key.bad.yaml":   {"model.kv_cache_tokens"},
		"moved_key.bad.yaml":     {"decode.copy_rank_prior", "policy.route_by_first_stage"},
		"two_documents.bad.yaml": nil, // not a field error: the message names the problem
		"syntax.bad.yaml":        nil,
	}
	files, err := filepath.Glob(filepath.Join("testdata", "*.bad.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			wantKeys, ok := want[filepath.Base(path)]
			require.True(t, ok, "add an expectation for %s to TestLoadBad", path)

			cfg, err := Load(path, nil)
			require.Error(t, err)
			require.Zero(t, cfg.Server.Addr, "a failed Load returns the zero Config")
			require.Contains(t, err.Error(), path, "the error names the file")
			require.Equal(t, wantKeys, nilIfEmpty(keys(fieldErrors(t, err))), "error:\n%v", err)
		})
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func TestLoadBadMessages(t *testing.T) {
	tests := []struct {
		file string
		want []string // substrings of the error text: the key, the line and the bad value
	}{
		{"unknown_key.bad.yaml", []string{`server.adress (line 3): unknown key "adress"`, `metric (line 10): unknown key "metric"`}},
		{"removed_key.bad.yaml", []string{`model.kv_cache_tokens (line 3): removed (it was never used)`}},
		{"moved_key.bad.yaml", []string{`decode.copy_rank_prior (line 4): moved to experimental.copy_rank_prior`,
			`policy.route_by_first_stage (line 6): moved to experimental.route_by_first_stage`}},
		{"wrong_type.bad.yaml", []string{"server.read_timeout (line 2)", "`lots`", `such as "2s"`}},
		{"bad_values.bad.yaml", []string{
			`elasticsearch.addresses[1]: want an http or https URL such as "http://127.0.0.1:9200", got "ftp://files.internal"`,
			`decode.beam_width: must be between 1 and 100, got 0`,
			`model.provider: must be one of ["cpu" "cuda"], got "tpu"`,
			`server.request_timeout: must be shorter than server.write_timeout (30s)`,
		}},
		{"duplicate_key.bad.yaml", []string{`decode.beam_width (line 3): duplicate key "beam_width" (first at line 2)`}},
		{"two_documents.bad.yaml", []string{"line 3: more than one YAML document"}},
		{"syntax.bad.yaml", []string{"parse yaml: yaml: line"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			_, err := Load(filepath.Join("testdata", tt.file), nil)
			require.Error(t, err)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"), nil)
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestLoadEnv(t *testing.T) {
	tests := []struct {
		name    string
		file    string // "" for none
		env     map[string]string
		check   func(t *testing.T, c Config)
		errKeys []string // want a Load error with exactly these FieldError keys
		errEnvs []string // and these variables named
	}{
		{
			name: "typed values",
			env: map[string]string{
				"ICICLE_SERVER_ADDR":                ":9999",
				"ICICLE_SERVER_REQUEST_TIMEOUT":     "1500ms",
				"ICICLE_SERVER_MAX_BODY_BYTES":      "1024",
				"ICICLE_SERVER_ES_BUDGET_FRACTION":  "0.2",
				"ICICLE_ELASTICSEARCH_ADDRESSES":    " http://a:9200, ,https://b:9200 ",
				"ICICLE_MODEL_DIR":                  "/models/x",
				"ICICLE_MODEL_QUANTIZED":            "true",
				"ICICLE_EXPERIMENTAL_MIN_TOP_SCORE": "-inf",
				"ICICLE_METRICS_ENABLED":            "0",
			},
			check: func(t *testing.T, c Config) {
				require.Equal(t, ":9999", c.Server.Addr)
				require.Equal(t, 1500*time.Millisecond, c.Server.RequestTimeout)
				require.EqualValues(t, 1024, c.Server.MaxBodyBytes)
				require.InDelta(t, 0.2, c.Server.ESBudgetFraction, 0)
				require.Equal(t, []string{"http://a:9200", "https://b:9200"}, c.Elasticsearch.Addresses)
				require.Equal(t, "/models/x", c.Model.Dir)
				require.True(t, c.Model.Quantized)
				require.True(t, math.IsInf(c.Experimental.MinTopScore, -1))
				require.False(t, c.Metrics.Enabled)
			},
		},
		{
			name: "environment overrides YAML",
			file: "full.good.yaml",
			env:  map[string]string{"ICICLE_DECODE_BEAM_WIDTH": "3", "ICICLE_LOG_LEVEL": "warn"},
			check: func(t *testing.T, c Config) {
				require.Equal(t, 3, c.Decode.BeamWidth)
				require.Equal(t, "warn", c.Log.Level)
				require.Equal(t, 50, c.Decode.MaxCandidates, "YAML values without a variable stay")
			},
		},
		{
			name:  "empty variable counts as unset",
			file:  "minimal.good.yaml",
			env:   map[string]string{"ICICLE_MODEL_DIR": "", "ICICLE_DECODE_BEAM_WIDTH": ""},
			check: func(t *testing.T, c Config) { require.Equal(t, "/models/tiny", c.Model.Dir) },
		},
		{
			name:  "ICICLE_ORT_LIB fills an empty ort_library",
			env:   map[string]string{"ICICLE_ORT_LIB": "/lib/ort.so"},
			check: func(t *testing.T, c Config) { require.Equal(t, "/lib/ort.so", c.Model.ORTLibrary) },
		},
		{
			name:  "ICICLE_MODEL_ORT_LIBRARY wins over ICICLE_ORT_LIB",
			env:   map[string]string{"ICICLE_ORT_LIB": "/lib/a.so", "ICICLE_MODEL_ORT_LIBRARY": "/lib/b.so"},
			check: func(t *testing.T, c Config) { require.Equal(t, "/lib/b.so", c.Model.ORTLibrary) },
		},
		{
			name:  "YAML ort_library wins over ICICLE_ORT_LIB",
			file:  "full.good.yaml",
			env:   map[string]string{"ICICLE_ORT_LIB": "/lib/a.so"},
			check: func(t *testing.T, c Config) { require.Equal(t, "/opt/ort/lib/libonnxruntime.so", c.Model.ORTLibrary) },
		},
		{
			name: "cloud id from the environment clears the default addresses",
			env:  map[string]string{"ICICLE_ELASTICSEARCH_CLOUD_ID": "x:eQ=="},
			check: func(t *testing.T, c Config) {
				require.Empty(t, c.Elasticsearch.Addresses)
				require.Equal(t, "x:eQ==", c.Elasticsearch.CloudID)
			},
		},
		{
			name: "llm compressor from the environment",
			env: map[string]string{"ICICLE_COMPRESSOR_KIND": "llm", "ICICLE_COMPRESSOR_LLM_URL": "http://127.0.0.1:8000/v1",
				"ICICLE_COMPRESSOR_LLM_MODEL": "m", "ICICLE_COMPRESSOR_API_KEY": "k", "ICICLE_COMPRESSOR_CONCURRENCY": "8"},
			check: func(t *testing.T, c Config) {
				require.Equal(t, Compressor{Kind: CompressorLLM, LLMURL: "http://127.0.0.1:8000/v1", LLMModel: "m", APIKey: "k",
					Timeout: time.Minute, MaxRetries: 3, MaxTokens: 256, Concurrency: 8}, c.Compressor)
			},
		},
		{
			name:    "llm compressor with a bad url and no model",
			env:     map[string]string{"ICICLE_COMPRESSOR_KIND": "llm", "ICICLE_COMPRESSOR_LLM_URL": "localhost:8000"},
			errKeys: []string{"compressor.llm_url", "compressor.llm_model"},
			errEnvs: []string{"ICICLE_COMPRESSOR_LLM_URL", ""},
		},
		{
			name:    "cloud id and explicit addresses conflict",
			file:    "minimal.good.yaml",
			env:     map[string]string{"ICICLE_ELASTICSEARCH_CLOUD_ID": "x:eQ=="},
			errKeys: []string{"elasticsearch.addresses"},
			errEnvs: []string{""},
		},
		{
			name: "unparseable variables, all named",
			env: map[string]string{
				"ICICLE_SERVER_READ_TIMEOUT": "10",
				"ICICLE_DECODE_BEAM_WIDTH":   "ten",
				"ICICLE_MODEL_QUANTIZED":     "maybe",
				"ICICLE_AB_SPLIT_B":          "half",
			},
			errKeys: []string{"server.read_timeout", "model.quantized", "decode.beam_width", "ab.split_b"},
			errEnvs: []string{"ICICLE_SERVER_READ_TIMEOUT", "ICICLE_MODEL_QUANTIZED", "ICICLE_DECODE_BEAM_WIDTH", "ICICLE_AB_SPLIT_B"},
		},
		{
			name:    "YAML and environment errors together",
			file:    "unknown_key.bad.yaml",
			env:     map[string]string{"ICICLE_DECODE_BEAM_WIDTH": "ten"},
			errKeys: []string{"server.adress", "model.quantised", "metric", "decode.beam_width"},
			errEnvs: []string{"", "", "", "ICICLE_DECODE_BEAM_WIDTH"},
		},
		{
			name: "invalid values name their variable",
			file: "minimal.good.yaml",
			env: map[string]string{
				"ICICLE_DECODE_BEAM_WIDTH":       "0",
				"ICICLE_ELASTICSEARCH_ADDRESSES": "http://ok:9200,elasticsearch:9200",
			},
			errKeys: []string{"elasticsearch.addresses[1]", "decode.beam_width"},
			errEnvs: []string{"ICICLE_ELASTICSEARCH_ADDRESSES", "ICICLE_DECODE_BEAM_WIDTH"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.file != "" {
				path = filepath.Join("testdata", tt.file)
			}
			cfg, err := Load(path, envMap(tt.env))
			if tt.errKeys != nil {
				require.Error(t, err)
				fes := fieldErrors(t, err)
				require.Equal(t, tt.errKeys, keys(fes), "error:\n%v", err)
				envs := make([]string, len(fes))
				for i, fe := range fes {
					envs[i] = fe.Env
					if fe.Env != "" {
						require.ErrorContains(t, err, fe.Env)
					}
				}
				require.Equal(t, tt.errEnvs, envs)
				return
			}
			require.NoError(t, err)
			tt.check(t, cfg)
		})
	}
}

func TestLoadNoFileNoEnvIsDefault(t *testing.T) {
	cfg, err := Load("", nil)
	require.NoError(t, err)
	require.Equal(t, Default(), cfg)

	cfg, err = Load("", envMap(nil))
	require.NoError(t, err)
	require.Equal(t, Default(), cfg)
}

func TestEnvVars(t *testing.T) {
	names := EnvVars()
	require.True(t, slices.IsSorted(names))
	require.Len(t, names, len(slices.Compact(slices.Clone(names))), "no duplicates")
	for _, want := range []string{
		"ICICLE_SERVER_ADDR", "ICICLE_ELASTICSEARCH_ADDRESSES", "ICICLE_MODEL_DIR", "ICICLE_MODEL_ORT_LIBRARY",
		"ICICLE_ORT_LIB", "ICICLE_AB_KEY_HEADER", "ICICLE_SERVER_ES_BUDGET_FRACTION", "ICICLE_METRICS_PATH",
	} {
		require.Contains(t, names, want)
	}

	// Every variable is read and parsed: setting each to a valid rendering of its default parses, and
	// each key of the YAML rendering has exactly one variable.
	var c Config
	fields := leaves(&c)
	require.Len(t, names, len(fields)+1) // + ICICLE_ORT_LIB
	yamlKeys := keyPaths(t, marshal(t, Default()))
	for _, f := range fields {
		require.Contains(t, yamlKeys, f.key)
		require.True(t, strings.HasPrefix(f.env, EnvPrefix))
	}

	defaults := Default()
	env := map[string]string{}
	for _, f := range leaves(&defaults) {
		var s string
		switch v := f.v.Interface().(type) {
		case time.Duration:
			s = v.String()
		case []string:
			s = strings.Join(v, ",")
		case string:
			s = v
		default:
			var buf bytes.Buffer
			require.NoError(t, yaml.NewEncoder(&buf).Encode(v))
			s = strings.TrimSpace(buf.String())
			if s == "-.inf" {
				s = "-inf"
			}
		}
		env[f.env] = s
	}
	cfg, err := Load("", envMap(env))
	require.NoError(t, err)
	want := Default()
	require.Equal(t, want.Server, cfg.Server)
	require.Equal(t, want.Policy, cfg.Policy)
	require.Equal(t, want.Elasticsearch, cfg.Elasticsearch)
	require.Len(t, cfg.fromEnv, len(env)-countEmpty(env))
}

func countEmpty(m map[string]string) int {
	n := 0
	for _, v := range m {
		if v == "" {
			n++
		}
	}
	return n
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(c *Config)
		want []string // FieldError keys; nil for valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"cloud id with no addresses", func(c *Config) { c.Elasticsearch.Addresses = nil; c.Elasticsearch.CloudID = "x:eQ==" }, nil},
		{"no addresses", func(c *Config) { c.Elasticsearch.Addresses = nil }, []string{"elasticsearch.addresses"}},
		{"cloud id and addresses", func(c *Config) { c.Elasticsearch.CloudID = "x:eQ==" }, []string{"elasticsearch.addresses"}},
		{"address without scheme", func(c *Config) { c.Elasticsearch.Addresses = []string{"localhost:9200"} }, []string{"elasticsearch.addresses[0]"}},
		{"password without user", func(c *Config) { c.Elasticsearch.Password = "x" }, []string{"elasticsearch.username"}},
		{"user without password", func(c *Config) { c.Elasticsearch.Username = "x" }, []string{"elasticsearch.password"}},
		{"api key and basic auth", func(c *Config) {
			c.Elasticsearch.APIKey, c.Elasticsearch.Username, c.Elasticsearch.Password = "k", "u", "p"
		}, []string{"elasticsearch.api_key"}},
		{"fingerprint without colons", func(c *Config) { c.Elasticsearch.CertFingerprint = strings.Repeat("0a", 32) }, nil},
		{"index pattern", func(c *Config) { c.Elasticsearch.Index = "docs-*" }, nil},
		{"queue timeout beyond the request", func(c *Config) { c.Concurrency.QueueTimeout = 2 * time.Second }, []string{"concurrency.queue_timeout"}},
		{"queue timeout beyond the working share", func(c *Config) { c.Concurrency.QueueTimeout = 1800 * time.Millisecond }, []string{"concurrency.queue_timeout"}},
		{"queue timeout within the working share", func(c *Config) { c.Concurrency.QueueTimeout = 1790 * time.Millisecond }, nil},
		{"budget fraction leaving the model nothing", func(c *Config) { c.Server.ESBudgetFraction = 0.5 }, []string{"server.es_budget_fraction"}},
		{"metrics on an API path", func(c *Config) { c.Metrics.Path = "/v1/search" }, []string{"metrics.path"}},
		{"metrics on a drop-in path", func(c *Config) { c.Metrics.Path = "/docs/_search" }, []string{"metrics.path"}},
		{"metrics moved", func(c *Config) { c.Metrics.Path = "/internal/metrics" }, nil},
		// issue 16: the CUDA device ordinal
		{"negative device id", func(c *Config) { c.Model.DeviceID = -1 }, []string{"model.device_id"}},
		{"second GPU", func(c *Config) { c.Model.DeviceID = 1 }, nil},
		{"NaN thresholds", func(c *Config) { c.Experimental.MinTopScore, c.Experimental.MinCopyProb = math.NaN(), math.NaN() },
			[]string{"experimental.min_copy_prob", "experimental.min_top_score"}},
		{"negative durations", func(c *Config) { c.Server.ReadTimeout, c.Breaker.Interval = -time.Second, -time.Second },
			[]string{"server.read_timeout", "breaker.interval"}},
		{"zero budget fraction", func(c *Config) { c.Server.ESBudgetFraction = 0 }, []string{"server.es_budget_fraction"}},
		{"empty header", func(c *Config) { c.AB.KeyHeader = "" }, []string{"ab.key_header"}},
		{"admin token with a space", func(c *Config) { c.Server.AdminToken = "0123456789 abcdef" }, []string{"server.admin_token"}},
		{"admin token of 16 characters", func(c *Config) { c.Server.AdminToken = "0123456789abcdef" }, nil},
		// issue 14b: the click log and the write token.
		{"click log without a write token", func(c *Config) { c.AB.ClickLog = "/var/log/icicle/clicks.jsonl" }, []string{"ab.click_log"}},
		{"click log on the impression log", func(c *Config) {
			c.Server.WriteToken, c.AB.ImpressionLog, c.AB.ClickLog = "0123456789abcdef", "/tmp/log.jsonl", "/tmp/log.jsonl"
		}, []string{"ab.click_log"}},
		{"click log", func(c *Config) {
			c.Server.WriteToken, c.AB.ImpressionLog, c.AB.ClickLog = "0123456789abcdef", "/tmp/imp.jsonl", "/tmp/clicks.jsonl"
		}, nil},
		{"upper-case level", func(c *Config) { c.Log.Level = "INFO" }, []string{"log.level"}},
		{"dense weight spread out of range", func(c *Config) { c.FirstStage.DenseWeightSpread = 25 }, []string{"first_stage.dense_weight_spread"}},
		{"dense weight spread NaN", func(c *Config) { c.FirstStage.DenseWeightSpread = math.NaN() }, []string{"first_stage.dense_weight_spread"}},
		{"a fixed dense weight", func(c *Config) { c.FirstStage.DenseWeight, c.FirstStage.DenseWeightSpread = 0.8, 0 }, nil},
		{"memory rank prior without the first stage's scope", func(c *Config) { c.Experimental.MemoryRankPrior = 2 }, []string{"experimental.memory_rank_prior"}},
		{"memory rank prior", func(c *Config) { c.Experimental.MemoryRankPrior, c.Experimental.MemoryScope = 2, MemoryFirstStage }, nil},
		// Security (issue 13).
		{"short write token", func(c *Config) { c.Server.WriteToken = "short" }, []string{"server.write_token"}},
		{"write token of 16 characters", func(c *Config) { c.Server.WriteToken = "0123456789abcdef" }, nil},
		{"admin addr without port", func(c *Config) { c.Server.AdminAddr = "localhost" }, []string{"server.admin_addr"}},
		{"admin addr equal to addr", func(c *Config) { c.Server.AdminAddr = c.Server.Addr }, []string{"server.admin_addr"}},
		{"tls cert without key", func(c *Config) { c.Server.TLSCertFile = "cert.pem" }, []string{"server.tls_key_file"}},
		{"tls key without cert", func(c *Config) { c.Server.TLSKeyFile = "key.pem" }, []string{"server.tls_cert_file"}},
		{"tls files missing", func(c *Config) {
			c.Server.TLSCertFile, c.Server.TLSKeyFile = "/nonexistent/c.pem", "/nonexistent/k.pem"
		},
			[]string{"server.tls_cert_file"}},
		{"unknown caller credentials", func(c *Config) { c.Elasticsearch.CallerCredentials = "caller" }, []string{"elasticsearch.caller_credentials"}},
		{"llm compressor without url and model", func(c *Config) { c.Compressor.Kind = CompressorLLM },
			[]string{"compressor.llm_url", "compressor.llm_model"}},
		{"llm compressor", func(c *Config) {
			c.Compressor.Kind, c.Compressor.LLMURL, c.Compressor.LLMModel = CompressorLLM, "http://127.0.0.1:8000/v1", "m"
		}, nil},
		{"unknown compressor", func(c *Config) { c.Compressor.Kind = "abstractive" }, []string{"compressor.kind"}},
		// query snippets instead of stored summaries
		{"snippets", func(c *Config) { c.Experimental.SnippetChars = 150 }, nil},
		{"negative snippet chars", func(c *Config) { c.Experimental.SnippetChars = -1 }, []string{"experimental.snippet_chars"}},
		{"snippets with block reading", func(c *Config) { c.Experimental.SnippetChars, c.Experimental.BlockReading = 150, BlockReadingShared },
			[]string{"experimental.snippet_chars"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.edit(&c)
			err := c.Validate()
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Equal(t, tt.want, keys(fieldErrors(t, err)), "error:\n%v", err)
		})
	}
}

func TestFieldErrorAs(t *testing.T) {
	c := Default()
	c.Decode.BeamWidth = 0
	var fe *FieldError
	require.True(t, errors.As(c.Validate(), &fe))
	require.Equal(t, "decode.beam_width", fe.Key)
	require.Equal(t, "decode.beam_width: must be between 1 and 100, got 0", fe.Error())
	fe.Env, fe.Line = "ICICLE_DECODE_BEAM_WIDTH", 7
	require.Equal(t, "decode.beam_width (env ICICLE_DECODE_BEAM_WIDTH) (line 7): must be between 1 and 100, got 0", fe.Error())
}

func TestRedacted(t *testing.T) {
	c := Default()
	c.Elasticsearch.APIKey = "secret-key"
	c.Elasticsearch.Password = "secret-pass"
	c.Server.AdminToken = "secret-admin-token"
	c.Server.WriteToken = "secret-write-token"
	c.Compressor.APIKey = "secret-llm-key"
	c.Elasticsearch.Addresses = []string{"https://u:secret-url@es:9200", "http://es2:9200"}
	r := c.Redacted()
	out := string(marshal(t, r))
	require.NotContains(t, out, "secret")
	require.Equal(t, []string{"https://u:xxxxx@es:9200", "http://es2:9200"}, r.Elasticsearch.Addresses)
	require.Equal(t, "https://u:secret-url@es:9200", c.Elasticsearch.Addresses[0], "the original is untouched")
}

func TestValidateDropin(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(c *Config)
		key  string // the key the error names; "" for valid
	}{
		{name: "defaults", edit: func(*Config) {}},
		{name: "explicit names", edit: func(c *Config) { c.Elasticsearch.AllowedIndices = []string{"docs", "docs-v2"} }},
		{name: "a pattern", edit: func(c *Config) { c.Elasticsearch.AllowedIndices = []string{"docs", "logs-*"} }, key: "elasticsearch.allowed_indices[1]"},
		{name: "_all", edit: func(c *Config) { c.Elasticsearch.AllowedIndices = []string{"_all"} }, key: "elasticsearch.allowed_indices[0]"},
		{name: "a list in one entry", edit: func(c *Config) { c.Elasticsearch.AllowedIndices = []string{"a,b"} }, key: "elasticsearch.allowed_indices[0]"},
		{name: "a remote cluster", edit: func(c *Config) { c.Elasticsearch.AllowedIndices = []string{"other:docs"} }, key: "elasticsearch.allowed_indices[0]"},
		{name: "an exclusion", edit: func(c *Config) { c.Elasticsearch.AllowedIndices = []string{"-docs"} }, key: "elasticsearch.allowed_indices[0]"},
		{name: "window zero", edit: func(c *Config) { c.Dropin.RankWindowSize = 0 }, key: "dropin.rank_window_size"},
		{name: "window too large", edit: func(c *Config) { c.Dropin.RankWindowSize = 10001 }, key: "dropin.rank_window_size"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.edit(&c)
			err := c.Validate()
			if tt.key == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.key)
		})
	}
}

func TestDropinFromEnv(t *testing.T) {
	env := map[string]string{"ICICLE_ELASTICSEARCH_ALLOWED_INDICES": "docs,docs-v2", "ICICLE_DROPIN_RANK_WINDOW_SIZE": "50",
		"ICICLE_DROPIN_ALLOW_SCRIPTS": "true"}
	c, err := Load("", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	require.Equal(t, []string{"docs", "docs-v2"}, c.Elasticsearch.AllowedIndices)
	require.Equal(t, Dropin{RankWindowSize: 50, AllowScripts: true}, c.Dropin)
}
