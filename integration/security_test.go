//go:build integration && ort && tokenizers

package integration

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/dropin"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/inference/loader"
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/internal/testenv"
	"github.com/icicle-search/sidecar/plugin"
	"github.com/icicle-search/sidecar/rank"
)

// authProxy is scripts/authproxy.sh's nginx in front of the node: the credentials it accepts and the log
// of who each request came as.
type authProxy struct {
	url, user, password, apiKey, serviceUser, servicePassword, log string
}

func (p authProxy) basic() string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(p.user+":"+p.password))
}

// newAuthProxy reads the proxy's settings from the environment scripts/test.sh sets (eval "$(scripts/
// authproxy.sh start)"). With the node configured but no proxy the test fails: it is not optional.
func newAuthProxy(t *testing.T) authProxy {
	t.Helper()
	p := authProxy{url: os.Getenv("ICICLE_AUTHPROXY_URL"), user: os.Getenv("ICICLE_AUTHPROXY_USER"),
		password: os.Getenv("ICICLE_AUTHPROXY_PASSWORD"), apiKey: os.Getenv("ICICLE_AUTHPROXY_APIKEY"),
		serviceUser: os.Getenv("ICICLE_AUTHPROXY_SERVICE_USER"), servicePassword: os.Getenv("ICICLE_AUTHPROXY_SERVICE_PASSWORD"),
		log: os.Getenv("ICICLE_AUTHPROXY_LOG")}
	if p.url == "" || p.user == "" || p.apiKey == "" || p.serviceUser == "" || p.log == "" {
		t.Fatal(`ICICLE_AUTHPROXY_* unset: run eval "$(scripts/authproxy.sh start)" (scripts/test.sh does)`)
	}
	return p
}

// logLines returns the proxy's access-log lines written after offset, and the new offset. nginx writes a
// request's line after it has sent the answer, so a caller that has its answer may not find the line yet:
// logLines first waits until the log has stopped growing for a moment (at most 5 s).
func (p authProxy) logLines(t *testing.T, offset int64) ([]string, int64) {
	t.Helper()
	p.settle(t)
	f, err := os.Open(p.log)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Seek(offset, io.SeekStart)
	require.NoError(t, err)
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	end, err := f.Seek(0, io.SeekCurrent)
	require.NoError(t, err)
	fi, _ := f.Stat()
	return lines, max(end, fi.Size())
}

// settle waits until the access log's size has stayed the same for 300 ms, or 5 s have passed.
func (p authProxy) settle(t *testing.T) {
	t.Helper()
	size := func() int64 {
		fi, err := os.Stat(p.log)
		require.NoError(t, err)
		return fi.Size()
	}
	last, since := size(), time.Now()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if n := size(); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= 300*time.Millisecond {
			return
		}
	}
}

// call sends one JSON request to the sidecar, with auth as its Authorization header unless empty.
func call(t *testing.T, method, url, auth, body string) (int, http.Header, []byte) {
	t.Helper()
	return send(t, method, url, "application/json", auth, body)
}

// send sends one request (a body of contentType unless empty, auth unless empty) and reads the answer whole.
func send(t *testing.T, method, url, contentType, auth, body string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, res.Header, b
}

