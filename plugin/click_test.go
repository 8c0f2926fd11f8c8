package plugin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/internal/abtest"
)

var hex32 = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestImpressionIDsAreUnique: a client that reuses its request id gets a new impression id per answer,
// in the body and the header, and the log keeps the impressions apart.
func TestImpressionIDsAreUnique(t *testing.T) {
	path := filepath.Join(t.TempDir(), "impressions.jsonl")
	l, err := abtest.OpenImpressionLog(path, abtest.LogOptions{})
	require.NoError(t, err)
	var newCalls, allCalls atomic.Int64
	s := newTestServer(t, abSearcher(&newCalls, &allCalls), &fakeReranker{rank: copyBeta}, func(o *testOptions) {
		o.AB = ABOptions{Enabled: true, Mode: abtest.ModeInterleave}
		o.Impressions = l
	})
	ids := map[string]bool{}
	for range 3 {
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/search", strings.NewReader(`{"query":"q","size":3}`))
		req.Header.Set("X-Request-ID", "reused-id")
		s.Handler().ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		id := rec.Header().Get("X-ICICLE-Impression-ID")
		require.Regexp(t, hex32, id)
		require.Contains(t, rec.Body.String(), `"impression_id":"`+id+`"`)
		require.Equal(t, "reused-id", rec.Header().Get("X-Request-ID"))
		ids[id] = true
	}
	require.Len(t, ids, 3, "one impression id per answer")
	require.NoError(t, l.Close())
	got := readImpressions(t, path)
	require.Len(t, got, 3)
	for _, imp := range got {
		require.Equal(t, "reused-id", imp.RequestID)
		require.True(t, ids[imp.ImpressionID], "the logged id is the one returned")
		delete(ids, imp.ImpressionID)
	}

	off := newTestServer(t, abSearcher(&newCalls, &allCalls), &fakeReranker{rank: copyBeta}, nil)
	code, body, hdr := do(t, off, http.MethodPost, "/v1/search", `{"query":"q"}`)
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "impression_id", "no impression log, no impression id")
	require.Empty(t, hdr.Get("X-ICICLE-Impression-ID"))
}

// clickServer serves /v1/click into the click log clicks, with the write token token, and logs the
// impressions of /v1/search in imps.
func clickServer(t *testing.T, token string, clicks *abtest.ClickLog, imps *abtest.ImpressionLog) *Server {
	t.Helper()
	var newCalls, allCalls atomic.Int64
	return newTestServer(t, abSearcher(&newCalls, &allCalls), &fakeReranker{rank: copyBeta}, func(o *testOptions) {
		o.AB = ABOptions{Enabled: true, Mode: abtest.ModeInterleave}
		o.WriteToken, o.Clicks, o.Impressions = token, clicks, imps
	})
}

func postClick(t *testing.T, s *Server, auth, body string) (int, map[string]any, http.Header) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/click", strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	s.Handler().ServeHTTP(rec, req)
	var out map[string]any
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
	}
	return rec.Code, out, rec.Header()
}

func TestClickValidation(t *testing.T) {
	l, err := abtest.OpenClickLog(filepath.Join(t.TempDir(), "clicks.jsonl"), abtest.LogOptions{})
	require.NoError(t, err)
	defer l.Close()
	s := clickServer(t, testWriteToken, l, nil)
	bearer := "Bearer " + testWriteToken
	id := strings.Repeat("ab", 16)
	tests := []struct {
		name, body, field string
	}{
		{"no id", `{"docid":"Beta","position":1}`, "impression_id"},
		{"impression id not hex", `{"impression_id":"req-1","docid":"Beta","position":1}`, "impression_id"},
		{"impression id upper case", `{"impression_id":"` + strings.ToUpper(id) + `","docid":"Beta","position":1}`, "impression_id"},
		{"impression id a number", `{"impression_id":12,"docid":"Beta","position":1}`, "impression_id"},
		{"blank request id", `{"request_id":"  ","docid":"Beta","position":1}`, "request_id"},
		{"long request id", `{"request_id":"` + strings.Repeat("r", 65) + `","docid":"Beta","position":1}`, "request_id"},
		{"no docid", `{"impression_id":"` + id + `","position":1}`, "docid"},
		{"blank docid", `{"impression_id":"` + id + `","docid":" ","position":1}`, "docid"},
		{"long docid", `{"impression_id":"` + id + `","docid":"` + strings.Repeat("d", 1025) + `","position":1}`, "docid"},
		{"no position", `{"impression_id":"` + id + `","docid":"Beta"}`, "position"},
		{"position 0", `{"impression_id":"` + id + `","docid":"Beta","position":0}`, "position"},
		{"position 101", `{"impression_id":"` + id + `","docid":"Beta","position":101}`, "position"},
		{"position not an integer", `{"impression_id":"` + id + `","docid":"Beta","position":1.5}`, "position"},
		{"invalid JSON", `{"impression_id":`, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body, _ := postClick(t, s, bearer, tt.body)
			require.Equal(t, http.StatusBadRequest, code, body)
			require.Equal(t, tt.field, body["field"], body)
			require.NotEmpty(t, body["error"])
		})
	}
	require.NoError(t, l.Close(), "Close writes what is queued")
	require.Zero(t, l.Counts().Written, "nothing logged")
}

