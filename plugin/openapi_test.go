package plugin

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/dropin"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/internal/abtest"
	"github.com/icicle-search/sidecar/internal/gate"
)

func init() {
	// JSONL bodies of /v1/ingest: one JSON value per non-blank line, validated as the array the spec declares.
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", func(r io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		var out []any
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			var v any
			if err := json.Unmarshal(line, &v); err != nil {
				return nil, fmt.Errorf("line %q: %w", line, err)
			}
			out = append(out, v)
		}
		return out, sc.Err()
	})
}

// loadSpec parses and validates plugin/openapi.yaml (the embedded copy the server serves).
func loadSpec(t *testing.T) (*openapi3.T, routers.Router) {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openAPISpec)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context), "openapi.yaml is not a valid OpenAPI document")
	router, err := legacy.NewRouter(doc)
	require.NoError(t, err)
	return doc, router
}

func TestOpenAPISpecIsValid(t *testing.T) {
	doc, _ := loadSpec(t)
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			require.NotEmpty(t, op.OperationID, "%s %s", method, path)
			for code, resp := range op.Responses.Map() {
				require.NotEmpty(t, *resp.Value.Description, "%s %s %s", method, path, code)
			}
		}
	}
	s := fullServer(t)
	code, _, hdr := do(t, s, "GET", "/openapi.yaml", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "application/yaml", hdr.Get("Content-Type"))
	require.Equal(t, openAPISpec, OpenAPISpec())
}

// fullServer is a server with every optional route on (ingestion, the admin endpoint), so that the route
// test sees all of them. A new option that adds a route belongs here.
func fullServer(t *testing.T) *Server {
	t.Helper()
	sw := NewSwapper(LoadedModel{Reader: icicle(&fakeReranker{rank: copyBeta}), Info: ModelInfo{Name: "fake", SeenDocIDs: 200}},
		func(dir string) (LoadedModel, error) {
			switch dir {
			case "models/broken":
				return LoadedModel{}, errors.New("manifest.json: no such file")
			case "models/panic":
				panic("loader exploded")
			}
			return LoadedModel{Reader: icicle(&fakeReranker{rank: copyBeta}), Info: ModelInfo{Name: "next", Dir: dir}}, nil
		}, nil)
	es := &fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return threeHits(), nil }}
	var opts testOptions // newTestServer's, which takes a *fakeReranker; the admin route needs the Swapper at New
	newTestServer(t, es, &fakeReranker{}, func(o *testOptions) {
		o.Ingester, o.AdminToken = &fakeIngester{}, "secret"
		o.Clicks, o.WriteToken = testClickLog(t, false), "secret" // POST /v1/click
		opts = *o
	})
	return newServer(es, sw, opts)
}

var ginParam = regexp.MustCompile(`[:*]([A-Za-z0-9_]+)`)

// TestOpenAPIRoutesCovered: every route registered on the gin engine is in the spec, and every operation
// in the spec is registered. An endpoint added without its spec entry fails here.
func TestOpenAPIRoutesCovered(t *testing.T) {
	doc, _ := loadSpec(t)
	registered := make(map[string]bool)
	for _, r := range fullServer(t).router.Routes() {
		path := ginParam.ReplaceAllString(r.Path, "{$1}")
		key := r.Method + " " + path
		registered[key] = true
		item := doc.Paths.Value(path)
		require.NotNil(t, item, "route %s is not in openapi.yaml", key)
		require.NotNil(t, item.GetOperation(r.Method), "route %s is not in openapi.yaml", key)
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			require.True(t, registered[method+" "+path], "openapi.yaml has %s %s, which the server does not serve", method, path)
		}
	}
}

// contractCase is one request to the real handlers, whose request and response must both agree with the
// spec (the request may be meant to disagree: reqInvalid).
type contractCase struct {
	name         string
	method, path string
	body         string
	contentType  string            // default application/json when there is a body
	header       map[string]string // more request headers
	// server builds the server under test; cancel cancels the request's context (for 499). Nil: std.
	server     func(t *testing.T, cancel context.CancelFunc) *Server
	status     int
	reqInvalid bool   // the spec rejects the request too (bad input the schema can express)
	mode       string // the 200 body's mode (icicle.mode for the drop-in)
	reason     string // fallback_reason, or icicle.reason
	// has lists paths the body must hold ("ab", "results.0.team"), so that the optional parts of a schema
	// the case is about are validated rather than absent.
	has []string
}

// std is a server whose Elasticsearch returns threeHits and whose model copies Beta and recalls "Seen Doc".
func std(mod func(*testOptions)) func(*testing.T, context.CancelFunc) *Server {
	return func(t *testing.T, _ context.CancelFunc) *Server {
		return withModel(&fakeReranker{rank: copyBeta}, mod)(t, nil)
	}
}

