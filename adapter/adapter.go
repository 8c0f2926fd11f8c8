package adapter

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elastic/elastic-transport-go/v8/elastictransport"
	"github.com/elastic/go-elasticsearch/v8/esapi"
)

// DefaultIndex is the index name used when Options.Index is empty.
const DefaultIndex = "icicle-docs"

// Options configures an Adapter. Only Addresses (or CloudID) is normally set; with the zero value the
// adapter talks to http://localhost:9200 without authentication.
type Options struct {
	// Addresses are the base URLs of the cluster's HTTP endpoints, e.g. "http://127.0.0.1:9200".
	// Default: http://localhost:9200 (or $ELASTICSEARCH_URL, as go-elasticsearch reads it) when CloudID is empty.
	Addresses []string
	// CloudID is an Elastic Cloud deployment id; it replaces Addresses. Default: empty.
	CloudID string
	// APIKey is a base64 "id:key" API key sent as "Authorization: ApiKey ...". Default: none.
	APIKey string
	// Username and Password are HTTP basic-auth credentials, ignored when APIKey is set. Default: none.
	Username string
	// Password is the basic-auth password for Username. Default: none.
	Password string
	// CACertPath is a PEM file of the CA certificates that sign the cluster's https certificate.
	// Default: empty (the system roots).
	CACertPath string
	// CertFingerprint is the hex SHA-256 fingerprint of the cluster's HTTP certificate, the alternative to
	// CACertPath that Elasticsearch 8 prints on first start. Default: empty (normal verification).
	CertFingerprint string
	// Index is the index (or alias) that holds the corpus. Default: DefaultIndex.
	Index string
	// RequestTimeout bounds each call's request to Elasticsearch, retries included (each bulk flush in
	// Ingest gets its own). The caller's context still applies. Default: 10s; negative means no limit.
	RequestTimeout time.Duration
	// MaxRetries is how many times a request that failed with 429, 502, 503, 504 or a connection error is
	// retried, with exponential backoff (100ms doubling, at most 2s, full jitter). A backoff that would end
	// after the context's deadline is not waited: the last failure is returned at once, and a deadline that
	// ends the retries is reported as ErrUnavailable, not as context.DeadlineExceeded (a cluster that refuses
	// connections is down, not slow). Default: 3; negative disables retries.
	MaxRetries int
	// Transport replaces the HTTP transport; tests use it to serve fixtures. Default: http.DefaultTransport
	// configured by go-elasticsearch.
	Transport http.RoundTripper
	// VectorDims is the length of the first stage's document vectors (the encoder's dims). With it the
	// index has VectorField and VectorModelField: EnsureIndex creates them, and adds them to an index that
	// has neither (a mapping addition, nothing stored changes). Default 0: no vectors (BM25 only).
	VectorDims int
	// VectorIndex is the vector field's index_options type in an index the sidecar creates (VectorIndexTypes):
	// "hnsw" keeps float vectors and exact cosines; "int8_hnsw" and "bbq_hnsw" quantise the vectors the kNN
	// search walks (about 4x and 32x less memory for the graph's vectors; cosines approximate, the floats
	// kept on disk). EnsureIndex holds the sidecar's own index to it. Default "hnsw".
	VectorIndex string
	// Shards is the number of primary shards of an index the sidecar creates (EnsureIndex); an existing
	// index keeps its own. Default 1.
	Shards int
	// Fields name the index's fields: the zero value is the sidecar's own layout; anything else is a
	// team's own index, searched as it is (Fields).
	Fields Fields
}

