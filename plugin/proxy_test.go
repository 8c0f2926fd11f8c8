package plugin

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestClientAddressIgnoresForwardedHeaders: the client address the server logs is the connection's peer,
// not what a request says of itself in X-Forwarded-For or X-Real-IP (gin trusts every proxy unless told
// otherwise), on the public handler and on the separate admin one.
func TestClientAddressIgnoresForwardedHeaders(t *testing.T) {
	for _, separate := range []bool{false, true} {
		name := map[bool]string{false: "public handler", true: "separate admin handler"}[separate]
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			s := newTestServer(t, &fakeSearcher{}, &fakeReranker{}, func(o *testOptions) {
				o.Ingester, o.SeparateAdmin = &fakeIngester{}, separate
				o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
			})
			h := s.Handler()
			if separate {
				h = s.AdminHandler()
			}
			req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/ingest", strings.NewReader(`{}`))
			req.RemoteAddr = "127.0.0.1:41234"
			req.Header.Set("X-Forwarded-For", "1.2.3.4")
			req.Header.Set("X-Real-IP", "5.6.7.8")
			req.Header.Set("Authorization", "Bearer not-the-token")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, http.StatusUnauthorized, rec.Code, rec.Body.String())

			var refused map[string]any
			for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
				var rec map[string]any
				require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
				if rec["msg"] == "write request refused" {
					refused = rec
				}
			}
			require.NotNil(t, refused, "the refusal is logged: %s", logs.String())
			require.Equal(t, "127.0.0.1", refused["remote"], "the peer's address, not X-Forwarded-For or X-Real-IP")
		})
	}
}
