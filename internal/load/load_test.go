package load

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestAggregate(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	samples := []Sample{
		{Status: 200, Latency: ms(10), Mode: "reranked"},
		{Status: 200, Latency: ms(40), Mode: "first_stage_fallback", Reason: "overloaded"},
		{Status: 200, Latency: ms(20), Mode: "reranked"},
		{Status: 200, Latency: ms(30), Mode: "first_stage_fallback", Reason: "model_timeout"},
		{Status: 503, Latency: ms(1)},
		{Status: 0, Latency: ms(2)},
	}
	s := Aggregate(samples, 2*time.Second)
	require.Equal(t, 6, s.Requests)
	require.InDelta(t, 3.0, s.Throughput, 1e-12)
	require.InDelta(t, 2.0, s.OKThroughput, 1e-12)
	require.Equal(t, map[string]int{"200": 4, "503": 1, StatusTransport: 1}, s.ByStatus)
	require.InDelta(t, 2.0/6, s.ErrorRate, 1e-12)
	require.Equal(t, map[string]int{"reranked": 2, "first_stage_fallback": 2}, s.Modes)
	require.Equal(t, map[string]int{"overloaded": 1, "model_timeout": 1}, s.Fallbacks)
	require.InDelta(t, 0.5, s.FallbackRate, 1e-12)
	// Percentiles over the four 200s only: 10 20 30 40 ms.
	require.Equal(t, Latency{P50: 20, P95: 40, P99: 40, Max: 40}, s.Latency)

	empty := Aggregate(nil, 0)
	require.Zero(t, empty.Requests)
	require.Zero(t, empty.ErrorRate)
}

func TestParseRSS(t *testing.T) {
	body := []byte("# HELP process_resident_memory_bytes Resident memory size in bytes.\n" +
		"# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 1.23456e+08\nprocess_virtual_memory_bytes 9e+09\n")
	v, ok := ParseRSS(body)
	require.True(t, ok)
	require.Equal(t, int64(123456000), v)
	_, ok = ParseRSS([]byte("go_goroutines 7\n"))
	require.False(t, ok)
}

func TestParseProcStatus(t *testing.T) {
	status := []byte("Name:\ticicle\nVmPeak:\t 2000 kB\nVmHWM:\t  300000 kB\nVmRSS:\t  250000 kB\nThreads:\t12\n")
	rss, hwm, err := ParseProcStatus(status)
	require.NoError(t, err)
	require.Equal(t, int64(250000*1024), rss)
	require.Equal(t, int64(300000*1024), hwm)
	_, _, err = ParseProcStatus([]byte("Name:\tkthreadd\n"))
	require.Error(t, err)
}

func TestCheckLoopback(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:8080", "http://localhost:8080/", "http://[::1]:8080", "http://127.1.2.3"} {
		require.NoError(t, CheckLoopback(u), u)
	}
	for _, u := range []string{"http://10.0.0.1:8080", "http://example.com", "ftp://127.0.0.1", "127.0.0.1:8080", ""} {
		require.Error(t, CheckLoopback(u), u)
	}
}

// TestRunSmoke runs two clients against an in-process server that answers like the sidecar: every
// third request falls back, every fifth is a 503. It checks what was counted, not how fast.
func TestRunSmoke(t *testing.T) {
	defer goleak.VerifyNone(t)
	var n atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/search", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Query string `json:"query"`
			Size  int    `json:"size"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Query == "" || req.Size != 10 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		switch i := n.Add(1); {
		case i%5 == 0:
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"error":"elasticsearch unavailable"}`, http.StatusServiceUnavailable)
		case i%3 == 0:
			_, _ = w.Write([]byte(`{"mode":"first_stage_fallback","fallback_reason":"overloaded","results":[]}`))
		case i%7 == 0: // a gate that never promotes: the model did not run
			_, _ = w.Write([]byte(`{"mode":"gated","gate":{"decision":"keep_first_stage","never":true},"results":[]}`))
		case i%2 == 0: // the model ran and the gate kept the first stage's order
			_, _ = w.Write([]byte(`{"mode":"gated","router_prob":0.98,"gate":{"decision":"keep_first_stage"},"results":[]}`))
		default:
			_, _ = w.Write([]byte(`{"mode":"reranked","results":[]}`))
		}
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("process_resident_memory_bytes 4.194304e+06\n"))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()

	res, err := Run(t.Context(), Options{URL: srv.URL, Clients: 2, Duration: time.Second,
		Queries: []string{"a", "b", "c"}, SampleEvery: 50 * time.Millisecond, Client: &http.Client{Transport: tr}})
	require.NoError(t, err)
	s := Aggregate(res.Samples, res.Elapsed)
	require.Positive(t, s.Requests)
	require.LessOrEqual(t, int64(s.Requests), n.Load(), "cut-off requests are not counted")
	require.Equal(t, s.Requests, s.ByStatus["200"]+s.ByStatus["503"], "only 200 and 503 answers: %v", s.ByStatus)
	require.Equal(t, s.ByStatus["200"], s.Modes["reranked"]+s.Modes["first_stage_fallback"]+s.Modes["gated"]+s.Modes[ModeGatedIdle], "%v", s.Modes)
	require.Positive(t, s.Modes[ModeGatedIdle], "a gated answer without router_prob is told apart: %v", s.Modes)
	require.Positive(t, s.Modes["gated"])
	require.Equal(t, s.Modes["first_stage_fallback"], s.Fallbacks["overloaded"])
	require.Equal(t, "metrics", res.Memory.Source)
	require.Equal(t, int64(4<<20), res.Memory.Max)
	require.GreaterOrEqual(t, res.Memory.Samples, 2, "before and after the run")

	var buf bytes.Buffer
	WriteMarkdown(&buf, s, res.Memory)
	require.Contains(t, buf.String(), "| 4 / 4 / 4 (metrics) |")

	_, err = Run(t.Context(), Options{URL: "http://192.0.2.1:80", Clients: 1, Duration: time.Second, Queries: []string{"a"}})
	require.ErrorContains(t, err, "loopback")
}
