package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/internal/compress"
)

// fakeIngester records what the handler sends; ingest decides the outcome. A nil ingest writes every
// document as new.
type fakeIngester struct {
	ingest func(ctx context.Context, docs []adapter.Doc) (adapter.IngestReport, error)
	got    []adapter.Doc
	opts   adapter.IngestOptions
}

func (f *fakeIngester) Ingest(ctx context.Context, docs iter.Seq[adapter.Doc], opts adapter.IngestOptions) (adapter.IngestReport, error) {
	f.opts, f.got = opts, nil
	for d := range docs {
		f.got = append(f.got, d)
	}
	if f.ingest == nil {
		return adapter.IngestReport{Indexed: len(f.got)}, nil
	}
	return f.ingest(ctx, f.got)
}

func newIngestServer(t *testing.T, ing Ingester, maxBody int64) *Server {
	t.Helper()
	return newTestServer(t, &fakeSearcher{}, &fakeReranker{}, func(o *testOptions) {
		o.Ingester = ing
		if maxBody > 0 {
			o.MaxBodyBytes = maxBody
		}
	})
}

func postIngest(t *testing.T, s *Server, query, body string) (*httptest.ResponseRecorder, IngestResponse) {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/ingest"+query, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testWriteToken)
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	var resp IngestResponse
	if w.Code == http.StatusOK || w.Code == http.StatusMultiStatus || w.Code == http.StatusServiceUnavailable {
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &resp), w.Body.String())
	}
	return w, resp
}

const (
	lineAlpha = `{"docid": "Alpha", "title": "Alpha", "text": "alpha text one two three", "summary": "given"}`
	lineBeta  = `{"docid": "Beta", "title": "Beta", "text": "  beta\ttext  words ", "seen": true}`
	lineGamma = `{"_id": "Gamma", "title": "Gamma", "text": "gamma text", "seen": false, "extra": 1}`
)

func TestIngestHandlerAccepts(t *testing.T) {
	want := []adapter.Doc{
		// Alpha says nothing about seen: the stored flag is kept (KeepSeen); Beta and Gamma say.
		{DocID: "Alpha", Title: "Alpha", Text: "alpha text one two three", Summary: "given", KeepSeen: true},
		{DocID: "Beta", Title: "Beta", Text: "  beta\ttext  words ", Summary: compress.Extractive("  beta\ttext  words "), Seen: true},
		{DocID: "Gamma", Title: "Gamma", Text: "gamma text", Summary: "gamma text"},
	}
	for _, tt := range []struct{ name, body string }{
		{"jsonl", lineAlpha + "\n" + lineBeta + "\r\n\n" + lineGamma},
		{"jsonl with final newline", lineAlpha + "\n" + lineBeta + "\n" + lineGamma + "\n"},
		{"json array", "[" + lineAlpha + ",\n  " + lineBeta + "," + lineGamma + "]\n"},
		{"json array with a byte order mark", "\xef\xbb\xbf [" + lineAlpha + "," + lineBeta + "," + lineGamma + "]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ing := &fakeIngester{}
			w, resp := postIngest(t, newIngestServer(t, ing, 0), "", tt.body)
			require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			require.Equal(t, want, ing.got)
			require.False(t, ing.opts.Refresh)
			require.True(t, ing.opts.KeepStored, "HTTP ingest reads what is stored before writing")
			require.False(t, ing.opts.Replace)
			require.Equal(t, 3, resp.Indexed)
			require.Empty(t, resp.Failed)
			require.NotNil(t, resp.Failed, "an empty list, not null")
			require.Empty(t, resp.Rejected)
			require.Equal(t, 2, resp.SummariesComputed)
			require.Equal(t, compress.Name, resp.SummaryCompressor)
			require.NotEmpty(t, resp.RequestID)
		})
	}
}