func withModel(m *fakeReranker, mod func(*testOptions)) func(*testing.T, context.CancelFunc) *Server {
	return withES(&fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return threeHits(), nil }}, m, mod)
}

func withES(es *fakeSearcher, m *fakeReranker, mod func(*testOptions)) func(*testing.T, context.CancelFunc) *Server {
	return func(t *testing.T, _ context.CancelFunc) *Server {
		return newTestServer(t, es, m, func(o *testOptions) {
			o.Ingester, o.MaxBodyBytes = &fakeIngester{}, 4096
			if mod != nil {
				mod(o)
			}
		})
	}
}

func withIngester(ing Ingester) func(*testing.T, context.CancelFunc) *Server {
	return withES(&fakeSearcher{}, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.Ingester = ing })
}

// withSeenDiff is a server whose model knows its seen corpus, returned once the background seen-corpus
// diff has landed, so that /readyz shows seen_diff.
func withSeenDiff(t *testing.T, _ context.CancelFunc) *Server {
	es := &fakeSearcher{seen: 3, seenDiff: func(context.Context, []string) (adapter.SeenDiff, error) {
		return adapter.SeenDiff{IndexSeen: 3, ModelSeen: 3, MissingInIndex: []string{"Gamma"}, MissingInIndexCount: 1,
			NotInModel: []string{"Zeta"}, NotInModelCount: 1}, nil
	}}
	s := withES(es, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.Model.SeenDocIDs = 3 })(t, nil)
	s.models = NewSwapper(LoadedModel{Reader: icicle(&fakeReranker{rank: copyBeta}), Info: s.opts.Model,
		Seen: []string{"Alpha", "Beta", "Gamma"}}, nil, nil)
	s.refreshSeenDiff()
	require.Eventually(t, func() bool { _, d := s.seenDiffBody(s.modelInfo()); return d != nil }, 5*time.Second, 5*time.Millisecond)
	return s
}

