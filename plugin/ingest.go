package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/dropin"
	"github.com/icicle-search/sidecar/internal/compress"
)

// IngestResponse is the body of POST /v1/ingest (200, 207, and 503 with Error set). Every record of the
// request body is in exactly one place: counted in Indexed, Updated or Unchanged, listed in Failed or Rejected, or,
// only on 503, after LinesRead (not read at all).
type IngestResponse struct {
	RequestID string `json:"request_id"`
	// Indexed counts documents that were new to the index.
	Indexed int `json:"indexed"`
	// Updated counts documents that replaced a stored document with the same docid.
	Updated int `json:"updated"`
	// Unchanged counts documents stored already as sent (title, text, summary, seen flag): not written
	// again, so resending a corpus leaves the index as it was.
	Unchanged int `json:"unchanged"`
	// Failed lists accepted documents that were not written, with the reason.
	Failed []IngestFailure `json:"failed"`
	// Rejected lists records that were not accepted (malformed, missing fields, too large, duplicate
	// docid, "seen" not a boolean), in line order.
	Rejected []IngestRejection `json:"rejected"`
	// SummariesComputed counts written or failed documents without a summary that got one from the
	// server's compressor (Options.Compressor).
	SummariesComputed int `json:"summaries_computed"`
	// LinesRead is how many lines (array elements for a JSON array body) were read. It is the whole body
	// unless Error is set.
	LinesRead int `json:"lines_read"`
	// Error is set only with 503: Elasticsearch, or the compressor that summarises documents sent without
	// a summary, became unavailable and ingestion stopped. The counts say what was done before the stop;
	// lines after LinesRead were not read. Resending the whole body is safe: ingestion is idempotent (a
	// document's _id derives from its docid).
	Error string `json:"error,omitempty"`
	// Embedded counts the written documents that got the first stage's vector from this request (a stored
	// document sent again unchanged keeps its own); VectorModel names the encoder. Without an encoder the
	// documents are written without vectors and VectorModel is absent.
	Embedded    int    `json:"embedded"`
	VectorModel string `json:"vector_model,omitempty"`
	// SummaryCompressor names the compressor of the computed summaries (compress.Compressor.ID).
	SummaryCompressor string  `json:"summary_compressor"`
	TookMS            float64 `json:"took_ms"`
}

// IngestFailure is one accepted document that was not written.
type IngestFailure struct {
	DocID string `json:"docid"`
	// Reason is Elasticsearch's refusal of the document ("document_parsing_exception: ..."), or "not
	// written: elasticsearch unavailable" when the cluster, not the document, was the problem.
	Reason string `json:"reason"`
	// Retryable is true when sending the document again may succeed.
	Retryable bool `json:"retryable"`
}

// IngestRejection is one record of the body that was not accepted.
type IngestRejection struct {
	// Line is the 1-based line of a JSONL body, or the 1-based element of a JSON array body.
	Line   int    `json:"line"`
	DocID  string `json:"docid,omitempty"`
	Reason string `json:"reason"`
}

// reasonUnavailable replaces the transport error text of a retryable failure: a 207 body must not carry
// internal error text either. The original is logged.
const reasonUnavailable = "not written: elasticsearch unavailable"

// errEncoderBusy answers an ingest request that finds every embedding slot taken (Options.EmbedSlots).
var errEncoderBusy = &BusyError{What: "the encoder is embedding other ingested documents; retry"}

// Reasons of the documents a compressor failure left unwritten (the error itself is logged).
const (
	reasonCompressorDown    = "not written: summary compressor unavailable"
	reasonCompressorRefused = "not written: the summary compressor refused the document; send it with a summary"
	reasonStopped           = "not written: ingestion stopped"
)

// compressItem is a document on its way through the compressor, with whether its summary is computed.
type compressItem struct {
	doc      adapter.Doc
	computed bool
}