func TestClickAuth(t *testing.T) {
	l, err := abtest.OpenClickLog(filepath.Join(t.TempDir(), "clicks.jsonl"), abtest.LogOptions{})
	require.NoError(t, err)
	defer l.Close()
	good := `{"impression_id":"` + strings.Repeat("0f", 16) + `","docid":"Beta","position":2}`
	s := clickServer(t, testWriteToken, l, nil)
	for _, auth := range []string{"", "Bearer wrong-token-0123456789", testWriteToken, "Basic " + testWriteToken, "Bearer " + testWriteToken + "x"} {
		code, body, hdr := postClick(t, s, auth, good)
		require.Equal(t, http.StatusUnauthorized, code, "auth %q", auth)
		require.Contains(t, hdr.Get("WWW-Authenticate"), "Bearer")
		require.Contains(t, body["error"], "server.write_token")
	}
	code, _, _ := postClick(t, clickServer(t, "", l, nil), "Bearer "+testWriteToken, good)
	require.Equal(t, http.StatusNotFound, code, "no write token: the endpoint is off")
	code, _, _ = postClick(t, clickServer(t, testWriteToken, nil, nil), "Bearer "+testWriteToken, good)
	require.Equal(t, http.StatusNotFound, code, "no click log: the endpoint is off")
	code, body, _ := postClick(t, s, "Bearer "+testWriteToken, good)
	require.Equal(t, http.StatusAccepted, code, body)
	require.Equal(t, true, body["logged"])
}

// TestClickNotLoggedIs503: a click the log does not take (its queue full, or closing: abtest's
// TestClickLogDropsWhenFull) is a 503 to retry, counted.
func TestClickNotLoggedIs503(t *testing.T) {
	l, err := abtest.OpenClickLog(filepath.Join(t.TempDir(), "clicks.jsonl"), abtest.LogOptions{})
	require.NoError(t, err)
	s := clickServer(t, testWriteToken, l, nil)
	good := `{"request_id":"r1","docid":"Beta","position":1}`
	code, _, _ := postClick(t, s, "Bearer "+testWriteToken, good)
	require.Equal(t, http.StatusAccepted, code)
	require.NoError(t, l.Close())
	code, body, hdr := postClick(t, s, "Bearer "+testWriteToken, good)
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Equal(t, "click log busy, retry", body["error"])
	require.Equal(t, "1", hdr.Get("Retry-After"))
	require.Equal(t, abtest.LogCounts{Written: 1, DroppedClosed: 1}, l.Counts())
	require.Contains(t, scrape(t, s), `icicle_clicks_dropped_total{reason="closed"} 1`)
}

// TestClickLoopJoins: search, click on the returned impression, and ab-report's join credits the
// click to the team that placed the result; the click log's lines are what docs/ab.md says.
func TestClickLoopJoins(t *testing.T) {
	dir := t.TempDir()
	impPath, clickPath := filepath.Join(dir, "impressions.jsonl"), filepath.Join(dir, "clicks.jsonl")
	imps, err := abtest.OpenImpressionLog(impPath, abtest.LogOptions{})
	require.NoError(t, err)
	clicks, err := abtest.OpenClickLog(clickPath, abtest.LogOptions{})
	require.NoError(t, err)
	s := clickServer(t, testWriteToken, clicks, imps)

	_, first := search(t, s, "user-1", "same", `{"query":"q","size":4}`)
	_, second := search(t, s, "user-1", "same", `{"query":"q","size":4}`)
	require.NotEqual(t, first["impression_id"], second["impression_id"])
	res := results(first)
	var teamOf2 string
	clicked := res[1]
	teamOf2 = clicked["team"].(string)
	code, body, _ := postClick(t, s, "Bearer "+testWriteToken,
		`{"impression_id":"`+first["impression_id"].(string)+`","docid":"`+clicked["docid"].(string)+`","position":2}`)
	require.Equal(t, http.StatusAccepted, code, body)
	// By request id: two impressions answered "same", so the report cannot credit it.
	code, _, _ = postClick(t, s, "Bearer "+testWriteToken, `{"request_id":"same","docid":"`+clicked["docid"].(string)+`","position":2}`)
	require.Equal(t, http.StatusAccepted, code)
	require.NoError(t, imps.Close())
	require.NoError(t, clicks.Close())

	raw, err := os.ReadFile(clickPath)
	require.NoError(t, err)
	require.Regexp(t, `^\{"ts":"[^"]+","impression_id":"[0-9a-f]{32}","docid":"[^"]+","position":2,"click_request_id":"[0-9a-f]+"\}\n`, string(raw))

	var ai []abtest.Impression
	var ac []abtest.Click
	var bad abtest.BadLines
	fi, err := os.Open(impPath)
	require.NoError(t, err)
	defer fi.Close()
	require.NoError(t, abtest.ReadJSONL(fi, impPath, func(i abtest.Impression) { ai = append(ai, i) }, &bad))
	fc, err := os.Open(clickPath)
	require.NoError(t, err)
	defer fc.Close()
	require.NoError(t, abtest.ReadJSONL(fc, clickPath, func(c abtest.Click) { ac = append(ac, c) }, &bad))
	require.Zero(t, bad.Count)
	r := abtest.Analyse(ai, ac, abtest.Options{})
	require.Equal(t, abtest.JoinCounts{Clicks: 2, Joined: 1, Ambiguous: 1}, r.Join)
	it := r.Interleaving
	require.Equal(t, 2, it.Impressions)
	if teamOf2 == "A" {
		require.Equal(t, 1, it.WinsA)
	} else {
		require.Equal(t, 1, it.WinsB)
	}
	require.Contains(t, scrape(t, s), "icicle_clicks_written_total 2")
}