func TestIngestHandlerPartial(t *testing.T) {
	body := strings.Join([]string{
		lineAlpha,                           // 1 ok
		`{"docid": "NoTitle", "text": "x"}`, // 2 missing title
		`not json`,                          // 3
		lineBeta,                            // 4 ok, seen
		`{"docid": "Alpha", "title": "A", "text": "t"}`,                // 5 duplicate
		`{"docid": "Odd", "title": "Odd", "text": "t", "seen": "yes"}`, // 6 seen not a boolean
		`7`,       // 7 not an object
		lineGamma, // 8 ok
		`{"docid": "Refused", "title": "Refused", "text": "t"}`, // 9 ok, refused by ES
		`{"docid": "Shed", "title": "Shed", "text": "t"}`,       // 10 ok, not written (outage)
	}, "\n")
	ing := &fakeIngester{ingest: func(_ context.Context, docs []adapter.Doc) (adapter.IngestReport, error) {
		return adapter.IngestReport{Indexed: 1, Updated: 2, Failed: []adapter.Failure{
			{DocID: "Refused", Reason: "document_parsing_exception: [1:55] failed to parse field [title]"},
			{DocID: "Shed", Reason: "flush: dial tcp 10.1.2.3:9200: connect: connection refused", Retryable: true},
		}}, nil
	}}
	w, resp := postIngest(t, newIngestServer(t, ing, 0), "?refresh=true", body)
	require.Equal(t, http.StatusMultiStatus, w.Code, w.Body.String())
	require.True(t, ing.opts.RefreshAtEnd, "refresh=true: one refresh after the writes")
	require.False(t, ing.opts.Refresh)
	require.Equal(t, []string{"Alpha", "Beta", "Gamma", "Refused", "Shed"}, docIDsOf(ing.got))
	require.Equal(t, 1, resp.Indexed)
	require.Equal(t, 2, resp.Updated)
	require.Equal(t, []IngestFailure{
		{DocID: "Refused", Reason: "document_parsing_exception: [1:55] failed to parse field [title]"},
		{DocID: "Shed", Reason: reasonUnavailable, Retryable: true},
	}, resp.Failed)
	require.NotContains(t, w.Body.String(), "10.1.2.3", "transport errors are logged, not echoed")
	lines := make([]int, len(resp.Rejected))
	for i, r := range resp.Rejected {
		lines[i] = r.Line
	}
	require.Equal(t, []int{2, 3, 5, 6, 7}, lines, "%+v", resp.Rejected)
	require.Equal(t, IngestRejection{Line: 2, DocID: "NoTitle", Reason: "missing title"}, resp.Rejected[0])
	require.Contains(t, resp.Rejected[1].Reason, "invalid JSON")
	require.Contains(t, resp.Rejected[2].Reason, "duplicate docid, first on line 1")
	require.Equal(t, IngestRejection{Line: 6, DocID: "Odd", Reason: `field "seen" is "yes", want true or false`}, resp.Rejected[3])
	require.Equal(t, "a JSON number, want an object", resp.Rejected[4].Reason)
	require.Equal(t, 10, resp.LinesRead)
	// Every line is accounted for: accepted (written or failed) or rejected.
	require.Equal(t, 10, resp.Indexed+resp.Updated+resp.Unchanged+len(resp.Failed)+len(resp.Rejected))
}

func TestIngestHandlerArrayRejectionsNameElements(t *testing.T) {
	ing := &fakeIngester{}
	w, resp := postIngest(t, newIngestServer(t, ing, 0), "", `[`+lineAlpha+`, {"docid": "x"}, null, `+lineBeta+`]`)
	require.Equal(t, http.StatusMultiStatus, w.Code, w.Body.String())
	require.Equal(t, []string{"Alpha", "Beta"}, docIDsOf(ing.got))
	require.Equal(t, []IngestRejection{{Line: 2, DocID: "x", Reason: "missing title"}, {Line: 3, Reason: "missing docid"}}, resp.Rejected)
}