// Adapter is a client for the corpus index. It is safe for concurrent use; create one per process with New
// and release it with Close.
type Adapter struct {
	es        *esClient
	rt        *retrier // es with the adapter's retries: every request goes through it
	transport http.RoundTripper
	index     string
	timeout   time.Duration
	// vectorDims is Options.VectorDims: with it the mapping contract includes the vector fields.
	vectorDims int
	// vectorIndex is Options.VectorIndex: the vector field's index_options type in the sidecar's own index.
	vectorIndex string
	// shards is Options.Shards: the primary shards of an index EnsureIndex creates.
	shards int
	// f are the field names (Options.Fields with defaults); team is set when they are not the sidecar's own
	// layout.
	f    Fields
	team bool
	log  *slog.Logger
	now  func() time.Time
	// retries and backoff are the retrier's policy (rt), which the bulk writer also applies to bulk actions
	// that Elasticsearch shed for load; seenPageSize is ListSeen's page (SeenPageSize; tests shrink it).
	retries      int
	backoff      func(attempt int) time.Duration
	seenPageSize int

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// New builds an Adapter from opts. It does not contact the cluster; call Check or EnsureIndex for that.
// A nil logger discards logs.
func New(opts Options, logger *slog.Logger) (*Adapter, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	index := opts.Index
	if index == "" {
		index = DefaultIndex
	}
	timeout := opts.RequestTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	retries := opts.MaxRetries
	if retries == 0 {
		retries = 3
	}
	cfg := esConfig{
		addresses:   opts.Addresses,
		cloudID:     opts.CloudID,
		apiKey:      opts.APIKey,
		username:    opts.Username,
		password:    opts.Password,
		fingerprint: opts.CertFingerprint,
		transport:   opts.Transport,
		// callerAuth runs after the client has set the configured credentials, so it can replace them.
		interceptors: []elastictransport.InterceptorFunc{markRoundTrip, callerAuth},
	}
	if cfg.transport == nil {
		// Our own transport, so Close can drop idle connections. The fingerprint check is installed on it
		// in place by the transport.
		ht := http.DefaultTransport.(*http.Transport).Clone()
		if opts.CACertPath != "" {
			pem, err := os.ReadFile(opts.CACertPath)
			if err != nil {
				return nil, fmt.Errorf("read elasticsearch CA certificate: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("read elasticsearch CA certificate %s: no PEM certificates", opts.CACertPath)
			}
			ht.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
		cfg.transport = ht
	} else if opts.CACertPath != "" {
		return nil, errors.New("configure elasticsearch client: CACertPath cannot be combined with a custom Transport")
	}
	es, err := newESClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("configure elasticsearch client: %w", err)
	}
	if opts.VectorDims < 0 || opts.VectorDims > 4096 {
		return nil, fmt.Errorf("configure elasticsearch client: vector dims %d, want 0..4096", opts.VectorDims)
	}
	vectorIndex := cmp.Or(opts.VectorIndex, DefaultVectorIndex)
	if !slices.Contains(VectorIndexTypes, vectorIndex) {
		return nil, fmt.Errorf("configure elasticsearch client: vector index %q, want one of %s", vectorIndex, strings.Join(VectorIndexTypes, ", "))
	}
	if opts.Shards < 0 || opts.Shards > 1024 {
		return nil, fmt.Errorf("configure elasticsearch client: shards %d, want 1..1024 (0: 1)", opts.Shards)
	}
	if err := opts.Fields.Validate(); err != nil {
		return nil, fmt.Errorf("configure elasticsearch client: %w", err)
	}
	f := opts.Fields.withDefaults()
	a := &Adapter{es: es, transport: cfg.transport, index: index, timeout: timeout, log: logger, now: time.Now, vectorDims: opts.VectorDims, vectorIndex: vectorIndex, shards: max(opts.Shards, 1), f: f, team: !f.own(),
		retries: max(retries, 0), backoff: retryBackoff, seenPageSize: SeenPageSize}
	a.rt = &retrier{es: es, retries: a.retries, backoff: retryBackoff, log: logger}
	return a, nil
}

// retryBackoff is the wait before retry number attempt (1-based): 100ms doubling, at most 2s, full jitter.
func retryBackoff(attempt int) time.Duration {
	d := min(100*time.Millisecond<<min(attempt-1, 5), 2*time.Second)
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

// Index returns the name of the index the adapter reads and writes.
func (a *Adapter) Index() string { return a.index }

// Close releases the client's idle connections. It is idempotent; later calls return the first result.
// Calls made after Close fail with ErrClosed.
func (a *Adapter) Close() error {
	a.closeOnce.Do(func() {
		a.closed.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.es.Close(ctx); err != nil {
			a.closeErr = fmt.Errorf("close elasticsearch client: %w", err)
		}
		if t, ok := a.transport.(interface{ CloseIdleConnections() }); ok {
			t.CloseIdleConnections()
		}
	})
	return a.closeErr
}

// ClusterInfo is what Check learned about the cluster and the index.
type ClusterInfo struct {
	// ClusterName is the cluster's name from GET /.
	ClusterName string
	// Version is the Elasticsearch version number, e.g. "8.14.3".
	Version string
	// Index is the configured index name.
	Index string
	// IndexExists is true if the index (or alias) exists.
	IndexExists bool
	// MappingOK is true if the index exists and its mapping has every field this package needs.
	MappingOK bool
}

// Check contacts the cluster and inspects the index without changing anything. It returns the info it
// gathered together with an error wrapping ErrUnavailable (unreachable), ErrIndexMissing (reachable, no index)
// or ErrMappingMismatch (index with a wrong mapping); a nil error means ready to serve.
func (a *Adapter) Check(ctx context.Context) (ClusterInfo, error) {
	info := ClusterInfo{Index: a.index}
	var root struct {
		ClusterName string `json:"cluster_name"`
		Version     struct {
			Number string `json:"number"`
		} `json:"version"`
	}
	if err := a.do(ctx, esapi.InfoRequest{}, &root); err != nil {
		return info, fmt.Errorf("check cluster: %w", err)
	}
	info.ClusterName, info.Version = root.ClusterName, root.Version.Number
	var m mappingResponse
	if err := a.do(ctx, esapi.IndicesGetMappingRequest{Index: []string{a.index}}, &m); err != nil {
		return info, fmt.Errorf("check index %q: %w", a.index, err)
	}
	info.IndexExists = true
	if err := a.checkMapping(m, false); err != nil {
		return info, fmt.Errorf("check index %q: %w", a.index, err)
	}
	info.MappingOK = true
	return info, nil
}

// EnsureIndex creates the index with the package's mapping if it does not exist. If it exists, its mapping
// is verified and never altered, with one exception: an index that has none of the vector fields (made
// before vectors, or by a sidecar without an encoder) gets them added, which changes no stored document
// (Enrich then fills them). Any other difference is returned as an error wrapping ErrMappingMismatch whose
// text names each field and problem.
func (a *Adapter) EnsureIndex(ctx context.Context) error {
	var m mappingResponse
	err := a.do(ctx, esapi.IndicesGetMappingRequest{Index: []string{a.index}}, &m)
	switch {
	case err == nil && a.team:
		// A team's index: never created here; the sidecar's fields it lacks are added (a mapping addition),
		// anything else wrong is refused with every problem named.
		missing := map[string]fieldSpec{}
		if err := m.checkWith(a.index, func(props map[string]mappedField) error { return a.checkTeam(props, missing) }); err != nil {
			return fmt.Errorf("ensure index %q: %w", a.index, err)
		}
		if q := m.quantizedVectors(a.f.Vector); a.vectorDims > 0 && len(q) > 0 {
			a.log.Warn("the team's vector field is quantised: the first stage's cosines are approximate "+
				"(index_options type hnsw gives exact ones)", "index", a.index, "field", a.f.Vector, "index_options", q)
		}
		if len(missing) > 0 {
			if err := a.putFields(ctx, missing); err != nil {
				return fmt.Errorf("ensure index %q: %w", a.index, err)
			}
		}
		return nil
	case a.team && errors.Is(err, ErrIndexMissing):
		return fmt.Errorf("ensure index %q: %w: the fields configured describe a team's own index, which the sidecar does not create", a.index, err)
	case err == nil:
		if a.vectorDims > 0 && m.check(a.index, wantFields) == nil && m.lacksAll(vectorFields(a.vectorDims, a.vectorIndex)) {
			if err := a.addVectorFields(ctx); err != nil {
				return fmt.Errorf("ensure index %q: %w", a.index, err)
			}
			return a.EnsureIndex(ctx)
		}
		if err := m.check(a.index, a.fields()); err != nil {
			return fmt.Errorf("ensure index %q: %w", a.index, err)
		}
		return nil
	case !errors.Is(err, ErrIndexMissing):
		return fmt.Errorf("ensure index %q: %w", a.index, err)
	}
	err = a.do(ctx, esapi.IndicesCreateRequest{Index: a.index, Body: bytes.NewReader(indexBody(a.fields(), a.shards))}, nil)
	var re *ResponseError
	if errors.As(err, &re) && re.Type == "resource_already_exists_exception" {
		// Another process created it between our two requests: verify theirs.
		return a.EnsureIndex(ctx)
	}
	if err != nil {
		return fmt.Errorf("create index %q: %w", a.index, err)
	}
	a.log.Info("created index", "index", a.index)
	return nil
}

// addVectorFields puts the vector fields into the index's mapping.
func (a *Adapter) addVectorFields(ctx context.Context) error {
	return a.putFields(ctx, vectorFields(a.vectorDims, a.vectorIndex))
}

// putFields adds fields to the index's mapping (a mapping addition: no stored document changes).
func (a *Adapter) putFields(ctx context.Context, fields map[string]fieldSpec) error {
	props := map[string]any{}
	names := make([]string, 0, len(fields))
	for name, f := range fields {
		props[name] = fieldMapping(f)
		names = append(names, name)
	}
	body, err := json.Marshal(map[string]any{"properties": props})
	if err != nil {
		return err
	}
	if err := a.do(ctx, esapi.IndicesPutMappingRequest{Index: []string{a.index}, Body: bytes.NewReader(body)}, nil); err != nil {
		return fmt.Errorf("add the sidecar's fields %v: %w", names, err)
	}
	a.log.Info("added the sidecar's fields to the index mapping", "index", a.index, "fields", names)
	return nil
}

// checkMapping checks a mapping against the adapter's layout: the sidecar's contract, or a team's index
// (lacking the sidecar's fields allowed when allowMissing: EnsureIndex adds them).
func (a *Adapter) checkMapping(m mappingResponse, allowMissing bool) error {
	if !a.team {
		return m.check(a.index, a.fields())
	}
	var missing map[string]fieldSpec
	if allowMissing {
		missing = map[string]fieldSpec{}
	}
	return m.checkWith(a.index, func(props map[string]mappedField) error { return a.checkTeam(props, missing) })
}

// VectorDims returns Options.VectorDims: the length of the vectors the index holds, 0 without vectors.
func (a *Adapter) VectorDims() int { return a.vectorDims }

// request is satisfied by every esapi request type.
type request interface {
	Do(ctx context.Context, transport esapi.Transport) (*esapi.Response, error)
}

// do runs one request under the adapter's timeout, turns error responses into *ResponseError and decodes a
// successful body into out (unless out is nil). Transport failures wrap ErrUnavailable, and so does the
// adapter's own RequestTimeout expiring (together with context.DeadlineExceeded); the caller's context
// errors are returned as they are so callers can tell cancellation, or their own deadline, from outage,
// except that a deadline ending retries of connection failures or overload answers is an outage too.
func (a *Adapter) do(ctx context.Context, req request, out any) error {
	if a.closed.Load() {
		return ErrClosed
	}
	rctx, cancel := a.withTimeout(ctx)
	defer cancel()
	res, err := req.Do(rctx, a.rt)
	if err != nil {
		return a.noAnswer(ctx, rctx, err)
	}
	defer res.Body.Close()
	if res.IsError() {
		return decodeError(res)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, res.Body)
		return nil
	}
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		return fmt.Errorf("decode response: %w", err)
	}
	return nil
}

func (a *Adapter) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if a.timeout < 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, a.timeout)
}