// testClickLog is a click log in a temporary directory, closed when the test ends, or at once when closed
// is true, so that it takes no click.
func testClickLog(t *testing.T, closed bool) *abtest.ClickLog {
	t.Helper()
	l, err := abtest.OpenClickLog(filepath.Join(t.TempDir(), "clicks.jsonl"), abtest.LogOptions{})
	require.NoError(t, err)
	if closed {
		require.NoError(t, l.Close())
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// withClicks is a server serving POST /v1/click with the write token "secret", into a click log that is
// closed when closed is true.
func withClicks(closed bool) func(*testing.T, context.CancelFunc) *Server {
	return func(t *testing.T, _ context.CancelFunc) *Server {
		return std(func(o *testOptions) { o.Clicks, o.WriteToken = testClickLog(t, closed), "secret" })(t, nil)
	}
}

// withImpressions is a server logging impressions, so that /v1/search answers carry an impression id.
func withImpressions(t *testing.T, _ context.CancelFunc) *Server {
	l, err := abtest.OpenImpressionLog(filepath.Join(t.TempDir(), "impressions.jsonl"), abtest.LogOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return std(func(o *testOptions) { o.Impressions = l })(t, nil)
}

// withAB is a server running the A/B experiment on /v1/search with ab applied to its options.
func withAB(ab ABOptions) func(*testing.T, context.CancelFunc) *Server {
	hits := func(context.Context, string, int) ([]adapter.Hit, error) { return threeHits(), nil }
	return withES(&fakeSearcher{searchNew: hits, searchAll: hits}, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.AB = ab })
}

// lookup follows a dotted path ("results.0.team") through decoded JSON.
func lookup(v any, path string) (any, bool) {
	for _, k := range strings.Split(path, ".") {
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[k]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func rawES(status int, body string) *fakeSearcher {
	return &fakeSearcher{rawSearch: func(context.Context, string, url.Values, []byte) (int, http.Header, []byte, error) {
		return status, http.Header{"X-Elastic-Product": {"Elasticsearch"}, "Content-Type": {"application/json"}}, []byte(body), nil
	}}
}

func rawESErr(err error) *fakeSearcher {
	return &fakeSearcher{rawSearch: func(context.Context, string, url.Values, []byte) (int, http.Header, []byte, error) {
		return 0, nil, nil, err
	}}
}

func modelErr(err error) *fakeReranker {
	return &fakeReranker{rank: func(context.Context, string, []inference.Candidate) (inference.Result, error) {
		return inference.Result{}, err
	}}
}

func contractCases() []contractCase {
	hits := rerankBody(threeHits(), "who sang")
	big := strings.Repeat("x", 5000)
	match := `{"query":{"match":{"title":"who sang"}}}`
	lines := lineAlpha + "\n" + lineBeta + "\n"
	esDown := fmt.Errorf("connection refused: %w", adapter.ErrUnavailable)
	esSlow := fmt.Errorf("%w: no answer: %w", adapter.ErrUnavailable, context.DeadlineExceeded)
	cancelling := func(t *testing.T, cancel context.CancelFunc) *Server {
		m := &fakeReranker{rank: func(ctx context.Context, _ string, _ []inference.Candidate) (inference.Result, error) {
			cancel()
			return inference.Result{}, ctx.Err()
		}}
		return withModel(m, nil)(t, nil)
	}
	panicking := &fakeReranker{rank: func(context.Context, string, []inference.Candidate) (inference.Result, error) { panic("boom") }}
	admin := func(t *testing.T, _ context.CancelFunc) *Server { return fullServer(t) }
	bearer := map[string]string{"Authorization": "Bearer secret"}
	writer := map[string]string{"Authorization": "Bearer " + testWriteToken}
	esDenied := &adapter.ResponseError{Status: 401, Type: "security_exception", Reason: "missing authentication credentials",
		Authenticate: []string{`Basic realm="security"`}}
	esForbidden := &adapter.ResponseError{Status: 403, Type: "security_exception", Reason: "action [indices:data/read/search] is unauthorized"}
	return []contractCase{
		// POST /v1/rerank
		{name: "rerank reranked", method: "POST", path: "/v1/rerank", body: hits, status: 200, mode: "reranked"},
		{name: "rerank fused", method: "POST", path: "/v1/rerank", body: hits, server: std(func(o *testOptions) { o.Policy = "fusion" }), status: 200, mode: "fused"},
		{name: "rerank bm25 policy", method: "POST", path: "/v1/rerank", body: hits, server: std(func(o *testOptions) { o.Policy = "first_stage" }), status: 200, mode: "first_stage"},
		{name: "rerank policy not allowed", method: "POST", path: "/v1/rerank", body: `{"query":"q","policy":"model"}`,
			server: std(func(o *testOptions) { o.Policy, o.AllowPolicyOverride = "gate", false }), status: 403},
		{name: "rerank without a model", method: "POST", path: "/v1/rerank", body: hits, server: withModel(nil, nil), status: 200, mode: "first_stage"},
		{name: "search without a model", method: "POST", path: "/v1/search", body: `{"query":"q"}`, server: withModel(nil, nil), status: 200, mode: "first_stage",
			has: []string{"model_skipped"}},
		{name: "rerank model error", method: "POST", path: "/v1/rerank", body: hits, server: withModel(modelErr(errors.New("onnx")), nil), status: 200, mode: "first_stage_fallback", reason: "model_error"},
		{name: "rerank model timeout", method: "POST", path: "/v1/rerank", body: hits, server: withModel(modelErr(context.DeadlineExceeded), nil), status: 200, mode: "first_stage_fallback", reason: "model_timeout"},
		{name: "rerank context full", method: "POST", path: "/v1/rerank", body: hits, server: withModel(modelErr(inference.ErrContextFull), nil), status: 200, mode: "first_stage_fallback", reason: "context_full"},
		{name: "rerank nothing to rank", method: "POST", path: "/v1/rerank", body: hits, server: withModel(modelErr(inference.ErrEmptyAllowedSet), nil), status: 200, mode: "first_stage_fallback", reason: "nothing_to_rank"},
		{name: "rerank low confidence", method: "POST", path: "/v1/rerank", body: hits, server: std(func(o *testOptions) { o.MinTopScore = 0 }), status: 200, mode: "first_stage_fallback", reason: "low_confidence"},
		{name: "rerank unresolved parametric", method: "POST", path: "/v1/rerank", body: hits, status: 200, mode: "reranked",
			server: withES(&fakeSearcher{resolve: func(context.Context, []string) (map[string]adapter.Hit, error) { return nil, nil }}, &fakeReranker{rank: copyBeta}, nil)},
		{name: "rerank missing query", method: "POST", path: "/v1/rerank", body: `{"hits":[]}`, status: 400, reqInvalid: true},
		{name: "rerank hit without title", method: "POST", path: "/v1/rerank", body: `{"query":"q","hits":[{"_id":"1","_source":{"summary":"s"}}]}`, status: 400, reqInvalid: true},
		{name: "rerank size out of range", method: "POST", path: "/v1/rerank", body: `{"query":"q","size":500}`, status: 400, reqInvalid: true},
		{name: "rerank invalid JSON", method: "POST", path: "/v1/rerank", body: `{"query":`, status: 400, reqInvalid: true},
		{name: "rerank query over the server's limit", method: "POST", path: "/v1/rerank", body: `{"query":"` + strings.Repeat("q", 101) + `"}`, status: 400},
		{name: "rerank too large", method: "POST", path: "/v1/rerank", body: `{"query":"` + big + `"}`, status: 413},
		{name: "rerank client gone", method: "POST", path: "/v1/rerank", body: hits, server: cancelling, status: 499},
		{name: "rerank panic", method: "POST", path: "/v1/rerank", body: hits, server: withModel(panicking, nil), status: 500},

		// POST /v1/search
		{name: "search reranked", method: "POST", path: "/v1/search", body: `{"query":"q","size":5}`, status: 200, mode: "reranked"},
		{name: "search model error", method: "POST", path: "/v1/search", body: `{"query":"q"}`, server: withModel(modelErr(errors.New("onnx")), nil), status: 200, mode: "first_stage_fallback", reason: "model_error"},
		{name: "search gated keep", method: "POST", path: "/v1/search", body: `{"query":"q"}`, server: std(func(o *testOptions) { o.Policy, o.Gate = "gate", fixedGate(-3, 0.5) }),
			status: 200, mode: "gated", has: []string{"gate.decision", "gate.features.p_copy", "gate.first_stage_top", "gate.model_top"}},
		{name: "search gated idle", method: "POST", path: "/v1/search", body: `{"query":"q"}`, server: std(func(o *testOptions) { o.Policy = "gate" }),
			status: 200, mode: "gated", has: []string{"gate.decision", "gate.reason", "gate.never", "gate.first_stage_top"}},
		{name: "search gated promote", method: "POST", path: "/v1/search", body: `{"query":"q"}`,
			server: std(func(o *testOptions) { o.Policy, o.Gate = "gate", fixedGate(3, 0.5) }), status: 200, mode: "gated", has: []string{"gate.decision"}},
		{name: "rerank gated", method: "POST", path: "/v1/rerank", body: hits, server: std(func(o *testOptions) { o.Policy, o.Gate = "gate", fixedGate(-3, 0.5) }), status: 200, mode: "gated", has: []string{"gate.model_top"}},
		{name: "search context unavailable", method: "POST", path: "/v1/search", body: `{"query":"q"}`, status: 200, mode: "first_stage_fallback", reason: "context_unavailable",
			server: withES(&fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return nil, errors.New("shard down") },
				searchAll: func(context.Context, string, int) ([]adapter.Hit, error) { return threeHits(), nil }}, &fakeReranker{rank: copyBeta}, nil)},
		{name: "search missing query", method: "POST", path: "/v1/search", body: `{"size":1}`, status: 400, reqInvalid: true},
		{name: "search too large", method: "POST", path: "/v1/search", body: `{"query":"` + big + `"}`, status: 413},
		{name: "search client gone", method: "POST", path: "/v1/search", body: `{"query":"q"}`, status: 499,
			server: func(t *testing.T, cancel context.CancelFunc) *Server {
				return withES(&fakeSearcher{searchNew: func(ctx context.Context, _ string, _ int) ([]adapter.Hit, error) {
					cancel()
					return nil, ctx.Err()
				}}, &fakeReranker{rank: copyBeta}, nil)(t, nil)
			}},
		{name: "search Elasticsearch down", method: "POST", path: "/v1/search", body: `{"query":"q"}`, status: 503,
			server: withES(&fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return nil, esDown }}, &fakeReranker{rank: copyBeta}, nil)},
		{name: "search Elasticsearch slow", method: "POST", path: "/v1/search", body: `{"query":"q"}`, status: 504,
			server: withES(&fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return nil, esSlow }}, &fakeReranker{rank: copyBeta}, nil)},
		{name: "search A/B arm A", method: "POST", path: "/v1/search", body: `{"query":"q"}`, status: 200, mode: "bm25",
			server: withAB(ABOptions{Enabled: true, SplitB: 0}), has: []string{"ab.arm"}},
		{name: "search A/B arm B", method: "POST", path: "/v1/search", body: `{"query":"q"}`, header: map[string]string{"X-ICICLE-AB-Key": "user-1"},
			status: 200, mode: "reranked", server: withAB(ABOptions{Enabled: true, SplitB: 1}), has: []string{"ab.arm"}},
		{name: "search A/B interleaved", method: "POST", path: "/v1/search", body: `{"query":"q"}`, status: 200, mode: "reranked",
			server: withAB(ABOptions{Enabled: true, Mode: abtest.ModeInterleave}), has: []string{"ab.arm", "results.0.team"}},
		{name: "search panic", method: "POST", path: "/v1/search", body: `{"query":"q"}`, status: 500,
			server: withES(&fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { panic("boom") }}, &fakeReranker{rank: copyBeta}, nil)},

		// Security (auth.go)
		{name: "search Elasticsearch refuses the caller", method: "POST", path: "/v1/search", body: `{"query":"q"}`, status: 401,
			server: withES(&fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return nil, esDenied }}, &fakeReranker{rank: copyBeta}, nil)},
		{name: "search Elasticsearch forbids the caller", method: "POST", path: "/v1/search", body: `{"query":"q"}`, status: 403,
			header: map[string]string{"Authorization": "ApiKey a2V5"},
			server: withES(&fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return nil, esForbidden }}, &fakeReranker{rank: copyBeta}, nil)},
		{name: "rerank with an unknown auth scheme", method: "POST", path: "/v1/rerank", body: hits, status: 401,
			header: map[string]string{"Authorization": "Digest username=x"}},
		{name: "ingest without the write token", method: "POST", path: "/v1/ingest", body: lines, contentType: "application/x-ndjson", status: 401, reqInvalid: true},
		{name: "ingest with a wrong write token", method: "POST", path: "/v1/ingest", body: lines, contentType: "application/x-ndjson", status: 401,
			header: map[string]string{"Authorization": "Bearer not-the-write-token"}},
		{name: "ingest off without a write token", header: writer, method: "POST", path: "/v1/ingest", body: lines, contentType: "application/x-ndjson", status: 404,
			server: std(func(o *testOptions) { o.WriteToken = "" })},

		// POST /v1/ingest
		{name: "ingest jsonl", header: writer, method: "POST", path: "/v1/ingest?refresh=true", body: lines, contentType: "application/x-ndjson", status: 200},
		{name: "ingest json array", header: writer, method: "POST", path: "/v1/ingest", body: "[" + lineAlpha + "," + lineBeta + "]", status: 200},
		{name: "ingest document refused", header: writer, method: "POST", path: "/v1/ingest", body: lines, contentType: "application/x-ndjson", status: 207,
			server: withIngester(&fakeIngester{ingest: func(_ context.Context, docs []adapter.Doc) (adapter.IngestReport, error) {
				return adapter.IngestReport{Indexed: 1, Failed: []adapter.Failure{{DocID: docs[1].DocID, Reason: "document_parsing_exception: bad"}}}, nil
			}})},
		{name: "ingest record rejected", header: writer, method: "POST", path: "/v1/ingest", body: lines + `{"docid":"NoText","title":"t"}`, contentType: "application/x-ndjson", status: 207, reqInvalid: true},
		{name: "ingest bad refresh", header: writer, method: "POST", path: "/v1/ingest?refresh=soon", body: lines, contentType: "application/x-ndjson", status: 400, reqInvalid: true},
		{name: "ingest empty", header: writer, method: "POST", path: "/v1/ingest", body: "\n", contentType: "application/x-ndjson", status: 400, reqInvalid: true},
		{name: "ingest disabled", header: writer, method: "POST", path: "/v1/ingest", body: lines, contentType: "application/x-ndjson", status: 404, server: withIngester(nil)},
		{name: "ingest too large", header: writer, method: "POST", path: "/v1/ingest", body: `{"docid":"a","title":"a","text":"` + big + `"}`, contentType: "application/x-ndjson", status: 413},
		{name: "ingest client gone", header: writer, method: "POST", path: "/v1/ingest", body: lines, contentType: "application/x-ndjson", status: 499,
			server: func(t *testing.T, cancel context.CancelFunc) *Server {
				return withIngester(&fakeIngester{ingest: func(ctx context.Context, _ []adapter.Doc) (adapter.IngestReport, error) {
					cancel()
					return adapter.IngestReport{}, ctx.Err()
				}})(t, nil)
			}},
		{name: "ingest index misconfigured", header: writer, method: "POST", path: "/v1/ingest", body: lines, contentType: "application/x-ndjson", status: 500,
			server: withIngester(&fakeIngester{ingest: func(context.Context, []adapter.Doc) (adapter.IngestReport, error) {
				return adapter.IngestReport{}, adapter.ErrMappingMismatch
			}})},
		{name: "ingest Elasticsearch down", header: writer, method: "POST", path: "/v1/ingest", body: lines, contentType: "application/x-ndjson", status: 503,
			server: withIngester(&fakeIngester{ingest: func(_ context.Context, docs []adapter.Doc) (adapter.IngestReport, error) {
				return adapter.IngestReport{Indexed: 1, Failed: []adapter.Failure{{DocID: docs[1].DocID, Reason: "EOF", Retryable: true}}}, esDown
			}})},

		{name: "ingest summary compressor down", header: writer, method: "POST", path: "/v1/ingest", body: lines + `{"docid":"Delta","title":"Delta","text":"d"}`,
			contentType: "application/x-ndjson", status: 503, server: withES(&fakeSearcher{}, &fakeReranker{rank: copyBeta}, func(o *testOptions) {
				o.Compressor = &fakeCompressor{compress: func(context.Context, string, string) (string, error) {
					return "", errors.New("connection refused")
				}}
			})},

		// POST /v1/admin/model
		{name: "admin swap", method: "POST", path: "/v1/admin/model", body: `{"dir":"models/next"}`, header: bearer, server: admin, status: 200},
		{name: "admin directory does not load", method: "POST", path: "/v1/admin/model", body: `{"dir":"models/broken"}`, header: bearer, server: admin, status: 400},
		{name: "admin missing dir", method: "POST", path: "/v1/admin/model", body: `{}`, header: bearer, server: admin, status: 400, reqInvalid: true},
		{name: "admin without token", method: "POST", path: "/v1/admin/model", body: `{"dir":"models/next"}`, server: admin, status: 401, reqInvalid: true},
		{name: "admin too large", method: "POST", path: "/v1/admin/model", body: `{"dir":"` + strings.Repeat("x", 2<<20) + `"}`, header: bearer, server: admin, status: 413},
		{name: "admin loader panics", method: "POST", path: "/v1/admin/model", body: `{"dir":"models/panic"}`, header: bearer, server: admin, status: 500},

		// POST /v1/click
		{name: "click", method: "POST", path: "/v1/click", body: `{"impression_id":"` + strings.Repeat("0a", 16) + `","docid":"Beta","position":2}`,
			header: bearer, server: withClicks(false), status: 202},
		{name: "click by request id", method: "POST", path: "/v1/click", body: `{"request_id":"r-1","docid":"Beta","position":2}`,
			header: bearer, server: withClicks(false), status: 202},
		{name: "click missing docid", method: "POST", path: "/v1/click", body: `{"request_id":"r-1","position":2}`,
			header: bearer, server: withClicks(false), status: 400, reqInvalid: true},
		{name: "click position 0", method: "POST", path: "/v1/click", body: `{"request_id":"r-1","docid":"Beta","position":0}`,
			header: bearer, server: withClicks(false), status: 400, reqInvalid: true},
		{name: "click without token", method: "POST", path: "/v1/click", body: `{"request_id":"r-1","docid":"Beta","position":2}`,
			server: withClicks(false), status: 401, reqInvalid: true},
		{name: "click too large", method: "POST", path: "/v1/click", body: `{"request_id":"r-1","docid":"Beta","position":2,"note":"` + big + `"}`,
			header: bearer, server: withClicks(false), status: 413},
		{name: "click not logged", method: "POST", path: "/v1/click", body: `{"request_id":"r-1","docid":"Beta","position":2}`,
			header: bearer, server: withClicks(true), status: 503},
		{name: "search with an impression id", method: "POST", path: "/v1/search", body: `{"query":"q"}`, server: withImpressions,
			status: 200, mode: "reranked", has: []string{"impression_id"}},

		// GET endpoints
		{name: "model", method: "GET", path: "/v1/model", status: 200},
		{name: "model with its gate", method: "GET", path: "/v1/model", status: 200, has: []string{"gate.source", "gate.fit.n"},
			server: std(func(o *testOptions) {
				o.Model.Gate = NewGateInfo(&gate.Gate{Source: "m/gate.json", Threshold: 0.7, Fit: &gate.FitInfo{N: 10}})
			})},
		{name: "model reading by blocks", method: "GET", path: "/v1/model", status: 200, has: []string{"blocks.layout", "blocks.max_bytes"},
			server: std(func(o *testOptions) {
				o.Model.BlockStore, o.Model.BlockLayout = inference.NewBlockStore(1<<20, false), "shared"
			})},
		{name: "readyz reading by blocks", method: "GET", path: "/readyz", status: 200, has: []string{"blocks.layout", "blocks.misses"},
			server: std(func(o *testOptions) {
				o.Model.BlockStore, o.Model.BlockLayout = inference.NewBlockStore(1<<20, false), "contiguous"
			})},
		{name: "readyz with a block fill", method: "GET", path: "/readyz", status: 200, has: []string{"blocks.precision", "blocks.fill.state", "blocks.fill.error"},
			server: std(func(o *testOptions) {
				store := inference.NewBlockStore(1<<20, true)
				store.SetFill(inference.BlockFill{State: "failed", Documents: 512, Computed: 300, Seconds: 12.5, Error: "list new: unavailable"})
				o.Model.BlockStore, o.Model.BlockLayout = store, "shared"
			})},
		{name: "healthz", method: "GET", path: "/healthz", status: 200},
		{name: "readyz", method: "GET", path: "/readyz", status: 200},
		{name: "readyz with a seen diff", method: "GET", path: "/readyz", status: 200, server: withSeenDiff,
			has: []string{"seen_consistent", "seen_diff.missing_in_index_examples.0"}},
		{name: "readyz Elasticsearch down", method: "GET", path: "/readyz", status: 503, server: withES(&fakeSearcher{checkErr: esDown}, &fakeReranker{}, nil)},
		{name: "metrics", method: "GET", path: "/metrics", status: 200},
		{name: "openapi", method: "GET", path: "/openapi.yaml", status: 200},

		// /{index}/_search, the drop-in
		{name: "dropin reranked", method: "POST", path: "/icicle-docs/_search", body: match, status: 200, mode: "reranked"},
		{name: "dropin ext query", method: "POST", path: "/icicle-docs/_search", body: `{"query":{"match_all":{}},"ext":{"icicle":{"query":"who sang"}}}`, status: 200, mode: "reranked"},
		{name: "dropin fused", method: "POST", path: "/icicle-docs/_search", body: match, server: std(func(o *testOptions) { o.Policy = "fusion" }), status: 200, mode: "fused"},
		{name: "dropin gated", method: "POST", path: "/icicle-docs/_search", body: match, server: std(func(o *testOptions) { o.Policy, o.Gate = "gate", fixedGate(3, 0.5) }), status: 200, mode: "gated"},
		{name: "dropin bm25 policy", method: "POST", path: "/icicle-docs/_search", body: match, server: std(func(o *testOptions) { o.Policy = "first_stage" }), status: 200, mode: "first_stage"},
		{name: "dropin model error", method: "POST", path: "/icicle-docs/_search", body: match, server: withModel(modelErr(errors.New("onnx")), nil), status: 200, mode: "first_stage_fallback", reason: "model_error"},
		{name: "dropin unresolved parametric", method: "POST", path: "/icicle-docs/_search", body: match, status: 200, mode: "reranked",
			server: withES(&fakeSearcher{resolve: func(context.Context, []string) (map[string]adapter.Hit, error) { return nil, nil }}, &fakeReranker{rank: copyBeta}, nil)},
		{name: "dropin GET passthrough", method: "GET", path: "/icicle-docs/_search?q=title:alpha", status: 200, mode: "passthrough", reason: dropin.ReasonNoQueryText},
		{name: "dropin aggregations only", method: "POST", path: "/icicle-docs/_search", body: `{"size":0,"aggs":{"s":{"terms":{"field":"seen"}}}}`, status: 200, mode: "passthrough", reason: dropin.ReasonAggregationsOnly,
			server: withES(rawES(200, `{"took":1,"hits":{"total":{"value":3,"relation":"eq"},"max_score":null,"hits":[]},"aggregations":{"s":{"buckets":[]}}}`), &fakeReranker{rank: copyBeta}, nil)},
		{name: "dropin scroll", method: "POST", path: "/icicle-docs/_search?scroll=1m", body: match, status: 200, mode: "passthrough", reason: dropin.ReasonScroll},
		{name: "dropin bad ext", method: "POST", path: "/icicle-docs/_search", body: `{"ext":{"icicle":{"query":1}}}`, status: 400, reqInvalid: true},
		{name: "dropin Elasticsearch 400", method: "POST", path: "/icicle-docs/_search", body: `{"query":{"matc":{}}}`, server: withES(rawES(400, esBadQuery), &fakeReranker{}, nil), status: 400},
		{name: "dropin index outside the allow-list", method: "POST", path: "/nope/_search", body: match, status: 403},
		{name: "dropin script", method: "POST", path: "/icicle-docs/_search", body: `{"query":{"match":{"title":"q"}},"script_fields":{"x":{"script":"1"}}}`, status: 403},
		{name: "dropin index not found", method: "POST", path: "/my-alias/_search", body: match, status: 404,
			server: withES(rawES(404, `{"error":{"type":"index_not_found_exception","reason":"no such index [nope]"},"status":404}`), &fakeReranker{}, nil)},
		{name: "dropin Elasticsearch 429", method: "POST", path: "/icicle-docs/_search", body: match, status: 429,
			server: withES(rawES(429, `{"error":{"type":"es_rejected_execution_exception","reason":"rejected"},"status":429}`), &fakeReranker{}, nil)},
		{name: "dropin too large", method: "POST", path: "/icicle-docs/_search", body: `{"query":{"match":{"title":"` + big + `"}}}`, status: 413},
		{name: "dropin client gone", method: "POST", path: "/icicle-docs/_search", body: match, server: cancelling, status: 499},
		{name: "dropin panic", method: "POST", path: "/icicle-docs/_search", body: match, server: withModel(panicking, nil), status: 500},
		{name: "dropin Elasticsearch 500", method: "POST", path: "/icicle-docs/_search", body: match, status: 500,
			server: withES(rawES(500, `{"error":{"type":"search_phase_execution_exception","reason":"all shards failed"},"status":500}`), &fakeReranker{}, nil)},
		{name: "dropin Elasticsearch down", method: "POST", path: "/icicle-docs/_search", body: match, server: withES(rawESErr(esDown), &fakeReranker{}, nil), status: 503},
		{name: "dropin Elasticsearch slow", method: "POST", path: "/icicle-docs/_search", body: match, server: withES(rawESErr(esSlow), &fakeReranker{}, nil), status: 504},
	}
}