func TestIngestHandlerErrors(t *testing.T) {
	fail := func(err error) *fakeIngester {
		return &fakeIngester{ingest: func(context.Context, []adapter.Doc) (adapter.IngestReport, error) {
			return adapter.IngestReport{}, err
		}}
	}
	tests := []struct {
		name      string
		ing       Ingester
		query     string
		body      string
		maxBody   int64
		status    int
		field     string // of the 400
		errSubstr string
		noIngest  bool
	}{
		{name: "disabled", ing: nil, body: lineAlpha, status: http.StatusNotFound, errSubstr: "disabled"},
		{name: "empty body", body: "", status: http.StatusBadRequest, field: "body", errSubstr: "empty"},
		{name: "blank body", body: " \n\r\n\t", status: http.StatusBadRequest, field: "body", errSubstr: "empty"},
		{name: "empty array", body: " [ ] ", status: http.StatusBadRequest, field: "body", errSubstr: "no documents"},
		{name: "truncated array", body: "[" + lineAlpha + "," + lineBeta, status: http.StatusBadRequest, field: "body", errSubstr: "invalid JSON"},
		{name: "broken element", body: "[" + lineAlpha + ", {\"docid\": ]", status: http.StatusBadRequest, field: "body[1]", errSubstr: "invalid JSON"},
		{name: "data after the array", body: "[" + lineAlpha + "] {}", status: http.StatusBadRequest, field: "body", errSubstr: "trailing data"},
		{name: "bad refresh", query: "?refresh=soon", body: lineAlpha, status: http.StatusBadRequest, field: "refresh"},
		{name: "too large", body: strings.Repeat(lineAlpha+"\n", 10), maxBody: 100, status: http.StatusRequestEntityTooLarge},
		{name: "client went away", ing: fail(fmt.Errorf("ingest: %w", context.Canceled)), body: lineAlpha, status: statusClientClosed},
		{name: "index missing is a server fault", ing: fail(fmt.Errorf("ingest %q: %w", "icicle-docs", adapter.ErrIndexMissing)),
			body: lineAlpha, status: http.StatusInternalServerError, errSubstr: "internal error"},
		{name: "a report that loses a document is an error, not a success",
			ing: &fakeIngester{ingest: func(context.Context, []adapter.Doc) (adapter.IngestReport, error) {
				return adapter.IngestReport{Indexed: 1}, nil
			}},
			body: lineAlpha + "\n" + lineBeta, status: http.StatusInternalServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ing := tt.ing
			if ing == nil && tt.name != "disabled" {
				ing = &fakeIngester{}
			}
			w, _ := postIngest(t, newIngestServer(t, ing, tt.maxBody), tt.query, tt.body)
			require.Equal(t, tt.status, w.Code, w.Body.String())
			var eb ErrorBody
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &eb), w.Body.String())
			require.Equal(t, tt.field, eb.Field)
			require.Contains(t, eb.Error, tt.errSubstr)
			if f, ok := ing.(*fakeIngester); ok && tt.status == http.StatusBadRequest {
				require.Empty(t, f.got, "nothing is written from a body that is refused")
			}
		})
	}
}

func TestIngestHandlerUnavailable(t *testing.T) {
	// The cluster goes away after the first bulk request: Alpha written, Beta's request failed, Gamma never read.
	ing := &fakeIngester{}
	ing.ingest = func(context.Context, []adapter.Doc) (adapter.IngestReport, error) {
		return adapter.IngestReport{Indexed: 1, Failed: []adapter.Failure{
			{DocID: "Beta", Reason: "flush: EOF", Retryable: true},
		}}, fmt.Errorf("ingest %q: %w: flush: EOF", "icicle-docs", adapter.ErrUnavailable)
	}
	w, resp := postIngest(t, newIngestServer(t, ing, 0), "", lineAlpha+"\n"+lineBeta+"\n"+lineGamma)
	require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
	require.Equal(t, "1", w.Header().Get("Retry-After"))
	require.Contains(t, resp.Error, "elasticsearch unavailable")
	require.Contains(t, resp.Error, "resend the whole body")
	require.NotContains(t, w.Body.String(), "EOF", "internal error text stays in the log")
	require.Equal(t, 1, resp.Indexed)
	require.Equal(t, []IngestFailure{{DocID: "Beta", Reason: reasonUnavailable, Retryable: true}}, resp.Failed)
	require.Equal(t, 3, resp.LinesRead, "the fake drew everything; the adapter stops drawing at the outage")
}

func docIDsOf(docs []adapter.Doc) []string {
	out := make([]string, len(docs))
	for i, d := range docs {
		out[i] = d.DocID
	}
	return out
}

// fakeCompressor summarises as "summary of <title>" unless compress says otherwise; it records the titles
// it was asked for.
type fakeCompressor struct {
	compress func(ctx context.Context, title, text string) (string, error)
	mu       sync.Mutex
	titles   []string
}

func (*fakeCompressor) ID() string { return "fake-compressor-v1" }

func (f *fakeCompressor) Compress(ctx context.Context, title, text string) (string, error) {
	f.mu.Lock()
	f.titles = append(f.titles, title)
	f.mu.Unlock()
	if f.compress != nil {
		return f.compress(ctx, title, text)
	}
	return "summary of " + title, nil
}

func newCompressorServer(t *testing.T, ing Ingester, comp compress.Compressor, workers int) *Server {
	t.Helper()
	return newTestServer(t, &fakeSearcher{}, &fakeReranker{}, func(o *testOptions) {
		o.Ingester, o.Compressor, o.CompressWorkers = ing, comp, workers
	})
}

