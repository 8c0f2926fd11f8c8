package load

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// fakeSidecar answers like the sidecar: every request waits delay, every fourth falls back as
// overloaded, every seventh is a 500; /metrics shows the breaker transitions counter, bumped by one
// "open" after the first scrape.
func fakeSidecar(t *testing.T, delay time.Duration) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n, scrapes atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/search", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		switch i := n.Add(1); {
		case i%7 == 0:
			http.Error(w, `{"error":"internal"}`, http.StatusInternalServerError)
		case i%4 == 0:
			_, _ = w.Write([]byte(`{"mode":"first_stage_fallback","fallback_reason":"overloaded","results":[]}`))
		default:
			_, _ = w.Write([]byte(`{"mode":"reranked","results":[],"timings":{"model_ms":250}}`))
		}
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		open := 0
		if scrapes.Add(1) > 1 {
			open = 1
		}
		_, _ = w.Write([]byte("process_resident_memory_bytes 4.194304e+06\n" +
			"icicle_breaker_transitions_total{to=\"closed\"} 0\nicicle_breaker_transitions_total{to=\"open\"} " +
			map[int]string{0: "0", 1: "1"}[open] + "\n"))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &n
}

// TestRunOpen: requests arrive at the set rate whatever the answers' latency (each takes 50 ms, ten
// times the gap), all are waited for and counted, latency runs from the scheduled arrival, and the
// breaker's transitions are the difference of two scrapes. It checks counts, not speed: the 40 arrivals are
// due within 200 ms of a 10 s run, so a late timer on a loaded machine cannot cut them short.
func TestRunOpen(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first, so it runs after the server's Close
	srv, n := fakeSidecar(t, 50*time.Millisecond)
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	res, err := RunOpen(t.Context(), OpenOptions{URL: srv.URL, Rate: 200, Arrivals: ArrivalsConstant, Duration: 10 * time.Second,
		MaxRequests: 40, Queries: []string{"a", "b"}, SampleEvery: -1, Client: &http.Client{Transport: tr}})
	require.NoError(t, err)
	require.Equal(t, 40, res.Sent, "MaxRequests bounds the arrivals (10 s at 200/s would be 1999)")
	require.Zero(t, res.Missed)
	require.Len(t, res.Samples, 40, "every request sent is waited for")
	require.EqualValues(t, 40, n.Load())
	for _, s := range res.Samples {
		require.GreaterOrEqual(t, s.Latency, 50*time.Millisecond)
	}
	require.Equal(t, map[string]int{"closed": 0, "open": 1}, res.BreakerTransitions)

	row := NewRateRow(200, 2, res)
	require.Equal(t, 5, row.Errors, "the 500s (7, 14, ..., 35) are errors")
	require.Equal(t, 5, row.Summary.ByStatus["500"])
	fallbacks := row.Summary.Fallbacks["overloaded"]
	require.InDelta(t, float64(40-5-fallbacks)/40, row.ModelShare, 1e-12)

	var buf bytes.Buffer
	WriteRateTable(&buf, []RateRow{row})
	require.Contains(t, buf.String(), "| 200.00 (2x) | 40 | 0 |")
	require.Contains(t, buf.String(), "| open 1 |")
	png := filepath.Join(t.TempDir(), "load.png")
	require.NoError(t, WriteRatePlot(png, []RateRow{row}, 100))
	b, err := os.ReadFile(png)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(b, []byte("\x89PNG")), "a PNG")
}

// TestRunOpenBoundsOutstanding: with MaxOutstanding 2 and answers far slower than the arrivals, the
// arrivals beyond two in flight are not sent but counted as missed. The answers take 2 s against a 150 ms run,
// so that no slot frees before the run ends even on a loaded machine.
func TestRunOpenBoundsOutstanding(t *testing.T) {
	srv, _ := fakeSidecar(t, 2*time.Second)
	res, err := RunOpen(t.Context(), OpenOptions{URL: srv.URL, Rate: 100, Arrivals: ArrivalsPoisson, Duration: 150 * time.Millisecond,
		MaxOutstanding: 2, Queries: []string{"a"}, SampleEvery: -1, Seed: 7})
	require.NoError(t, err)
	require.Equal(t, 2, res.Sent)
	require.Positive(t, res.Missed)
	require.Len(t, res.Samples, 2)

	_, err = RunOpen(t.Context(), OpenOptions{URL: "http://192.0.2.1", Rate: 1, Duration: time.Second, Queries: []string{"a"}})
	require.ErrorContains(t, err, "loopback")
	_, err = RunOpen(t.Context(), OpenOptions{URL: srv.URL, Rate: 1, Arrivals: "bursty", Duration: time.Second, Queries: []string{"a"}})
	require.ErrorContains(t, err, "bursty")
}

func TestCalibrate(t *testing.T) {
	srv, _ := fakeSidecar(t, 0)
	c, err := Calibrate(t.Context(), srv.URL, "", []string{"a"}, 8, 2)
	require.NoError(t, err)
	require.Equal(t, 8, c.Requests)
	require.Equal(t, 5, c.Model, "requests 4 and 8 fell back, 7 failed")
	require.InDelta(t, 250, c.MedianModelMS, 1e-9)
	require.InDelta(t, 8, c.Capacity, 1e-9, "2 sessions / 0.25 s")
}

func TestParseTransitions(t *testing.T) {
	m, ok := ParseTransitions([]byte("# TYPE icicle_breaker_transitions_total counter\nicicle_breaker_transitions_total{to=\"half-open\"} 3\nicicle_breaker_transitions_total{to=\"open\"} 4\nother 1\n"))
	require.True(t, ok)
	require.Equal(t, map[string]float64{"half-open": 3, "open": 4}, m)
	_, ok = ParseTransitions([]byte("go_goroutines 7\n"))
	require.False(t, ok)
}

// TestModelServed: the gate's answers (the model ran, the gate decided) count as served by the model; BM25
// answers and fallbacks do not.
func TestModelServed(t *testing.T) {
	modes := map[string]int{"reranked": 1, "fused": 2, "gated": 4, "bm25": 8, "first_stage_fallback": 16, ModeGatedIdle: 32}
	if got := modelServed(modes); got != 7 {
		t.Fatalf("modelServed(%v) = %d, want 7", modes, got)
	}
}