// ingest serves POST /v1/ingest: a BEIR corpus (JSONL or a JSON array of {docid, title, text, summary?,
// seen?}) bulk-written into the index. Records are parsed and rejected by adapter.CorpusReader, as the
// ingest command does; absent summaries come from Options.Compressor (compress.Lead, the extractive one
// training uses, when nil), as in the ingest command: CompressWorkers documents at a time, in order, and
// the first failure stops the ingestion (503).
func (s *Server) ingest(c *gin.Context) (answer, error) {
	start := time.Now()
	if s.opts.Ingester == nil {
		return answer{}, &offError{"ingestion is disabled on this server"}
	}
	// As Elasticsearch reads it: true refreshes the index once the documents are written (what holds on an
	// index at refresh_interval -1), wait_for waits for a refresh to make them visible.
	var refresh, refreshAtEnd bool
	switch q := c.Query("refresh"); q {
	case "", "false":
	case "true":
		refreshAtEnd = true
	case "wait_for":
		refresh = true
	default:
		return answer{}, &InputError{Field: "refresh", Problem: fmt.Sprintf("%q, want true, wait_for or false", q)}
	}
	var replace bool
	switch q := c.Query("replace"); q {
	case "", "false":
	case "true":
		replace = true
	default:
		return answer{}, &InputError{Field: "replace", Problem: fmt.Sprintf("%q, want true or false", q)}
	}
	// The serving model's seen corpus marks its documents seen, as the ingest command does with the
	// model's seen_docids.txt; a document in neither it nor the request keeps the flag it has stored.
	var modelSeen map[string]bool
	if _, seen, ok := s.servingSeen(); ok {
		modelSeen = make(map[string]bool, len(seen))
		for _, d := range seen {
			modelSeen[d] = true
		}
	}
	// The encoder is shared with the searches: a request that finds it saturated by other ingests is told
	// to come back, rather than queue behind them and slow the searches down.
	if s.opts.Embed != nil {
		select {
		case s.embedSlots <- struct{}{}:
			defer func() { <-s.embedSlots }()
		default:
			return answer{}, errEncoderBusy
		}
	}
	body, err := s.readBody(c)
	if err != nil {
		return answer{}, err
	}
	lines, err := corpusLines(body)
	if err != nil {
		return answer{}, err
	}

	comp := s.opts.Compressor
	if comp == nil {
		comp = compress.Lead{}
	}
	resp := IngestResponse{Failed: []IngestFailure{}, Rejected: []IngestRejection{}, SummaryCompressor: comp.ID(),
		VectorModel: s.opts.VectorModel}
	cr := adapter.NewCorpusReader(bytes.NewReader(lines), adapter.CorpusLimits{})
	cur := lineCursor{buf: lines}
	var (
		seenRejected []adapter.RecordError
		drawn        []string // docids of the accepted records, in order; read ahead of the writes by up to CompressWorkers
		accepted     int      // how many of them went to the Ingester
	)
	// With CompressWorkers > 1, read runs on compress.Apply's goroutine; the handler looks at what it
	// wrote only after Ingest has returned, when that goroutine has ended.
	read := func(yield func(compressItem) bool) {
		for d := range cr.All() {
			n := cr.Lines() // the line d came from: the reader yields right after reading it
			seen, set, problem := seenField(cur.line(n))
			if problem != "" {
				seenRejected = append(seenRejected, adapter.RecordError{Line: n, DocID: d.DocID, Reason: problem})
				continue
			}
			if set {
				d.Seen = seen // the request says: it wins
			} else {
				d.Seen, d.KeepSeen = modelSeen[d.DocID], true
			}
			drawn = append(drawn, d.DocID)
			if !yield(compressItem{doc: d}) {
				return
			}
		}
	}
	// No deadline of our own: every bulk request has the adapter's RequestTimeout, each compression the
	// compressor's, the body is bounded by MaxBodyBytes, and the server's WriteTimeout bounds the exchange.
	ctx := c.Request.Context()
	compressed, compressErr := compress.Apply(ctx, comp, s.opts.CompressWorkers, iter.Seq[compressItem](read),
		func(it *compressItem) (string, string, bool) { return it.doc.Title, it.doc.Text, it.doc.Summary == "" },
		func(it *compressItem, summary string) { it.doc.Summary, it.computed = summary, true })
	docs := func(yield func(adapter.Doc) bool) {
		for it := range compressed {
			accepted++
			if it.computed {
				resp.SummariesComputed++
			}
			if !yield(it.doc) {
				return
			}
		}
	}
	rep, ingestErr := s.opts.Ingester.Ingest(ctx, docs, adapter.IngestOptions{Refresh: refresh, RefreshAtEnd: refreshAtEnd, KeepStored: true, Replace: replace,
		Embed: s.opts.Embed, VectorModel: s.opts.VectorModel})
	resp.Embedded = rep.Embedded
	compErr := compressErr()

	resp.RequestID = requestID(c)
	resp.Indexed, resp.Updated, resp.Unchanged, resp.LinesRead = rep.Indexed, rep.Updated, rep.Unchanged, cr.Lines()
	for _, f := range rep.Failed {
		out := IngestFailure{DocID: f.DocID, Reason: f.Reason, Retryable: f.Retryable}
		if f.Retryable {
			s.log.Warn("ingest: document not written", "request_id", resp.RequestID, "docid", f.DocID, "err", f.Reason)
			out.Reason = reasonUnavailable
		}
		resp.Failed = append(resp.Failed, out)
	}
	// Accepted records that never reached the Ingester: the one the compressor failed on, and those read
	// ahead of it. They were read, so they are accounted for here.
	for i, id := range drawn[min(accepted, len(drawn)):] {
		out := IngestFailure{DocID: id, Reason: reasonStopped, Retryable: true}
		if i == 0 && compErr != nil {
			out.Reason, out.Retryable = reasonCompressorDown, true
			if !compressorRetryable(compErr) {
				out.Reason, out.Retryable = reasonCompressorRefused, false
			}
		}
		resp.Failed = append(resp.Failed, out)
	}
	for _, r := range append(cr.Rejected(), seenRejected...) {
		resp.Rejected = append(resp.Rejected, IngestRejection{Line: r.Line, DocID: r.DocID, Reason: r.Reason})
	}
	slices.SortStableFunc(resp.Rejected, func(a, b IngestRejection) int { return a.Line - b.Line })

	status := http.StatusOK
	switch {
	case (ingestErr != nil || compErr != nil) && ctx.Err() != nil:
		return answer{}, fmt.Errorf("ingest: %w", ctx.Err())
	case errors.Is(ingestErr, adapter.ErrUnavailable):
		// Not writeError's bare 503: part of the body may be written, and the caller should know which.
		s.log.Warn("ingest stopped: elasticsearch unavailable", "request_id", resp.RequestID, "lines_read",
			resp.LinesRead, "indexed", resp.Indexed, "updated", resp.Updated, "unchanged", resp.Unchanged, "failed", len(resp.Failed), "err", ingestErr)
		status = http.StatusServiceUnavailable
		resp.Error = "elasticsearch unavailable: ingestion stopped; resend the whole body (ingestion is idempotent)"
		c.Header("Retry-After", "1")
	case ingestErr != nil:
		// Index missing or with the wrong mapping, adapter closed: the server is misconfigured.
		return answer{}, fmt.Errorf("ingest: %w", ingestErr)
	case rep.Total() != accepted:
		// The Ingester broke its contract; say so loudly rather than let documents vanish.
		return answer{}, fmt.Errorf("ingest: report accounts for %d of %d accepted documents", rep.Total(), accepted)
	case compErr != nil:
		// As an Elasticsearch outage: what came before is written, the rest of the body is not read.
		s.log.Warn("ingest stopped: summary compressor failed", "request_id", resp.RequestID, "compressor", comp.ID(),
			"lines_read", resp.LinesRead, "indexed", resp.Indexed, "updated", resp.Updated, "unchanged", resp.Unchanged, "failed", len(resp.Failed), "err", compErr)
		status = http.StatusServiceUnavailable
		resp.Error = "summary compressor unavailable: ingestion stopped; resend the whole body (ingestion is idempotent)"
		c.Header("Retry-After", "1")
	case len(resp.Failed) > 0 || len(resp.Rejected) > 0:
		status = http.StatusMultiStatus
	}
	resp.TookMS = ms(time.Since(start))
	s.log.Info("ingested", "request_id", resp.RequestID, "lines_read", resp.LinesRead, "indexed", resp.Indexed,
		"updated", resp.Updated, "unchanged", resp.Unchanged, "failed", len(resp.Failed), "rejected", len(resp.Rejected),
		"summaries_computed", resp.SummariesComputed, "took_ms", resp.TookMS)
	return answer{status: status, body: resp, mode: "ingest"}, nil
}