func TestIngestHandlerUsesTheCompressor(t *testing.T) {
	for _, workers := range []int{1, 3} {
		t.Run(fmt.Sprint("workers ", workers), func(t *testing.T) {
			ing, comp := &fakeIngester{}, &fakeCompressor{}
			w, resp := postIngest(t, newCompressorServer(t, ing, comp, workers), "", lineAlpha+"\n"+lineBeta+"\n"+lineGamma)
			require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			require.Equal(t, []adapter.Doc{
				{DocID: "Alpha", Title: "Alpha", Text: "alpha text one two three", Summary: "given", KeepSeen: true},
				{DocID: "Beta", Title: "Beta", Text: "  beta\ttext  words ", Summary: "summary of Beta", Seen: true},
				{DocID: "Gamma", Title: "Gamma", Text: "gamma text", Summary: "summary of Gamma"},
			}, ing.got, "in body order; a given summary is kept")
			require.ElementsMatch(t, []string{"Beta", "Gamma"}, comp.titles, "only documents without a summary")
			require.Equal(t, 2, resp.SummariesComputed)
			require.Equal(t, "fake-compressor-v1", resp.SummaryCompressor)
		})
	}
	t.Run("nil is the extractive default", func(t *testing.T) {
		ing := &fakeIngester{}
		_, resp := postIngest(t, newCompressorServer(t, ing, nil, 0), "", lineBeta)
		require.Equal(t, compress.Extractive("  beta\ttext  words "), ing.got[0].Summary)
		require.Equal(t, compress.Name, resp.SummaryCompressor)
	})
}

// TestIngestHandlerCompressorFails: the first document the compressor fails on stops the ingestion, as
// in the ingest command. What came before is written; that document is listed as failed (retryable
// unless the compressor refused it for good), and so is any document read ahead of it; later lines are
// not read. The compressor's error text stays in the log.
func TestIngestHandlerCompressorFails(t *testing.T) {
	lineDelta := `{"docid": "Delta", "title": "Delta", "text": "delta text"}`
	body := lineAlpha + "\n" + lineBeta + "\n" + lineGamma + "\n" + lineDelta
	for _, tt := range []struct {
		name      string
		err       error
		workers   int
		retryable bool
		reason    string
	}{
		{"endpoint down", errors.New("post http://10.9.8.7/v1/chat/completions: connection refused"), 1, true, reasonCompressorDown},
		{"endpoint overloaded", &compress.StatusError{Code: 503, Body: "busy"}, 1, true, reasonCompressorDown},
		{"document refused", &compress.StatusError{Code: 400, Body: "context length exceeded at 10.9.8.7"}, 1, false, reasonCompressorRefused},
		{"unusable answer", &compress.ResponseError{Field: "choices[0].message.content", Msg: "empty at 10.9.8.7"}, 1, false, reasonCompressorRefused},
		{"endpoint down, documents read ahead", errors.New("connection refused at 10.9.8.7"), 3, true, reasonCompressorDown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ing := &fakeIngester{}
			comp := &fakeCompressor{compress: func(_ context.Context, title, _ string) (string, error) {
				if title == "Beta" {
					return "", tt.err
				}
				return "summary of " + title, nil
			}}
			w, resp := postIngest(t, newCompressorServer(t, ing, comp, tt.workers), "", body)
			require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
			require.Equal(t, "1", w.Header().Get("Retry-After"))
			require.Contains(t, resp.Error, "summary compressor unavailable")
			require.NotContains(t, w.Body.String(), "10.9.8.7", "internal error text stays in the log")
			require.Equal(t, []string{"Alpha"}, docIDsOf(ing.got), "what came before the failure is written")
			require.Equal(t, 1, resp.Indexed)
			require.NotEmpty(t, resp.Failed)
			require.Equal(t, IngestFailure{DocID: "Beta", Reason: tt.reason, Retryable: tt.retryable}, resp.Failed[0])
			for _, f := range resp.Failed[1:] {
				require.Equal(t, IngestFailure{DocID: f.DocID, Reason: reasonStopped, Retryable: true}, f, "read ahead, not sent")
			}
			if tt.workers <= 1 {
				require.Equal(t, 2, resp.LinesRead, "nothing is read after the failed document")
			}
			require.Equal(t, resp.LinesRead, resp.Indexed+resp.Updated+resp.Unchanged+len(resp.Failed)+len(resp.Rejected),
				"every line read is accounted for: %+v", resp)
		})
	}
	t.Run("client gone while compressing", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		comp := &fakeCompressor{compress: func(ctx context.Context, _, _ string) (string, error) {
			cancel()
			return "", ctx.Err()
		}}
		s := newCompressorServer(t, &fakeIngester{}, comp, 1)
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/ingest", strings.NewReader(lineBeta))
		req.Header.Set("Authorization", "Bearer "+testWriteToken)
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		require.Equal(t, statusClientClosed, w.Code, w.Body.String())
	})
}

