package config

import (
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// Validate checks every field and every relation between fields and returns all the problems at once,
// joined with errors.Join, each a *FieldError naming the key (and the environment variable when Load
// took the value from one) and the bad value. It returns nil for a usable configuration.
func (c Config) Validate() error {
	v := validator{env: c.fromEnv}

	s := c.Server
	if _, port, err := net.SplitHostPort(s.Addr); err != nil || port == "" {
		v.add("server.addr", "want host:port such as \":8080\", got %q", s.Addr)
	}
	v.positive("server.read_header_timeout", s.ReadHeaderTimeout)
	v.positive("server.read_timeout", s.ReadTimeout)
	v.positive("server.write_timeout", s.WriteTimeout)
	v.positive("server.shutdown_timeout", s.ShutdownTimeout)
	v.atLeast("server.max_body_bytes", s.MaxBodyBytes, 1)
	v.positive("server.request_timeout", s.RequestTimeout)
	if s.RequestTimeout > 0 && s.WriteTimeout > 0 && s.RequestTimeout >= s.WriteTimeout {
		v.add("server.request_timeout", "must be shorter than server.write_timeout (%s) or the response cannot be written, got %s",
			s.WriteTimeout, s.RequestTimeout)
	}
	if !(s.ESBudgetFraction > 0 && s.ESBudgetFraction < 0.5) {
		v.add("server.es_budget_fraction", "must be between 0 and 0.5, both excluded (the reserve held back at the end of a request; the first stage and the model need the rest), got %v", s.ESBudgetFraction)
	}
	v.atLeast("server.max_query_chars", int64(s.MaxQueryChars), 1)
	v.atLeast("server.max_hits", int64(s.MaxHits), 1)
	if t := s.AdminToken; t != "" && (len(t) < 16 || strings.ContainsAny(t, " \t\r\n")) {
		v.add("server.admin_token", "want at least 16 characters without spaces (a bearer token), got %d characters", len(t))
	}
	validateSecurity(&v, &c)

	es := c.Elasticsearch
	switch {
	case es.CloudID != "" && len(es.Addresses) > 0:
		v.add("elasticsearch.addresses", "must be empty when elasticsearch.cloud_id is set, got %q", es.Addresses)
	case es.CloudID == "" && len(es.Addresses) == 0:
		v.add("elasticsearch.addresses", "must list at least one URL unless elasticsearch.cloud_id is set")
	}
	for i, a := range es.Addresses {
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.addAt("elasticsearch.addresses", fmt.Sprintf("elasticsearch.addresses[%d]", i),
				"want an http or https URL such as \"http://127.0.0.1:9200\", got %q", a)
		}
	}
	if es.APIKey != "" && (es.Username != "" || es.Password != "") {
		v.add("elasticsearch.api_key", "set either api_key or username/password, not both")
	}
	if (es.Username == "") != (es.Password == "") {
		if es.Username == "" {
			v.add("elasticsearch.username", "must be set when elasticsearch.password is set")
		} else {
			v.add("elasticsearch.password", "must be set when elasticsearch.username (%q) is set", es.Username)
		}
	}
	if fp := es.CertFingerprint; fp != "" {
		raw, err := hex.DecodeString(strings.ReplaceAll(fp, ":", ""))
		if err != nil || len(raw) != 32 {
			v.add("elasticsearch.cert_fingerprint", "want a hex SHA-256 fingerprint (64 hex digits, colons allowed), got %q", fp)
		}
	}
	if es.Index == "" {
		v.add("elasticsearch.index", "must not be empty")
	} else if es.Index != strings.ToLower(es.Index) || strings.ContainsAny(es.Index, " \t\n\"\\/<>|?#") {
		v.add("elasticsearch.index", "want an Elasticsearch index or alias name (lower case, no spaces or \\/<>|?#\"), got %q", es.Index)
	}
	v.positive("elasticsearch.request_timeout", es.RequestTimeout)
	v.atLeast("elasticsearch.max_retries", int64(es.MaxRetries), 0)
	v.between("elasticsearch.shards", es.Shards, 1, 1024)
	for i, p := range s.TrustedProxies {
		if _, _, err := net.ParseCIDR(p); err != nil && net.ParseIP(p) == nil {
			v.addAt("server.trusted_proxies", fmt.Sprintf("server.trusted_proxies[%d]", i),
				"want an IP address or CIDR range such as \"10.0.0.0/8\", got %q", p)
		}
	}
	for i, name := range es.AllowedIndices {
		if name == "" || name == "_all" || name != strings.ToLower(name) || strings.ContainsAny(name, " \t\n\"\\/<>|?#*,:") || strings.HasPrefix(name, "-") {
			v.addAt("elasticsearch.allowed_indices", fmt.Sprintf("elasticsearch.allowed_indices[%d]", i),
				"want an exact index or alias name (no pattern, _all, exclusion, comma or remote cluster), got %q", name)
		}
	}
	if w := c.Dropin.RankWindowSize; w < 1 || w > 10000 {
		v.add("dropin.rank_window_size", "must be between 1 and 10000 (Elasticsearch's max_result_window), got %d", w)
	}

	m := c.Model
	v.oneOf("model.provider", m.Provider, "cpu", "cuda")
	v.atLeast("model.intra_op_threads", int64(m.IntraOpThreads), 0)
	v.atLeast("model.inter_op_threads", int64(m.InterOpThreads), 0)
	v.atLeast("model.device_id", int64(m.DeviceID), 0)

	d := c.Decode
	v.between("decode.beam_width", d.BeamWidth, 1, 100)
	v.between("decode.max_candidates", d.MaxCandidates, 1, 100)

	validateExperimental(&v, c.Experimental)

	b := c.Breaker
	v.atLeast("breaker.consecutive_failures", int64(b.ConsecutiveFailures), 1)
	if b.Interval < 0 {
		v.add("breaker.interval", "must not be negative (0 never clears the counts), got %s", b.Interval)
	}
	v.positive("breaker.open_timeout", b.OpenTimeout)
	v.atLeast("breaker.half_open_max_requests", int64(b.HalfOpenMaxRequests), 1)

	v.oneOf("policy.mode", c.Policy.Mode, PolicyGate, PolicyFirstStage, PolicyModel, PolicyFusion)

	q := c.Concurrency
	v.atLeast("concurrency.max_inflight", int64(q.MaxInflight), 0)
	v.atLeast("concurrency.queue_size", int64(q.QueueSize), 0)
	v.positive("concurrency.queue_timeout", q.QueueTimeout)
	if share := time.Duration(float64(s.RequestTimeout) * (1 - s.ESBudgetFraction)); q.QueueTimeout > 0 && s.RequestTimeout > 0 &&
		s.ESBudgetFraction > 0 && s.ESBudgetFraction < 0.5 && q.QueueTimeout >= share {
		v.add("concurrency.queue_timeout", "must be shorter than the budget's working share, server.request_timeout x (1 - server.es_budget_fraction) = %s, got %s",
			share, q.QueueTimeout)
	}

	ab := c.AB
	if !(ab.SplitB >= 0 && ab.SplitB <= 1) {
		v.add("ab.split_b", "must be between 0 and 1, got %v", ab.SplitB)
	}
	v.oneOf("ab.mode", ab.Mode, ABSplit, ABInterleave)
	if !isToken(ab.KeyHeader) {
		v.add("ab.key_header", "want an HTTP header name such as \"X-ICICLE-AB-Key\", got %q", ab.KeyHeader)
	}
	if n := len(ab.Experiment); n < 1 || n > 64 {
		v.add("ab.experiment", "want 1..64 characters, got %q", ab.Experiment)
	}
	v.atLeast("ab.impression_log_max_bytes", ab.ImpressionLogMaxBytes, 0)
	v.atLeast("ab.impression_buffer", int64(ab.ImpressionBuffer), 1)
	// The click log takes clicks only behind the write key (server.write_token, validated with the security keys).
	if ab.ClickLog != "" && s.WriteToken == "" {
		v.add("ab.click_log", "needs server.write_token: POST /v1/click takes clicks only from callers with that bearer token")
	}
	if ab.ClickLog != "" && ab.ClickLog == ab.ImpressionLog {
		v.add("ab.click_log", "must differ from ab.impression_log, got %q for both", ab.ClickLog)
	}

	v.oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	v.oneOf("log.format", c.Log.Format, "text", "json")

	switch mp := c.Metrics.Path; {
	case !strings.HasPrefix(mp, "/") || mp == "/":
		v.add("metrics.path", "want a URL path starting with \"/\", got %q", mp)
	case strings.HasPrefix(mp, "/v1/") || mp == "/healthz" || mp == "/readyz" || mp == "/openapi.yaml" ||
		strings.HasSuffix(strings.TrimSuffix(mp, "/"), "/_search"):
		v.add("metrics.path", "must not be one of the API's paths (/v1/..., /healthz, /readyz, /openapi.yaml, /<index>/_search), got %q", mp)
	}

	cp := c.Compressor
	v.oneOf("compressor.kind", cp.Kind, CompressorExtractive, CompressorLLM)
	if cp.LLMURL != "" || cp.Kind == CompressorLLM {
		if u, err := url.Parse(cp.LLMURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add("compressor.llm_url", "want the http or https base URL of an OpenAI-compatible API such as \"http://127.0.0.1:8000/v1\" (required when compressor.kind is llm), got %q", cp.LLMURL)
		}
	}
	if cp.Kind == CompressorLLM && strings.TrimSpace(cp.LLMModel) == "" {
		v.add("compressor.llm_model", "must be set when compressor.kind is llm")
	}
	v.positive("compressor.timeout", cp.Timeout)
	v.atLeast("compressor.max_retries", int64(cp.MaxRetries), 0)
	v.atLeast("compressor.max_tokens", int64(cp.MaxTokens), 1)
	v.atLeast("compressor.concurrency", int64(cp.Concurrency), 1)

	// Field names: each set, the sidecar's four distinct (adapter.Fields.Validate checks the rest at start).
	fl := c.Fields
	own := map[string]string{}
	for _, f := range []struct{ key, name string }{{"fields.docid", fl.DocID}, {"fields.title", fl.Title},
		{"fields.summary", fl.Summary}, {"fields.seen", fl.Seen}, {"fields.vector", fl.Vector}, {"fields.vector_model", fl.VectorModel}} {
		switch {
		case strings.TrimSpace(f.name) == "":
			v.add(f.key, "must name a field")
		case f.key != "fields.docid" && f.key != "fields.title" && own[f.name] != "":
			v.add(f.key, "%q is already %s: the sidecar's fields must differ", f.name, own[f.name])
		case f.key != "fields.docid" && f.key != "fields.title":
			own[f.name] = f.key
		}
	}
	if len(fl.Search) == 0 {
		v.add("fields.search", "must name at least one field for BM25")
	}
	if len(fl.Body) == 0 {
		v.add("fields.body", "must name at least one field (the text summaries and vectors are made from)")
	}

	fs := c.FirstStage
	v.oneOf("first_stage.method", fs.Method, FusionLinear, FusionRRF, FusionBM25)
	if fs.DenseWeight < 0 || fs.DenseWeight > 1 || math.IsNaN(fs.DenseWeight) {
		v.add("first_stage.dense_weight", "want 0..1, got %v", fs.DenseWeight)
	}
	if fs.DenseWeightSpread < -20 || fs.DenseWeightSpread > 20 || math.IsNaN(fs.DenseWeightSpread) {
		v.add("first_stage.dense_weight_spread", "want -20..20, got %v", fs.DenseWeightSpread)
	}
	if !(fs.RRFK > 0) {
		v.add("first_stage.rrf_k", "want > 0, got %v", fs.RRFK)
	}
	if fs.Depth < 1 || fs.Depth > 10000 {
		v.add("first_stage.depth", "want 1..10000, got %d", fs.Depth)
	}
	if fs.KNN < 0 || fs.KNN > 10000 {
		v.add("first_stage.knn", "want 0..10000, got %d", fs.KNN)
	}
	v.atLeast("first_stage.encoder_threads", int64(fs.EncoderThreads), 0)
	v.oneOf("first_stage.vector_index", fs.VectorIndex, VectorIndexTypes...)

	return errors.Join(v.errs...)
}