// TestSecurityBehindAuthProxy runs the sidecar with the real model against the real node behind a real
// authenticating proxy (nginx, scripts/authproxy.sh). The sidecar's only configured credentials are the
// proxy's service user, for its own work (index check, ingest, readiness); callers' searches carry the
// callers' own credentials:
//   - without credentials a caller gets 401 with WWW-Authenticate and no data, on /v1/search and on the
//     drop-in /{index}/_search: the service credentials were not used for it;
//   - with Basic and with ApiKey a caller gets reranked results, and the proxy saw the caller's identity;
//   - /v1/ingest needs the write token (401 without, 200 with), and writes as the service user;
//   - ingest keeps what is stored: a re-sent seen document stays seen; the model's seen corpus applies;
//     a different document under a taken docid is refused in the 207 report, replace=true overwrites.
func TestSecurityBehindAuthProxy(t *testing.T) {
	if os.Getenv("ICICLE_ES_URL") == "" || os.Getenv("ICICLE_ORT_LIB") == "" {
		testenv.Missing(t, "ICICLE_ES_URL and ICICLE_ORT_LIB must be set (scripts/test.sh sets both)")
	}
	proxy := newAuthProxy(t)
	require.NoError(t, ort.Init(os.Getenv("ICICLE_ORT_LIB")))
	t.Cleanup(func() { _ = ort.Shutdown() })
	lm, err := loader.Open(defaultModelDir(), loader.Options{Runtime: ort.Options{Threads: 2}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lm.Close() })

	index := fmt.Sprintf("icicle-sec-%d", time.Now().UnixNano())
	es, err := adapter.New(adapter.Options{Addresses: []string{proxy.url}, Index: index,
		Username: proxy.serviceUser, Password: proxy.servicePassword}, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = http.DefaultClient.Do(mustReq(t, http.MethodDelete, os.Getenv("ICICLE_ES_URL")+"/"+index))
		_ = es.Close()
	})
	require.NoError(t, es.EnsureIndex(t.Context()), "the sidecar's own work, with the service credentials")

	const writeToken = "integration-write-token-0123456789"
	model := plugin.NewSwapper(plugin.LoadedModel{Reader: rank.NewICICLE(lm.Engine, inference.Options{BeamWidth: 10}, false),
		Seen: lm.Seen, Info: plugin.ModelInfo{Name: lm.Manifest.Name, SeenDocIDs: len(lm.Seen)}}, nil, nil)
	srv := newSidecar(es, nil, sidecarOptions{Swapper: model, MaxBodyBytes: 4 << 20, RequestTimeout: 30 * time.Second,
		ESBudgetFraction: 0.3, MaxQueryChars: 1024, MaxHits: 1000, MaxCandidates: 100, Decode: inference.Options{BeamWidth: 10},
		MaxInflight: 1, QueueSize: 4, MinTopScore: -1e9, Policy: "model", Model: plugin.ModelInfo{Name: lm.Manifest.Name},
		Ingester: es, WriteToken: writeToken, CallerCredentials: plugin.CallerPassthrough})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	// The corpus: 3 documents of the model's seen corpus and 30 others, none with "seen" in the record.
	isSeen := map[string]bool{}
	for _, d := range lm.Seen {
		isSeen[d] = true
	}
	r, err := adapter.OpenCorpus(filepath.Join("..", "data", "nq_qed", "corpus.jsonl.gz"), adapter.CorpusLimits{})
	require.NoError(t, err)
	var seenDocs, newDocs []adapter.Doc
	for d := range r.All() {
		switch {
		case isSeen[d.DocID] && len(seenDocs) < 3:
			seenDocs = append(seenDocs, d)
		case !isSeen[d.DocID] && len(newDocs) < 30:
			newDocs = append(newDocs, d)
		}
		if len(seenDocs) == 3 && len(newDocs) == 30 {
			break
		}
	}
	require.NoError(t, r.Close())
	require.Len(t, seenDocs, 3)
	line := func(d adapter.Doc, extra string) string {
		b, err := json.Marshal(map[string]string{"docid": d.DocID, "title": d.Title, "text": d.Text})
		require.NoError(t, err)
		if extra != "" {
			b = append(b[:len(b)-1], []byte(","+extra+"}")...)
		}
		return string(b) + "\n"
	}
	var body strings.Builder
	for _, d := range append(append([]adapter.Doc{}, seenDocs...), newDocs...) {
		body.WriteString(line(d, ""))
	}
	ingestURL := hs.URL + "/v1/ingest?refresh=true"
	storedDoc := func(docid string) map[string]any {
		req := mustReq(t, http.MethodGet, proxy.url+"/"+index+"/_doc/"+adapter.DocumentID(docid))
		req.SetBasicAuth(proxy.serviceUser, proxy.servicePassword)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		var v struct {
			Source map[string]any `json:"_source"`
		}
		require.NoError(t, json.NewDecoder(res.Body).Decode(&v))
		return v.Source
	}

	t.Run("ingest needs the write token", func(t *testing.T) {
		code, hdr, _ := call(t, http.MethodPost, ingestURL, "", body.String())
		require.Equal(t, http.StatusUnauthorized, code)
		require.Equal(t, `Bearer realm="icicle-write"`, hdr.Get("WWW-Authenticate"))
		code, _, _ = call(t, http.MethodPost, ingestURL, proxy.basic(), body.String())
		require.Equal(t, http.StatusUnauthorized, code, "Elasticsearch credentials are not the write key")
		code, _, b := call(t, http.MethodPost, ingestURL, "Bearer "+writeToken, body.String())
		require.Equal(t, http.StatusOK, code, string(b))
		var rep plugin.IngestResponse
		require.NoError(t, json.Unmarshal(b, &rep))
		require.Equal(t, 33, rep.Indexed)
		n, err := es.SeenCount(t.Context())
		require.NoError(t, err)
		require.Equal(t, 3, n, "the serving model's seen corpus marks its documents seen, as the ingest command does")
	})

	t.Run("a re-sent seen document stays seen", func(t *testing.T) {
		d := newDocs[0] // not in the model's seen corpus: only the stored flag can keep it seen
		code, _, b := call(t, http.MethodPost, ingestURL, "Bearer "+writeToken, line(d, `"seen":true`))
		require.Equal(t, http.StatusOK, code, string(b))
		require.Equal(t, true, storedDoc(d.DocID)["seen"])
		code, _, b = call(t, http.MethodPost, ingestURL, "Bearer "+writeToken, line(d, ""))
		require.Equal(t, http.StatusOK, code, string(b))
		require.Contains(t, string(b), `"unchanged":1`, "stored as sent, the seen flag kept: not written again")
		require.Equal(t, true, storedDoc(d.DocID)["seen"], "re-sent without \"seen\": still seen")
		code, _, b = call(t, http.MethodPost, ingestURL, "Bearer "+writeToken, line(d, `"seen":false`))
		require.Equal(t, http.StatusOK, code, string(b))
		require.Equal(t, false, storedDoc(d.DocID)["seen"], "the request sets it: the request wins")
	})

	t.Run("a different document under a taken docid is refused, replace overwrites", func(t *testing.T) {
		d := seenDocs[0]
		other := adapter.Doc{DocID: d.DocID, Title: d.Title, Text: "Another passage that happens to share this title."}
		code, _, b := call(t, http.MethodPost, ingestURL, "Bearer "+writeToken, line(other, ""))
		require.Equal(t, http.StatusMultiStatus, code, string(b))
		var rep plugin.IngestResponse
		require.NoError(t, json.Unmarshal(b, &rep))
		require.Len(t, rep.Failed, 1)
		require.Equal(t, d.DocID, rep.Failed[0].DocID)
		require.True(t, strings.HasPrefix(rep.Failed[0].Reason, adapter.ReasonDocIDTaken), rep.Failed[0].Reason)
		require.False(t, rep.Failed[0].Retryable)
		require.Equal(t, d.Text, storedDoc(d.DocID)["text"], "the stored document is untouched")

		code, _, b = call(t, http.MethodPost, ingestURL+"&replace=true", "Bearer "+writeToken, line(other, ""))
		require.Equal(t, http.StatusOK, code, string(b))
		got := storedDoc(d.DocID)
		require.Equal(t, other.Text, got["text"])
		require.Equal(t, true, got["seen"], "replaced, still seen")
		// Put the original back for the searches below.
		code, _, b = call(t, http.MethodPost, ingestURL+"&replace=true", "Bearer "+writeToken, line(d, ""))
		require.Equal(t, http.StatusOK, code, string(b))
	})

	query := newDocs[1].Title
	searchBody, err := json.Marshal(map[string]any{"query": query, "size": 5})
	require.NoError(t, err)
	dropinBody, err := json.Marshal(map[string]any{"query": map[string]any{"match": map[string]any{"text": query}}, "size": 5})
	require.NoError(t, err)

	t.Run("a caller without credentials gets 401 and no data", func(t *testing.T) {
		code, hdr, b := call(t, http.MethodPost, hs.URL+"/v1/search", "", string(searchBody))
		require.Equal(t, http.StatusUnauthorized, code, string(b))
		require.Contains(t, hdr.Values("WWW-Authenticate"), "ApiKey", "the cluster's challenge is passed on")
		require.NotContains(t, string(b), `"results"`)
		require.NotContains(t, string(b), query)

		code, _, b = call(t, http.MethodPost, hs.URL+"/"+index+"/_search", "", string(dropinBody))
		require.Equal(t, http.StatusUnauthorized, code, string(b))
		require.Contains(t, string(b), "security_exception")
		require.NotContains(t, string(b), `"hits"`)

		code, _, b = call(t, http.MethodGet, hs.URL+"/"+index+"/_search?q=text:"+strings.Fields(query)[0], "", "")
		require.Equal(t, http.StatusUnauthorized, code, string(b))
		require.NotContains(t, string(b), `"hits"`)

		code, _, b = call(t, http.MethodPost, hs.URL+"/v1/search", "Basic "+base64.StdEncoding.EncodeToString([]byte(proxy.user+":wrong")), string(searchBody))
		require.Equal(t, http.StatusUnauthorized, code, "a wrong password: %s", b)
	})

	for _, c := range []struct{ name, auth, who string }{
		{"basic", proxy.basic(), "basic " + proxy.user + " "},
		{"api key", "ApiKey " + proxy.apiKey, "apikey - "},
	} {
		t.Run("a caller with "+c.name+" gets reranked results", func(t *testing.T) {
			_, offset := proxy.logLines(t, 0)
			code, _, b := call(t, http.MethodPost, hs.URL+"/v1/search", c.auth, string(searchBody))
			require.Equal(t, http.StatusOK, code, string(b))
			var resp plugin.Response
			require.NoError(t, json.Unmarshal(b, &resp))
			require.Equal(t, plugin.ModeReranked, resp.Mode, "fallback %q", resp.FallbackReason)
			require.NotEmpty(t, resp.Results)

			code, _, b = call(t, http.MethodPost, hs.URL+"/"+index+"/_search", c.auth, string(dropinBody))
			require.Equal(t, http.StatusOK, code, string(b))
			var dr struct {
				Hits struct {
					Hits []json.RawMessage `json:"hits"`
				} `json:"hits"`
				Icicle dropin.Info `json:"icicle"`
			}
			require.NoError(t, json.Unmarshal(b, &dr))
			require.NotEmpty(t, dr.Hits.Hits)
			require.Equal(t, plugin.ModeReranked, dr.Icicle.Mode, "reason %q", dr.Icicle.Reason)

			// The proxy saw the caller, not the service user, on the caller's searches.
			lines, _ := proxy.logLines(t, offset)
			var searches int
			for _, l := range lines {
				if strings.Contains(l, "/"+index+"/_search") && !strings.HasPrefix(l, "basic "+proxy.serviceUser+" ") {
					require.True(t, strings.HasPrefix(l, c.who), "caller's search as someone else: %s", l)
					searches++
				}
			}
			require.GreaterOrEqual(t, searches, 2, "both searches reached the proxy as the caller: %q", lines)
		})
	}

	t.Run("the sidecar's own work uses the service credentials", func(t *testing.T) {
		_, offset := proxy.logLines(t, 0)
		code, _, b := call(t, http.MethodGet, hs.URL+"/readyz", "", "")
		require.Equal(t, http.StatusOK, code, string(b))
		require.Contains(t, string(b), `"ready":true`)
		lines, _ := proxy.logLines(t, offset)
		require.NotEmpty(t, lines)
		for _, l := range lines {
			require.True(t, strings.HasPrefix(l, "basic "+proxy.serviceUser+" "), "readiness as someone else: %s", l)
		}
	})
}