// TestIngestHandlerAppliesTheModelsSeenCorpus: a record without "seen" whose docid the serving model was
// trained on is written seen, as the ingest command does with seen_docids.txt; "seen" in the record
// wins; others keep the stored flag. replace=true asks the adapter to overwrite different texts.
func TestIngestHandlerAppliesTheModelsSeenCorpus(t *testing.T) {
	ing := &fakeIngester{}
	sw := NewSwapper(LoadedModel{Reader: icicle(&fakeReranker{}), Info: ModelInfo{Name: "m"}, Seen: []string{"Alpha", "Gamma"}}, nil, nil)
	var opts testOptions
	newTestServer(t, &fakeSearcher{}, &fakeReranker{}, func(o *testOptions) { o.Ingester = ing; opts = *o })
	s := newServer(&fakeSearcher{}, sw, opts)
	lineDelta := `{"docid": "Delta", "title": "Delta", "text": "delta text", "summary": "d"}`
	w, _ := postIngest(t, s, "?replace=true", lineAlpha+"\n"+lineBeta+"\n"+lineGamma+"\n"+lineDelta)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	got := map[string][2]bool{}
	for _, d := range ing.got {
		got[d.DocID] = [2]bool{d.Seen, d.KeepSeen}
	}
	require.Equal(t, map[string][2]bool{
		"Alpha": {true, true},   // in the model's seen corpus, no "seen" in the record
		"Beta":  {true, false},  // "seen": true
		"Gamma": {false, false}, // "seen": false wins over the model's corpus
		"Delta": {false, true},  // neither: the stored flag stays
	}, got)
	require.True(t, ing.opts.Replace)

	w, _ = postIngest(t, s, "?replace=maybe", lineAlpha)
	require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
	require.Contains(t, w.Body.String(), `"field":"replace"`)
}

// TestIngestHandlerEmbeds: with the first stage's encoder (Options.Embed) every written document is given a
// vector by the ingester, and the answer says how many and by which encoder; while other ingests hold every
// embedding slot the request is a 503 with Retry-After before its body is read.
func TestIngestHandlerEmbeds(t *testing.T) {
	release := make(chan struct{})
	embedding := make(chan struct{}, 1)
	embed := func(_ context.Context, docs []adapter.Doc) ([][]float32, error) {
		return make([][]float32, len(docs)), nil
	}
	ing := &fakeIngester{ingest: func(ctx context.Context, docs []adapter.Doc) (adapter.IngestReport, error) {
		select {
		case embedding <- struct{}{}:
			<-release // the first request holds the encoder until the test lets it go
		default:
		}
		return adapter.IngestReport{Indexed: len(docs), Embedded: len(docs)}, nil
	}}
	s := newTestServer(t, &fakeSearcher{}, &fakeReranker{}, func(o *testOptions) {
		o.Ingester, o.Embed, o.VectorModel = ing, embed, "fake-encoder"
	})
	first := make(chan IngestResponse)
	go func() {
		_, resp := postIngest(t, s, "", lineAlpha+"\n"+lineBeta)
		first <- resp
	}()
	<-embedding
	w, _ := postIngest(t, s, "", lineGamma)
	require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
	require.Equal(t, "1", w.Header().Get("Retry-After"))
	require.Contains(t, w.Body.String(), "encoder")
	close(release)
	resp := <-first
	require.Equal(t, 2, resp.Indexed)
	require.Equal(t, 2, resp.Embedded)
	require.Equal(t, "fake-encoder", resp.VectorModel)
	require.NotNil(t, ing.opts.Embed, "the ingester embeds with the sidecar's encoder")
	require.Equal(t, "fake-encoder", ing.opts.VectorModel)

	w, resp = postIngest(t, s, "", lineGamma)
	require.Equal(t, http.StatusOK, w.Code, "the slot is free again: %s", w.Body.String())
	require.Equal(t, 1, resp.Embedded)
}

// refresh=true asks for one refresh after the writes (it holds on an index at refresh_interval -1, where
// each bulk request's wait_for would wait until the budget), wait_for for the wait, as Elasticsearch reads them.
func TestIngestRefreshModes(t *testing.T) {
	for query, want := range map[string][2]bool{
		"": {false, false}, "?refresh=false": {false, false}, "?refresh=true": {false, true}, "?refresh=wait_for": {true, false},
	} {
		ing := &fakeIngester{}
		w, _ := postIngest(t, newIngestServer(t, ing, 0), query, `{"docid": "A", "title": "A", "text": "t"}`)
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		require.Equal(t, want, [2]bool{ing.opts.Refresh, ing.opts.RefreshAtEnd}, "query %q: Refresh, RefreshAtEnd", query)
	}
}