// transportError classifies an error from the HTTP round trip.
func transportError(ctx context.Context, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	if errors.Is(err, errClosed) {
		return ErrClosed
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// decodeError reads an Elasticsearch error body: {"error": {"root_cause": [...], "type", "reason"}, "status"}.
// Some endpoints answer with a bare string error, or with no body at all (HEAD).
func decodeError(res *esapi.Response) error {
	e := &ResponseError{Status: res.StatusCode}
	if res.StatusCode == http.StatusUnauthorized {
		e.Authenticate = res.Header.Values("WWW-Authenticate")
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &v) == nil {
		e.Type, e.Reason = errorFields(v.Error)
	}
	return e
}

// errorFields reads the type and reason of an Elasticsearch error value: an object, whose reason is taken
// from the first cause that has one when its own is empty (a search that some shards could not answer says
// why only in caused_by), or a bare string.
func errorFields(raw json.RawMessage) (typ, reason string) {
	type cause struct {
		Type     string `json:"type"`
		Reason   string `json:"reason"`
		CausedBy *cause `json:"caused_by"`
	}
	var obj cause
	if json.Unmarshal(raw, &obj) == nil {
		for c := obj.CausedBy; obj.Reason == "" && c != nil; c = c.CausedBy {
			obj.Reason = c.Reason
		}
		return obj.Type, obj.Reason
	}
	_ = json.Unmarshal(raw, &reason)
	return "", reason
}

// callerAuthKey is the context key of the caller's credentials (WithCallerAuth).
type callerAuthKey struct{}

// WithCallerAuth returns a context whose Elasticsearch requests carry the caller's Authorization header
// value ("Basic ...", "Bearer ...", "ApiKey ...") instead of the adapter's configured credentials
// (Options.APIKey, Username/Password), so that the cluster's own security decides what the caller may
// read. An empty authorization sends no Authorization header at all: a caller without credentials is
// forwarded without any, never with the sidecar's, and a secured cluster answers 401 itself. Every request
// made with the context (searches, multi-gets, RawSearch) is affected; a context without the value uses
// the configured credentials, which is what the sidecar's own work (ingest, seen listing, readiness) does.
func WithCallerAuth(ctx context.Context, authorization string) context.Context {
	return context.WithValue(ctx, callerAuthKey{}, authorization)
}

// CallerAuth returns the Authorization value WithCallerAuth put in ctx, and whether there was one.
func CallerAuth(ctx context.Context) (authorization string, ok bool) {
	authorization, ok = ctx.Value(callerAuthKey{}).(string)
	return authorization, ok
}

// callerAuth is the client's interceptor that applies WithCallerAuth. It runs on every attempt of every
// request, after the client has written the configured credentials into it, so no request path (typed
// esapi calls, raw requests, bulk flushes) can skip it.
func callerAuth(next elastictransport.RoundTripFunc) elastictransport.RoundTripFunc {
	return func(req *http.Request) (*http.Response, error) {
		auth, ok := CallerAuth(req.Context())
		if !ok {
			return next(req)
		}
		req.Header.Del("Authorization")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		return next(req)
	}
}