// TestOpenAPIContract drives the real handlers through every endpoint and documented status and validates
// each request and response against openapi.yaml: a field or status a handler returns and the spec does
// not allow fails here.
func TestOpenAPIContract(t *testing.T) {
	_, router := loadSpec(t)
	covered := make(map[string]bool)
	for _, tc := range contractCases() {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			build := tc.server
			if build == nil {
				build = std(nil)
			}
			s := build(t, cancel)
			newReq := func() *http.Request {
				req := httptest.NewRequestWithContext(ctx, tc.method, tc.path, strings.NewReader(tc.body))
				if tc.body != "" {
					req.Header.Set("Content-Type", cmp.Or(tc.contentType, "application/json"))
				}
				for k, v := range tc.header {
					req.Header.Set(k, v)
				}
				return req
			}

			route, params, err := router.FindRoute(newReq())
			require.NoError(t, err, "no spec operation for %s %s", tc.method, tc.path)
			in := &openapi3filter.RequestValidationInput{Request: newReq(), PathParams: params, Route: route,
				Options: &openapi3filter.Options{AuthenticationFunc: bearerPresent}}
			reqErr := openapi3filter.ValidateRequest(ctx, in)
			if tc.reqInvalid {
				require.Error(t, reqErr, "the spec accepts a request the handler rejects with %d", tc.status)
			} else {
				require.NoError(t, reqErr, "the spec rejects the request")
			}

			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, newReq())
			require.Equal(t, tc.status, rec.Code, rec.Body.String())
			covered[route.Operation.OperationID+" "+fmt.Sprint(rec.Code)] = true

			err = openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
				RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
				Body:    io.NopCloser(bytes.NewReader(rec.Body.Bytes())),
				Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
			})
			require.NoError(t, err, "response disagrees with openapi.yaml:\n%s", rec.Body.String())

			if rec.Code == http.StatusServiceUnavailable && route.Operation.OperationID != "readyz" {
				require.NotEmpty(t, rec.Header().Get("Retry-After"), "a 503 of the sidecar's own says when to retry")
			}
			if len(tc.has) > 0 {
				var body any
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
				for _, path := range tc.has {
					_, ok := lookup(body, path)
					require.True(t, ok, "the body has no %s: %s", path, rec.Body.String())
				}
			}
			if tc.mode != "" {
				var body map[string]any
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
				if ic, ok := body["icicle"].(map[string]any); ok {
					body = map[string]any{"mode": ic["mode"], "fallback_reason": ic["reason"]}
				}
				require.Equal(t, tc.mode, body["mode"])
				reason, _ := body["fallback_reason"].(string)
				require.Equal(t, tc.reason, reason)
			}
		})
	}
	// Every status the spec documents for an operation is exercised above (ranges excepted).
	doc, _ := loadSpec(t)
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for code := range op.Responses.Map() {
				if strings.HasSuffix(code, "XX") || code == "default" {
					continue
				}
				require.True(t, covered[op.OperationID+" "+code] || method == "GET" && strings.HasPrefix(op.OperationID, "dropin"),
					"%s %s: status %s is documented but no contract case returns it", method, path, code)
			}
		}
	}
}

