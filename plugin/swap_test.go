package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/rank"
)

// fakeModel is a loaded model for swap tests: Rank answers its name as the top docid, optionally
// blocking until release is closed, and fails the test if it runs after Close.
type fakeModel struct {
	t       *testing.T
	name    string
	seen    []string
	started chan struct{} // receives once per Rank that reached the model; nil: not reported
	release chan struct{} // Rank waits for it when not nil
	ranks   atomic.Int64
	closes  atomic.Int64
	closed  chan struct{}
}

func newFakeModel(t *testing.T, name string, seen ...string) *fakeModel {
	return &fakeModel{t: t, name: name, seen: seen, closed: make(chan struct{})}
}

func (m *fakeModel) Rank(ctx context.Context, _ string, cands []inference.Candidate, _ inference.Options) (inference.Result, error) {
	m.ranks.Add(1)
	if m.closes.Load() > 0 {
		m.t.Errorf("model %s ranked after Close", m.name)
	}
	if m.started != nil {
		m.started <- struct{}{}
	}
	if m.release != nil {
		select {
		case <-m.release:
		case <-ctx.Done():
			return inference.Result{}, ctx.Err()
		}
	}
	if m.closes.Load() > 0 {
		m.t.Errorf("model %s closed while a request was in flight", m.name)
	}
	return inference.Result{PCopy: 0.1, InContext: len(cands), Beams: []inference.Beam{
		{DocID: m.name, Route: inference.RouteParametric, Score: -1, Candidate: -1}}}, nil
}

func (m *fakeModel) loaded() LoadedModel {
	return LoadedModel{Reader: icicle(m), Seen: m.seen, Info: ModelInfo{Name: m.name, SeenDocIDs: len(m.seen), Dir: "/models/" + m.name},
		Close: func() error {
			if m.closes.Add(1) == 1 {
				close(m.closed)
			}
			return nil
		}}
}

// fakeLoader serves the fake models by directory name; any other directory fails to load.
func fakeLoader(models ...*fakeModel) ModelLoader {
	return func(dir string) (LoadedModel, error) {
		for _, m := range models {
			if dir == "/models/"+m.name {
				return m.loaded(), nil
			}
		}
		return LoadedModel{}, fmt.Errorf("read manifest: open %s/manifest.json: no such file or directory", dir)
	}
}

func rankName(t *testing.T, r rank.Reader) string {
	t.Helper()
	res, err := r.Read(t.Context(), rank.Query{Text: "q"})
	require.NoError(t, err)
	return res.Scored[0].DocID
}

func TestSwapperDrainsTheOldModel(t *testing.T) {
	old, next := newFakeModel(t, "old"), newFakeModel(t, "new")
	old.started, old.release = make(chan struct{}, 1), make(chan struct{})
	sw := NewSwapper(old.loaded(), fakeLoader(old, next), nil)

	inflight := make(chan string)
	go func() {
		res, err := sw.Read(context.Background(), rank.Query{Text: "q"})
		if err != nil {
			inflight <- "error: " + err.Error()
			return
		}
		inflight <- res.Scored[0].DocID
	}()
	<-old.started // the request is inside the old model's Rank

	rep, err := sw.Swap("/models/new")
	require.NoError(t, err)
	require.Equal(t, "old", rep.Previous.Name)
	require.Equal(t, "new", rep.Model.Name)
	require.Equal(t, "new", sw.Info().Name)
	require.Equal(t, "new", rankName(t, sw), "requests after the swap use the new model")
	require.Zero(t, old.closes.Load(), "the old model stays open while a request is in flight")

	close(old.release)
	require.Equal(t, "old", <-inflight, "the in-flight request finishes on the model it started with")
	select {
	case <-old.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the old model was not closed after its last request")
	}
	require.EqualValues(t, 1, old.ranks.Load())
	require.Zero(t, next.closes.Load())

	require.NoError(t, sw.Close())
	require.EqualValues(t, 1, next.closes.Load(), "Close closes the current model")
	require.EqualValues(t, 1, old.closes.Load(), "once")
	_, err = sw.Read(t.Context(), rank.Query{Text: "q"})
	require.ErrorIs(t, err, ErrModelClosed)
	_, err = sw.Swap("/models/new")
	require.ErrorIs(t, err, ErrModelClosed)
	require.NoError(t, sw.Close(), "idempotent")
}