// compressorRetryable reports whether a compressor's error may go away on its own (the endpoint down or
// overloaded) rather than being its answer for this document (a 4xx, an unusable completion).
func compressorRetryable(err error) bool {
	var se *compress.StatusError
	if errors.As(err, &se) {
		return se.Code == http.StatusRequestTimeout || se.Code == http.StatusTooManyRequests || se.Code >= 500
	}
	var re *compress.ResponseError
	return !errors.As(err, &re)
}

// corpusLines returns the body as JSONL for adapter.CorpusReader: a JSONL body as it is, a JSON array as
// one compacted element per line, so that line n is element n. A body that is neither is an *InputError.
func corpusLines(body []byte) ([]byte, error) {
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark, as some editors write
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return nil, &InputError{Field: "body", Problem: "empty: want JSONL (one document per line) or a JSON array of documents"}
	}
	if trimmed[0] != '[' {
		return body, nil
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if _, err := dec.Token(); err != nil {
		return nil, &InputError{Field: "body", Problem: "invalid JSON: " + err.Error()}
	}
	var out bytes.Buffer
	out.Grow(len(trimmed))
	n := 0
	for ; dec.More(); n++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, &InputError{Field: "body[" + strconv.Itoa(n) + "]", Problem: "invalid JSON: " + err.Error()}
		}
		if err := json.Compact(&out, raw); err != nil {
			return nil, &InputError{Field: "body[" + strconv.Itoa(n) + "]", Problem: "invalid JSON: " + err.Error()}
		}
		out.WriteByte('\n')
	}
	if _, err := dec.Token(); err != nil {
		return nil, &InputError{Field: "body", Problem: "invalid JSON array: " + err.Error()}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &InputError{Field: "body", Problem: "trailing data after the JSON array"}
	}
	if n == 0 {
		return nil, &InputError{Field: "body", Problem: "empty array: no documents"}
	}
	return out.Bytes(), nil
}