// bearerPresent checks the admin security scheme as far as the spec can: a bearer token is sent.
func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if !strings.HasPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ") {
		return errors.New("no bearer token")
	}
	return nil
}

// TestOpenAPIContractCatchesDrift shows the validation is strict: a field the spec does not know, a mode
// outside its enum and an undocumented status all fail.
func TestOpenAPIContractCatchesDrift(t *testing.T) {
	_, router := loadSpec(t)
	s := withModel(&fakeReranker{rank: copyBeta}, nil)(t, nil)
	for _, tc := range []struct{ name, method, path, body string }{
		{"rerank", "POST", "/v1/rerank", rerankBody(threeHits(), "q")},
		{"dropin", "POST", "/icicle-docs/_search", `{"query":{"match":{"title":"q"}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequestWithContext(t.Context(), tc.method, tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			require.Equal(t, http.StatusOK, rec.Code)
			route, params, err := router.FindRoute(req)
			require.NoError(t, err)
			validate := func(status int, body []byte) error {
				return openapi3filter.ValidateResponse(t.Context(), &openapi3filter.ResponseValidationInput{
					RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
					Status:                 status, Header: rec.Header(), Body: io.NopCloser(bytes.NewReader(body)),
					Options: &openapi3filter.Options{IncludeResponseStatus: true},
				})
			}
			require.NoError(t, validate(rec.Code, rec.Body.Bytes()))
			var body map[string]any
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			edit := func(f func(m map[string]any)) []byte {
				var m map[string]any
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &m))
				f(m)
				b, err := json.Marshal(m)
				require.NoError(t, err)
				return b
			}
			top := func(m map[string]any) map[string]any { // the sidecar's own object: the body, or icicle
				if ic, ok := m["icicle"].(map[string]any); ok {
					return ic
				}
				return m
			}
			require.Error(t, validate(rec.Code, edit(func(m map[string]any) { top(m)["surprise"] = 1 })), "unknown field")
			require.Error(t, validate(rec.Code, edit(func(m map[string]any) { top(m)["mode"] = "psychic" })), "mode outside the enum")
			require.Error(t, validate(http.StatusTeapot, rec.Body.Bytes()), "undocumented status")
		})
	}
}