// validateExperimental checks the readers' research settings.
func validateExperimental(v *validator, x Experimental) {
	v.atLeast("experimental.max_summary_tokens", int64(x.MaxSummaryTokens), 1)
	v.atLeast("experimental.max_prompt_tokens", int64(x.MaxPromptTokens), 0)
	v.atLeast("experimental.summary_candidates", int64(x.SummaryCandidates), 0)
	v.between("experimental.snippet_chars", x.SnippetChars, 0, 2000)
	if x.SnippetChars > 0 && (x.BlockReading == BlockReadingContiguous || x.BlockReading == BlockReadingShared) {
		v.add("experimental.snippet_chars", "needs experimental.block_reading off (a stored block is a document's, a snippet the query's), got block_reading %q", x.BlockReading)
	}
	v.oneOf("experimental.block_reading", x.BlockReading, BlockReadingOff, BlockReadingContiguous, BlockReadingShared)
	v.atLeast("experimental.block_store_mb", int64(x.BlockStoreMB), 1)
	v.oneOf("experimental.block_precision", x.BlockPrecision, BlockPrecisionFloat32, BlockPrecisionInt8)
	v.oneOf("experimental.scoring", x.Scoring, ScoringTrie, ScoringVocab)
	if !(x.CopyLogPrior >= -20 && x.CopyLogPrior <= 20) {
		v.add("experimental.copy_log_prior", "must be between -20 and 20 (a log-probability shift), got %v", x.CopyLogPrior)
	}
	if !(x.CopyRankPrior >= 0 && x.CopyRankPrior <= 20) {
		v.add("experimental.copy_rank_prior", "must be between 0 and 20 (a weight on ln of the candidate's place), got %v", x.CopyRankPrior)
	}
	v.oneOf("experimental.memory_scope", x.MemoryScope, MemorySeen, MemoryFirstStage)
	if !(x.MemoryRankPrior >= 0 && x.MemoryRankPrior <= 20) {
		v.add("experimental.memory_rank_prior", "must be between 0 and 20 (a weight on ln of the document's place), got %v", x.MemoryRankPrior)
	} else if x.MemoryRankPrior > 0 && x.MemoryScope != MemoryFirstStage {
		v.add("experimental.memory_rank_prior", "needs experimental.memory_scope %q (the places are the first stage's), got memory_scope %q", MemoryFirstStage, x.MemoryScope)
	}
	if !(x.MinCopyProb >= 0 && x.MinCopyProb <= 1) {
		v.add("experimental.min_copy_prob", "must be between 0 and 1, got %v", x.MinCopyProb)
	}
	if math.IsNaN(x.MinTopScore) || x.MinTopScore > 0 {
		v.add("experimental.min_top_score", "must be <= 0 (scores are log-probabilities; -.inf disables it), got %v", x.MinTopScore)
	}
	v.atLeast("experimental.fusion_k", int64(x.FusionK), 0)
}