func TestSwapperKeepsServingOnLoadFailure(t *testing.T) {
	old := newFakeModel(t, "old")
	sw := NewSwapper(old.loaded(), fakeLoader(old), nil)
	_, err := sw.Swap("/models/missing")
	var le *LoadError
	require.ErrorAs(t, err, &le)
	require.Equal(t, "/models/missing", le.Dir)
	require.ErrorContains(t, err, "manifest.json", "the loader's message names what is wrong")
	require.Equal(t, "old", sw.Info().Name)
	require.Equal(t, "old", rankName(t, sw))
	require.Zero(t, old.closes.Load())
	require.NoError(t, sw.Close())
}

func TestSwapperCloseWaitsForInflight(t *testing.T) {
	m := newFakeModel(t, "only")
	m.started, m.release = make(chan struct{}, 1), make(chan struct{})
	sw := NewSwapper(m.loaded(), fakeLoader(m), nil)
	done := make(chan error)
	go func() {
		_, err := sw.Read(context.Background(), rank.Query{Text: "q"})
		done <- err
	}()
	<-m.started
	closed := make(chan error)
	go func() { closed <- sw.Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned with a request in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(m.release)
	require.NoError(t, <-done)
	require.NoError(t, <-closed)
	require.EqualValues(t, 1, m.closes.Load())
}

// TestSwapperUnderLoad swaps back and forth while requests run; fakeModel fails the test if any request
// reaches a closed model or a model is closed under a request.
func TestSwapperUnderLoad(t *testing.T) {
	first := newFakeModel(t, "m0")
	// Each load returns a fresh fake, so a directory loads again after its previous generation closed.
	var gens sync.Map // *fakeModel -> struct{}
	load := func(dir string) (LoadedModel, error) {
		m := newFakeModel(t, strings.TrimPrefix(dir, "/models/"))
		gens.Store(m, struct{}{})
		return m.loaded(), nil
	}
	sw := NewSwapper(first.loaded(), load, nil)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := sw.Read(ctx, rank.Query{Text: "q"}); err != nil {
					t.Errorf("rank: %v", err)
					return
				}
			}
		})
	}
	for i := range 50 {
		_, err := sw.Swap(fmt.Sprintf("/models/m%d", i%4))
		require.NoError(t, err)
	}
	cancel()
	wg.Wait()
	require.NoError(t, sw.Close())
	gens.Range(func(k, _ any) bool {
		require.EqualValues(t, 1, k.(*fakeModel).closes.Load(), "every generation closed exactly once")
		return true
	})
	require.EqualValues(t, 1, first.closes.Load())
}

func TestSeenDiff(t *testing.T) {
	added, removed := seenDiff([]string{"a", "b", "c"}, []string{"b", "c", "d", "e"})
	require.Equal(t, 2, added)
	require.Equal(t, 1, removed)
}

const testAdminToken = "test-admin-token-0123456789"

func newSwapServer(t *testing.T, token string) (*Server, *fakeModel, *fakeModel) {
	t.Helper()
	old, next := newFakeModel(t, "old", "s1", "s2"), newFakeModel(t, "new")
	sw := NewSwapper(old.loaded(), fakeLoader(old, next), nil)
	t.Cleanup(func() { require.NoError(t, sw.Close()) })
	es := &fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return threeHits(), nil }}
	s := newServer(es, sw, testOptions{Options: Options{MaxBodyBytes: 1 << 20, RequestTimeout: time.Second, MaxQueryChars: 100, MaxHits: 1000, AdminToken: token},
		ESBudgetFraction: 0.3, MaxCandidates: 100, MaxInflight: 2, MinTopScore: -1e9})
	return s, old, next
}

func admin(t *testing.T, s *Server, auth, body string) (int, map[string]any, http.Header) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/admin/model", strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	s.Handler().ServeHTTP(rec, req)
	out := map[string]any{}
	if rec.Body.Len() > 0 && strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
	}
	return rec.Code, out, rec.Header()
}

