package plugin

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// TestOversizedBodyGets413: a body over server.max_body_bytes is answered 413 naming the limit, over a real
// connection, also when it is many times the limit (the client is still sending when the answer is ready:
// the connection must not be reset under it), and the connection serves the next request.
func TestOversizedBodyGets413(t *testing.T) {
	es := &fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return threeHits(), nil }}
	s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.MaxBodyBytes = 4096 })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	client := hs.Client()
	for _, size := range []int{5000, 10 << 20} {
		body := `{"query":"` + strings.Repeat("x", size) + `"}`
		for _, path := range []string{"/v1/search", "/v1/rerank", "/icicle-docs/_search"} {
			// As curl does: the whole body written first, then the answer read.
			conn, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
			require.NoError(t, err)
			go func() {
				_, _ = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
					path, len(body), body)
			}()
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			require.NoError(t, err, "%s with %d bytes: the answer, not a reset", path, len(body))
			var out map[string]any
			require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
			require.NoError(t, res.Body.Close())
			require.NoError(t, conn.Close())
			require.Equal(t, http.StatusRequestEntityTooLarge, res.StatusCode, out)
			require.Contains(t, strings.ToLower(toString(out)), "4096", "the answer names the limit")
		}
	}
	res, err := client.Post(hs.URL+"/v1/search", "application/json", strings.NewReader(`{"query":"q"}`))
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusOK, res.StatusCode)
}

func toString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