// lineCursor hands out the lines of a JSONL buffer in increasing order, counting lines as
// adapter.CorpusReader does (split on '\n', 1-based).
type lineCursor struct {
	buf  []byte
	pos  int // offset of line next
	next int // 0-based index of the line at pos
}

// line returns line n (1-based) without its line ending; n must not decrease between calls.
func (lc *lineCursor) line(n int) []byte {
	for lc.next < n-1 && lc.pos < len(lc.buf) {
		i := bytes.IndexByte(lc.buf[lc.pos:], '\n')
		if i < 0 {
			lc.pos = len(lc.buf)
			break
		}
		lc.pos += i + 1
		lc.next++
	}
	rest := lc.buf[lc.pos:]
	if i := bytes.IndexByte(rest, '\n'); i >= 0 {
		rest = rest[:i]
	}
	return bytes.TrimRight(rest, "\r")
}

// seenField reads the optional "seen" of a record the corpus reader accepted: true marks a document the
// deployed model was trained on (D_train), false a new one; set is false when the record has no "seen" (or
// null), and then the serving model's seen corpus or the stored flag decides. Anything else is a
// rejection, never a silent false.
func seenField(line []byte) (seen, set bool, problem string) {
	var rec struct {
		Seen json.RawMessage `json:"seen"`
	}
	if err := json.Unmarshal(line, &rec); err != nil {
		return false, false, "invalid JSON: " + err.Error() // not reached: the reader parsed the line already
	}
	switch string(rec.Seen) {
	case "", "null":
		return false, false, ""
	case "false":
		return false, true, ""
	case "true":
		return true, true, ""
	}
	return false, false, fmt.Sprintf(`field "seen" is %s, want true or false`, dropin.Excerpt(rec.Seen))
}