func TestAdminModelSwap(t *testing.T) {
	t.Run("off without a token", func(t *testing.T) {
		s, _, _ := newSwapServer(t, "")
		code, _, _ := admin(t, s, "Bearer anything", `{"dir": "/models/new"}`)
		require.Equal(t, http.StatusNotFound, code)
	})
	t.Run("off when the model cannot be swapped", func(t *testing.T) {
		s := newTestServer(t, &fakeSearcher{}, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.AdminToken = testAdminToken })
		code, _, _ := admin(t, s, "Bearer "+testAdminToken, `{"dir": "/models/new"}`)
		require.Equal(t, http.StatusNotFound, code)
	})
	s, old, _ := newSwapServer(t, testAdminToken)
	for _, auth := range []string{"", "Bearer wrong-token-0123456789", testAdminToken, "Basic " + testAdminToken, "Bearer " + testAdminToken + "x"} {
		code, body, hdr := admin(t, s, auth, `{"dir": "/models/new"}`)
		require.Equal(t, http.StatusUnauthorized, code, "auth %q", auth)
		require.Contains(t, hdr.Get("WWW-Authenticate"), "Bearer")
		require.NotEmpty(t, body["error"])
	}
	code, body, _ := do(t, s, "GET", "/v1/model", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "old", body["name"], "refused requests change nothing")

	bearer := "Bearer " + testAdminToken
	t.Run("bad input names dir", func(t *testing.T) {
		for _, body := range []string{`{}`, `{"dir": "  "}`, `{"dir": 3}`, `{"dir": "/models/missing"}`} {
			code, out, _ := admin(t, s, bearer, body)
			require.Equal(t, http.StatusBadRequest, code, body)
			require.Equal(t, "dir", out["field"], body)
		}
		_, out, _ := admin(t, s, bearer, `{"dir": "/models/missing"}`)
		require.Contains(t, out["error"], "/models/missing/manifest.json: no such file", "the loader's message")
		_, body, _ := do(t, s, "GET", "/v1/model", "")
		require.Equal(t, "old", body["name"], "a failed load leaves the old model serving")
		_, body, _ = do(t, s, "POST", "/v1/search", `{"query":"q"}`)
		require.Equal(t, "old", body["model"])
	})

	_, ready, _ := do(t, s, "GET", "/readyz", "")
	require.Equal(t, false, ready["seen_consistent"], "the index has 0 seen documents, the old model 2")

	code, out, _ := admin(t, s, bearer, `{"dir": "/models/new"}`)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "old", out["previous"].(map[string]any)["name"])
	require.Equal(t, "new", out["model"].(map[string]any)["name"])
	require.EqualValues(t, 2, out["seen_removed"])
	require.EqualValues(t, 0, out["seen_added"])
	require.NotEmpty(t, out["request_id"])

	_, body, _ = do(t, s, "GET", "/v1/model", "")
	require.Equal(t, "new", body["name"], "GET /v1/model reflects the swap")
	require.Equal(t, "/models/new", body["dir"])
	_, body, _ = do(t, s, "POST", "/v1/search", `{"query":"q"}`)
	require.Equal(t, "new", body["model"])
	require.Equal(t, "new", body["results"].([]any)[0].(map[string]any)["docid"], "ranked by the new model")
	// The seen-corpus diff behind seen_consistent is recomputed in the background for the new model.
	require.Eventually(t, func() bool {
		_, ready, _ = do(t, s, "GET", "/readyz", "")
		return ready["seen_consistent"] == true
	}, 5*time.Second, 5*time.Millisecond, "recomputed against the new model's seen corpus: %v", ready)
	require.EqualValues(t, 0, ready["model_seen"])
	select {
	case <-old.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the swapped-out model was not closed")
	}

	metrics := scrape(t, s)
	require.Contains(t, metrics, `icicle_model_swaps_total{result="success"} 1`)
	require.Contains(t, metrics, `icicle_model_swaps_total{result="failure"} 2`, "two directories failed to load")
}

func TestSwapModelWithoutSwapper(t *testing.T) {
	s := newTestServer(t, &fakeSearcher{}, &fakeReranker{rank: copyBeta}, nil)
	_, err := s.SwapModel("/models/x")
	require.True(t, errors.Is(err, ErrNotSwappable))
}

func scrape(t *testing.T, s *Server) string {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), "GET", "/metrics", nil))
	return rec.Body.String()
}