// validator collects FieldErrors, naming the environment variable of each key that came from one.
type validator struct {
	env  map[string]string
	errs []error
}

func (v *validator) add(key, format string, args ...any) {
	v.addAt(key, key, format, args...)
}

// addAt reports a problem at path (a list item such as "elasticsearch.addresses[1]") of the field key.
func (v *validator) addAt(key, path, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Key: path, Env: v.env[key], Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) positive(key string, d time.Duration) {
	if d <= 0 {
		v.add(key, "must be a positive duration such as \"2s\", got %s", d)
	}
}

func (v *validator) atLeast(key string, n, lo int64) {
	if n < lo {
		v.add(key, "must be at least %d, got %d", lo, n)
	}
}

func (v *validator) between(key string, n, lo, hi int) {
	if n < lo || n > hi {
		v.add(key, "must be between %d and %d, got %d", lo, hi, n)
	}
}

func (v *validator) oneOf(key, s string, allowed ...string) {
	for _, a := range allowed {
		if s == a {
			return
		}
	}
	v.add(key, "must be one of %q, got %q", allowed, s)
}

// isToken reports whether s is a valid HTTP header name (an RFC 9110 token).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", r):
		default:
			return false
		}
	}
	return true
}

// validateSecurity checks the write key, the admin address, TLS and the caller credentials.
func validateSecurity(v *validator, c *Config) {
	s := c.Server
	if t := s.WriteToken; t != "" && (len(t) < 16 || strings.ContainsAny(t, " \t\r\n")) {
		v.add("server.write_token", "want at least 16 characters without spaces (a bearer token), got %d characters", len(t))
	}
	if s.AdminAddr != "" {
		if _, port, err := net.SplitHostPort(s.AdminAddr); err != nil || port == "" {
			v.add("server.admin_addr", "want host:port such as \"127.0.0.1:8081\", got %q", s.AdminAddr)
		} else if s.AdminAddr == s.Addr {
			v.add("server.admin_addr", "must differ from server.addr (%q)", s.Addr)
		}
	}
	switch {
	case (s.TLSCertFile == "") != (s.TLSKeyFile == ""):
		if s.TLSCertFile == "" {
			v.add("server.tls_cert_file", "must be set when server.tls_key_file is set")
		} else {
			v.add("server.tls_key_file", "must be set when server.tls_cert_file is set")
		}
	case s.TLSCertFile != "":
		if _, err := tls.LoadX509KeyPair(s.TLSCertFile, s.TLSKeyFile); err != nil {
			key := "server.tls_cert_file"
			if _, statErr := os.Stat(s.TLSCertFile); statErr == nil {
				if _, statErr := os.Stat(s.TLSKeyFile); statErr != nil {
					key = "server.tls_key_file"
				}
			}
			v.add(key, "cannot load the certificate and key (%q, %q): %v", s.TLSCertFile, s.TLSKeyFile, err)
		}
	}
	switch c.Elasticsearch.CallerCredentials {
	case CallerPassthrough, CallerService:
	default:
		v.add("elasticsearch.caller_credentials", "want %q or %q, got %q", CallerPassthrough, CallerService, c.Elasticsearch.CallerCredentials)
	}
}
