package adapter

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/elastic/go-elasticsearch/v8/esutil"
)

// Doc is one corpus document as written to the index.
type Doc struct {
	// DocID identifies the document; required. In NQ/BEIR corpora it is the Wikipedia title.
	DocID string
	// Title is the document title.
	Title string
	// Text is the passage body that BM25 searches.
	Text string
	// Summary is the compressed summary shown to the model; may be empty.
	Summary string
	// Seen marks documents the deployed model was trained on (D_train).
	Seen bool
	// Vector is the document's first-stage vector; Ingest fills it through IngestOptions.Embed (or keeps
	// the stored one), so callers leave it nil.
	Vector []float32
	// KeepSeen, with Seen false and IngestOptions.KeepStored, keeps the seen flag of the stored document
	// with the same docid instead of clearing it (a new document is written with seen=false): the request
	// did not say. Seen true always sets the flag.
	KeepSeen bool
}

// DocumentID returns the Elasticsearch _id for a docid: the lowercase hex SHA-1 of its UTF-8 bytes. It is
// fixed length and safe in URLs whatever the docid contains, and makes re-ingestion idempotent.
func DocumentID(docid string) string {
	sum := sha1.Sum([]byte(docid))
	return hex.EncodeToString(sum[:])
}

// IngestOptions tunes Ingest. The zero value is valid.
type IngestOptions struct {
	// Refresh makes each bulk request wait until its documents are searchable (refresh=wait_for).
	// Default: false (visible within the index refresh interval, 1s by default).
	Refresh bool
	// Workers is the number of concurrent bulk requests. Default: 2.
	Workers int
	// FlushBytes is the bulk request size that triggers a flush. Default: 5 MiB.
	FlushBytes int
	// KeepStored reads the stored documents before writing (one multi-get per KeepStoredBatch documents)
	// and writes each document only over the version it read, and only when it changes: a stored document
	// that already holds the same title, text, summary, seen flag and vector is not written again (counted
	// Unchanged), so that a corpus sent again leaves no replaced versions behind (Elasticsearch keeps
	// them, and counts them in BM25's statistics, until a merge drops them). Without Embed, a document
	// sent without a vector keeps the stored one when its title and text are the same. A stored document
	// keeps its seen flag when Doc.KeepSeen says so, and a stored document with the same docid but a
	// different text (another document sharing the title, the docid of NQ/BEIR corpora) is not overwritten
	// unless Replace is set: the new one is failed, not retryable, with ReasonDocIDTaken in its reason. A
	// document changed by someone else between the read and the write is failed, retryable. Default: false
	// (the "index" action overwrites, as before).
	KeepStored bool
	// Replace, with KeepStored, overwrites a stored document whose text differs. Default: false.
	Replace bool
	// Embed, if set, returns the vectors of docs (one per document, in order; PassageText of the title and
	// text in the sidecar): every written document then carries VectorField and VectorModelField. With
	// KeepStored, a stored document with the same title and text whose vector VectorModel made keeps its
	// vector and is not embedded again, so re-ingesting a corpus costs no encoder time. Documents are
	// embedded in batches of KeepStoredBatch; an Embed error fails its batch (retryable) and ends the run.
	// Default nil: no vectors (an adapter with VectorDims writes documents without them; Enrich adds them).
	Embed func(ctx context.Context, docs []Doc) ([][]float32, error)
	// VectorModel names the encoder behind Embed (the stored VectorModelField). Required with Embed.
	VectorModel string
	// Progress, if set, is called after each bulk request has been answered (or has failed) with the number
	// of documents accounted for so far (written or failed, invalid ones included), and once more with the
	// final count before Ingest returns. It is called from the
	// indexer's workers, possibly concurrently, so it must be safe for concurrent use and return quickly;
	// counts passed to concurrent calls may arrive out of order. Default: nil.
	Progress func(done int)
}

// Failure is one document that was not written, with the reason.
type Failure struct {
	// DocID is the document's docid (may be empty if that was the problem).
	DocID string
	// Reason is Elasticsearch's error type and reason, or the client-side problem.
	Reason string
	// Retryable is true when the document itself was not at fault: it was not written because the bulk
	// request failed (connection, timeout, 429/5xx after retries), Elasticsearch refused it for load (item
	// status 429/502/503/504) at every attempt (Options.MaxRetries resends), or the run stopped first. Sending it again may succeed, and is safe: writes
	// are idempotent. False for documents that are invalid or that Elasticsearch rejected as such.
	Retryable bool
}

// IngestReport accounts for every document Ingest was given: Indexed+Updated+Unchanged+len(Failed) equals
// the number of documents drawn from the sequence.
type IngestReport struct {
	// Indexed counts documents that were new to the index.
	Indexed int
	// Updated counts documents that replaced an existing document with the same docid.
	Updated int
	// Unchanged counts documents (KeepStored) stored already as they were sent: not written again.
	Unchanged int
	// Failed lists the documents that were not written, in no particular order.
	Failed []Failure
	// Embedded counts the documents whose vectors this run computed with IngestOptions.Embed (a stored
	// document sent again with the same title and text keeps its vector and is not counted).
	Embedded int
}

// Total returns the number of documents accounted for.
func (r IngestReport) Total() int { return r.Indexed + r.Updated + r.Unchanged + len(r.Failed) }

// stored is the JSON document written to the index.
type stored struct {
	DocID       string    `json:"docid"`
	Title       string    `json:"title"`
	Text        string    `json:"text"`
	Summary     string    `json:"summary,omitempty"`
	Seen        bool      `json:"seen"`
	IngestedAt  time.Time `json:"ingested_at"`
	Vector      []float32 `json:"vector,omitempty"`
	VectorModel string    `json:"vector_model,omitempty"`
}

// Ingest writes docs with the bulk API, replacing documents with the same docid. Every document drawn from
// docs ends up counted in the report: written, or in Failed with the reason (invalid documents are failed
// without being sent). The returned error is for the run as a whole (cancellation, a closed adapter, the
// index missing); the report is valid alongside it and accounts for everything drawn before the stop.
// Documents are written with the "index" action into the configured index, which should exist (EnsureIndex):
// with auto-creation off a missing index fails every document.
//
// A bulk response can be 200 with some items refused for load (status 429 when the write thread pool's
// queue is full, or 502/503/504). Those documents are sent again in further bulk requests, after the
// same backoff as the client's request retries and at most Options.MaxRetries times; each is counted once,
// by the attempt that settles it.
func (a *Adapter) Ingest(ctx context.Context, docs iter.Seq[Doc], opts IngestOptions) (IngestReport, error) {
	var rep IngestReport
	if a.closed.Load() {
		return rep, fmt.Errorf("ingest %q: %w", a.index, ErrClosed)
	}
	if a.team {
		return rep, fmt.Errorf("ingest %q: %w: the index is a team's own layout (fields configured): the sidecar writes "+
			"only its own fields there, with `icicle enrich`", a.index, ErrInvalidArgument)
	}
	if opts.Embed != nil && (opts.VectorModel == "" || a.vectorDims <= 0) {
		return rep, fmt.Errorf("ingest %q: %w: Embed needs VectorModel and an adapter with VectorDims", a.index, ErrInvalidArgument)
	}
	// Bulk writes to a missing index would auto-create it with a dynamic mapping (text+keyword for every
	// string, no boolean seen), which EnsureIndex would then reject forever. Check first.
	var m mappingResponse
	if err := a.do(ctx, esapi.IndicesGetMappingRequest{Index: []string{a.index}}, &m); err != nil {
		return rep, fmt.Errorf("ingest %q: %w", a.index, err)
	}
	if err := m.check(a.index, a.fields()); err != nil {
		return rep, fmt.Errorf("ingest %q: %w", a.index, err)
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = 2
	}
	var (
		mu       sync.Mutex
		outcome  []bool   // outcome[i]: document i has been counted
		docids   []string // docids[i]: the docid of document i, for failures the indexer never reports
		flushErr error
	)
	cfg := esutil.BulkIndexerConfig{
		Client:     a.rt,
		Index:      a.index,
		NumWorkers: workers,
		FlushBytes: opts.FlushBytes,
		// Flushes normally run on a background context; tie them to ours so cancellation stops them, and
		// give each its own request timeout.
		OnFlushStart: func(context.Context) context.Context {
			fctx, cancel := a.withTimeout(ctx)
			return context.WithValue(fctx, cancelKey{}, cancel)
		},
		OnFlushEnd: func(fctx context.Context) {
			if cancel, ok := fctx.Value(cancelKey{}).(context.CancelFunc); ok {
				cancel()
			}
			// Every item of the flush has had its callback by now (esutil calls this last).
			if opts.Progress != nil {
				mu.Lock()
				done := rep.Total()
				mu.Unlock()
				opts.Progress(done)
			}
		},
	}
	if opts.Refresh {
		cfg.Refresh = "wait_for"
	}
	cfg.OnError = func(_ context.Context, err error) {
		mu.Lock()
		if flushErr == nil {
			flushErr = err
		}
		mu.Unlock()
	}
	var requests uint64 // bulk requests of every round, for the log

	start := a.now()
	fail := func(i int, docid, reason string, retryable bool) {
		mu.Lock()
		defer mu.Unlock()
		if i >= 0 {
			if outcome[i] {
				return
			}
			outcome[i] = true
		}
		rep.Failed = append(rep.Failed, Failure{DocID: docid, Reason: reason, Retryable: retryable})
	}
	// Items that Elasticsearch shed for load inside an otherwise successful bulk response (status 429, or
	// 502/503/504) are not the documents' fault and not yet failures: they go into shed and are sent again
	// in a later round, after a backoff, up to the adapter's MaxRetries rounds. Only an item shed in the last
	// round is a failure (Retryable). outcome[i] is set once, by whichever round settles document i.
	var shed []shedItem
	add := func(bi esutil.BulkIndexer, i int, body []byte, w writeMeta, round int) error {
		docid := docids[i]
		return bi.Add(ctx, esutil.BulkIndexerItem{
			Action:        cmp.Or(w.action, "index"),
			DocumentID:    DocumentID(docid),
			IfSeqNo:       w.seqNo,
			IfPrimaryTerm: w.primaryTerm,
			Body:          bytes.NewReader(body),
			OnSuccess: func(_ context.Context, _ esutil.BulkIndexerItem, res esutil.BulkIndexerResponseItem) {
				mu.Lock()
				defer mu.Unlock()
				if outcome[i] {
					return
				}
				outcome[i] = true
				if res.Result == "updated" {
					rep.Updated++
				} else {
					rep.Indexed++
				}
			},
			OnFailure: func(_ context.Context, _ esutil.BulkIndexerItem, res esutil.BulkIndexerResponseItem, err error) {
				// err is a failure of the whole bulk request (after the client's retries): never the document's
				// fault. Per-item errors are, unless the node shed the item for load.
				reason := fmt.Sprintf("status %d", res.Status)
				if res.Error.Type != "" {
					reason = res.Error.Type + ": " + res.Error.Reason
				}
				switch {
				case err != nil:
					fail(i, docid, err.Error(), true)
				case res.Status == http.StatusConflict:
					// KeepStored's write over the version it read: someone else wrote the document since.
					fail(i, docid, reason+" (the stored document changed during the ingestion; send it again)", true)
				case retryable(res.Status) && round < a.retries:
					mu.Lock()
					shed = append(shed, shedItem{i: i, body: body, meta: w, reason: reason})
					mu.Unlock()
				case retryable(res.Status) && round > 0:
					fail(i, docid, fmt.Sprintf("%s (sent %d times)", reason, round+1), true)
				default:
					fail(i, docid, reason, retryable(res.Status))
				}
			},
		})
	}
	bi, err := esutil.NewBulkIndexer(cfg)
	if err != nil {
		return rep, fmt.Errorf("ingest %q: %w", a.index, err)
	}
	var addErr error
	// write queues one document; with KeepStored, st is what was read of it (nil: not stored).
	write := func(d Doc, st *storedState) error {
		seen, w, vectorModel := d.Seen, writeMeta{}, opts.VectorModel
		if opts.KeepStored {
			switch {
			case st == nil:
				w.action = "create" // fails if someone else created it since the read
			case st.text != d.Text && !opts.Replace:
				fail(-1, d.DocID, ReasonDocIDTaken+": a document with a different text is stored under this docid "+
					"(another document with the same title?); not overwritten (send it with replace to overwrite)", false)
				return nil
			default:
				seen = seen || (d.KeepSeen && st.seen)
				if len(d.Vector) == 0 && opts.Embed == nil && st.text == d.Text && st.title == d.Title && st.vectorModel != "" {
					// Sent without a vector (POST /v1/ingest embeds nothing): the same text keeps its stored one.
					d.Vector, vectorModel = st.vector, st.vectorModel
				}
				if st.same(d, seen, vectorModel) {
					mu.Lock()
					rep.Unchanged++
					mu.Unlock()
					return nil
				}
				w.seqNo, w.primaryTerm = &st.seqNo, &st.primaryTerm
			}
		}
		doc := stored{DocID: d.DocID, Title: d.Title, Text: d.Text, Summary: d.Summary, Seen: seen, IngestedAt: start.UTC()}
		if len(d.Vector) > 0 {
			doc.Vector, doc.VectorModel = d.Vector, vectorModel
		}
		body, err := json.Marshal(doc)
		if err != nil {
			fail(-1, d.DocID, "encode: "+err.Error(), false)
			return nil
		}
		mu.Lock()
		i := len(outcome)
		outcome = append(outcome, false)
		docids = append(docids, d.DocID)
		mu.Unlock()
		if err := add(bi, i, body, w, 0); err != nil {
			fail(i, d.DocID, "not sent: "+err.Error(), true)
			return err
		}
		return nil
	}
	// With KeepStored or Embed, documents wait in batch until a multi-get has read their stored versions
	// and the encoder has embedded those that need it.
	var batch []Doc
	writeBatch := func() error {
		if len(batch) == 0 {
			return nil
		}
		failBatch := func(err error) error {
			for _, d := range batch {
				fail(-1, d.DocID, "not sent: "+err.Error(), true)
			}
			batch = batch[:0]
			return err
		}
		stored := map[string]storedState{}
		if opts.KeepStored {
			ids := make([]string, len(batch))
			for k, d := range batch {
				ids[k] = d.DocID
			}
			var err error
			if stored, err = a.readStored(ctx, ids); err != nil {
				return failBatch(err)
			}
		}
		if opts.Embed != nil {
			var need []int
			for k, d := range batch {
				if st, ok := stored[d.DocID]; ok && st.vectorModel == opts.VectorModel && len(st.vector) == a.vectorDims &&
					st.text == d.Text && st.title == d.Title {
					batch[k].Vector = st.vector
					continue
				}
				need = append(need, k)
			}
			if len(need) > 0 {
				docs := make([]Doc, len(need))
				for j, k := range need {
					docs[j] = batch[k]
				}
				vs, err := opts.Embed(ctx, docs)
				if err == nil && len(vs) != len(docs) {
					err = fmt.Errorf("%d vectors for %d documents", len(vs), len(docs))
				}
				if err != nil {
					return failBatch(fmt.Errorf("embed: %w", err))
				}
				for j, k := range need {
					if len(vs[j]) != a.vectorDims {
						return failBatch(fmt.Errorf("embed: a vector of %d dims, the index has %d", len(vs[j]), a.vectorDims))
					}
					batch[k].Vector = vs[j]
				}
				rep.Embedded += len(need)
			}
		}
		for k, d := range batch {
			var st *storedState
			if v, ok := stored[d.DocID]; ok {
				st = &v
			}
			if err := write(d, st); err != nil {
				for _, rest := range batch[k+1:] {
					fail(-1, rest.DocID, "not sent: "+err.Error(), true)
				}
				batch = batch[:0]
				return err
			}
		}
		batch = batch[:0]
		return nil
	}
	for d := range docs {
		if err := ctx.Err(); err != nil {
			fail(-1, d.DocID, "not sent: "+err.Error(), true)
			addErr = err
			break
		}
		if reason := invalidDoc(d); reason != "" {
			fail(-1, d.DocID, reason, false)
			continue
		}
		if !opts.KeepStored && opts.Embed == nil {
			if addErr = write(d, nil); addErr != nil {
				break
			}
			continue
		}
		batch = append(batch, d)
		if len(batch) >= KeepStoredBatch {
			if addErr = writeBatch(); addErr != nil {
				break
			}
		}
	}
	if addErr == nil {
		addErr = writeBatch()
	} else {
		for _, d := range batch {
			fail(-1, d.DocID, "not sent: "+addErr.Error(), true)
		}
	}
	// Wait for every queued document even if ctx is done: flushes use ctx, so they end quickly, and
	// returning earlier would let callbacks write to the report after we hand it out.
	if err := bi.Close(context.WithoutCancel(ctx)); err != nil && addErr == nil {
		addErr = err
	}
	requests += bi.Stats().NumRequests

	// Retry rounds for shed items. Every indexer of the previous round is closed, so shed is ours alone.
	for round := 1; len(shed) > 0; round++ {
		pending := shed
		shed = nil
		a.log.Info("ingest: retrying documents shed by elasticsearch", "index", a.index, "docs", len(pending),
			"round", round, "reason", pending[0].reason)
		if addErr == nil {
			addErr = sleepCtx(ctx, a.backoff(round))
		}
		if addErr != nil {
			for _, p := range pending {
				fail(p.i, docids[p.i], p.reason+"; not sent again: "+addErr.Error(), true)
			}
			break
		}
		rbi, err := esutil.NewBulkIndexer(cfg)
		if err != nil {
			addErr = err
			for _, p := range pending {
				fail(p.i, docids[p.i], p.reason+"; not sent again: "+err.Error(), true)
			}
			break
		}
		for k, p := range pending {
			if err := add(rbi, p.i, p.body, p.meta, round); err != nil {
				addErr = err
				for _, q := range pending[k:] {
					fail(q.i, docids[q.i], q.reason+"; not sent again: "+err.Error(), true)
				}
				break
			}
		}
		if err := rbi.Close(context.WithoutCancel(ctx)); err != nil && addErr == nil {
			addErr = err
		}
		requests += rbi.Stats().NumRequests
	}

	mu.Lock()
	defer mu.Unlock()
	for i, done := range outcome {
		if !done {
			// The bulk indexer lost track of it (a response with fewer items than the request).
			outcome[i] = true
			rep.Failed = append(rep.Failed, Failure{DocID: docids[i], Reason: "no result from the bulk indexer", Retryable: true})
		}
	}
	a.log.Info("ingest", "index", a.index, "indexed", rep.Indexed, "updated", rep.Updated, "unchanged", rep.Unchanged,
		"failed", len(rep.Failed), "requests", requests, "took_ms", a.now().Sub(start).Milliseconds())
	if opts.Progress != nil {
		opts.Progress(rep.Total()) // the workers are gone: this is the last call, with the final count
	}
	switch {
	case addErr != nil:
		return rep, fmt.Errorf("ingest %q: %w", a.index, transportError(ctx, addErr))
	case ctx.Err() != nil:
		return rep, fmt.Errorf("ingest %q: %w", a.index, ctx.Err())
	case flushErr != nil && rep.Indexed+rep.Updated == 0 && len(outcome) > 0:
		// Not one document went through and the requests themselves failed: the cluster or the index
		// is the problem, not the documents. Say which, so callers can tell an outage from bad data.
		return rep, fmt.Errorf("ingest %q: %w", a.index, classifyFlushError(flushErr))
	}
	return rep, nil
}

type cancelKey struct{}

// KeepStoredBatch is how many documents IngestOptions.KeepStored reads with one multi-get.
const KeepStoredBatch = 500

// ReasonDocIDTaken starts the reason of a document that KeepStored did not write because another
// document with a different text is stored under its docid.
const ReasonDocIDTaken = "docid taken"

// storedState is what KeepStored reads of a stored document.
type storedState struct {
	text, title string
	summary     string
	seen        bool
	seqNo       int64
	primaryTerm int64
	vector      []float32 // read only when asked (vectors)
	vectorModel string
}

// same reports whether the stored document already holds what writing d (with the seen flag and the
// vector's model decided) would store, ingested_at aside.
func (st *storedState) same(d Doc, seen bool, vectorModel string) bool {
	if st.text != d.Text || st.title != d.Title || st.summary != d.Summary || st.seen != seen {
		return false
	}
	if len(d.Vector) == 0 {
		return st.vectorModel == "" // writing would drop a stored vector
	}
	return st.vectorModel == vectorModel && slices.Equal(st.vector, d.Vector)
}

// readStored multi-gets the documents of docids and returns the stored ones by docid, vectors included.
func (a *Adapter) readStored(ctx context.Context, docids []string) (map[string]storedState, error) {
	type stored struct {
		DocID       string    `json:"docid"`
		Title       string    `json:"title"`
		Text        string    `json:"text"`
		Summary     string    `json:"summary"`
		Seen        bool      `json:"seen"`
		Vector      []float32 `json:"vector"`
		VectorModel string    `json:"vector_model"`
	}
	fields := []string{"docid", "title", "text", "summary", "seen", VectorField, VectorModelField}
	docs, err := mgetByDocID[stored](ctx, a, docids, fields)
	if err != nil {
		return nil, fmt.Errorf("read stored documents: %w", err)
	}
	out := make(map[string]storedState, len(docs))
	for _, d := range docs {
		if d.Found {
			out[d.Source.DocID] = storedState{text: d.Source.Text, title: d.Source.Title, summary: d.Source.Summary,
				seen: d.Source.Seen, seqNo: d.SeqNo,
				primaryTerm: d.PrimaryTerm, vector: d.Source.Vector, vectorModel: d.Source.VectorModel}
		}
	}
	return out, nil
}

// shedItem is a document Elasticsearch refused for load in a bulk response, kept to be sent again.
type shedItem struct {
	i      int    // the document's index in outcome and docids
	body   []byte // its encoded source
	meta   writeMeta
	reason string // the item's error, for the failure if no retry gets it through
}

// writeMeta is the bulk action of one document: "index" (the default) or "create", and the version a
// KeepStored write replaces.
type writeMeta struct {
	action             string
	seqNo, primaryTerm *int64
}

// sleepCtx waits d or until ctx is done, whichever is first, and returns ctx's error in the second case.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// invalidDoc returns why a document cannot be indexed, or "".
func invalidDoc(d Doc) string {
	switch {
	case strings.TrimSpace(d.DocID) == "":
		return "empty docid"
	case strings.TrimSpace(d.Text) == "" && strings.TrimSpace(d.Title) == "":
		return "empty title and text"
	}
	return ""
}

// classifyFlushError maps a bulk flush error to the package's sentinels where it can. esutil reports error
// responses as text ("flush: [404 Not Found] {...}"), so the status is recovered from it.
func classifyFlushError(err error) error {
	msg := err.Error()
	switch {
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		// Ingest looks at the caller's context first, so this is the per-flush RequestTimeout: the cluster
		// did not answer in time.
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case strings.Contains(msg, "index_not_found_exception"):
		return fmt.Errorf("%w: %w", ErrIndexMissing, err)
	case strings.Contains(msg, "[429 "), strings.Contains(msg, "[502 "), strings.Contains(msg, "[503 "),
		strings.Contains(msg, "[504 "), !strings.Contains(msg, "flush: ["):
		// A status that kept failing after retries, or no response at all (connection refused).
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// MarkSeenReport says what MarkSeen did with each requested docid.
type MarkSeenReport struct {
	// Marked counts documents changed from seen=false to seen=true.
	Marked int
	// Unchanged counts documents that were already seen=true.
	Unchanged int
	// Missing lists requested docids that are not in the index.
	Missing []string
	// Failed lists documents Elasticsearch refused to update, with the reason.
	Failed []Failure
}

// markSeenChunk bounds one bulk request: 1000 small partial updates are ~150 KB.
const markSeenChunk = 1000

// MarkSeen sets seen=true on the documents with the given docids, as is done when a model retrained on them
// is deployed, and waits until the change is searchable. It addresses documents by their derived _id with
// partial-document bulk updates rather than _update_by_query: that needs no scripting (painless) or reindex
// module, reports each unknown docid, and is safe to repeat. Duplicates are updated once.
func (a *Adapter) MarkSeen(ctx context.Context, docids []string) (MarkSeenReport, error) {
	var rep MarkSeenReport
	uniq := make([]string, 0, len(docids))
	dup := make(map[string]bool, len(docids))
	for _, d := range docids {
		if !dup[d] {
			dup[d] = true
			uniq = append(uniq, d)
		}
	}
	for start := 0; start < len(uniq); start += markSeenChunk {
		chunk := uniq[start:min(start+markSeenChunk, len(uniq))]
		if err := a.markSeen(ctx, chunk, &rep); err != nil {
			return rep, fmt.Errorf("mark seen %q: %w", a.index, err)
		}
	}
	a.log.Info("mark seen", "index", a.index, "marked", rep.Marked, "unchanged", rep.Unchanged,
		"missing", len(rep.Missing), "failed", len(rep.Failed))
	return rep, nil
}

func (a *Adapter) markSeen(ctx context.Context, docids []string, rep *MarkSeenReport) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	ids, err := a.ids(ctx, docids)
	if err != nil {
		return err
	}
	for _, d := range docids {
		id, ok := ids[d]
		if !ok {
			rep.Missing = append(rep.Missing, d)
			continue
		}
		meta := map[string]any{"update": map[string]any{"_id": id}}
		if err := enc.Encode(meta); err != nil {
			return err
		}
		if err := enc.Encode(map[string]any{"doc": map[string]any{a.f.Seen: true}}); err != nil {
			return err
		}
	}
	if buf.Len() == 0 {
		return nil
	}
	present := make([]string, 0, len(docids))
	for _, d := range docids {
		if _, ok := ids[d]; ok {
			present = append(present, d)
		}
	}
	docids = present
	var res bulkUpdates
	req := esapi.BulkRequest{Index: a.index, Body: &buf, Refresh: "wait_for"}
	if err := a.do(ctx, req, &res); err != nil {
		return err
	}
	if len(res.Items) != len(docids) {
		return fmt.Errorf("bulk update answered %d items for %d documents", len(res.Items), len(docids))
	}
	for i, item := range res.Items {
		r := item["update"]
		switch {
		case r.Error.Type == "document_missing_exception":
			rep.Missing = append(rep.Missing, docids[i])
		case r.Error.Type == "index_not_found_exception":
			return &ResponseError{Status: 404, Type: r.Error.Type, Reason: r.Error.Reason}
		case r.Error.Type != "":
			rep.Failed = append(rep.Failed, Failure{DocID: docids[i], Reason: r.Error.Type + ": " + r.Error.Reason})
		case r.Result == "noop":
			rep.Unchanged++
		default:
			rep.Marked++
		}
	}
	return nil
}

// bulkUpdates is a bulk response to partial updates (MarkSeen, Enrich): per item, keyed "update".
type bulkUpdates struct {
	Items []map[string]struct {
		Result string `json:"result"`
		Status int    `json:"status"`
		Error  struct {
			Type   string `json:"type"`
			Reason string `json:"reason"`
		} `json:"error"`
	} `json:"items"`
}

// ids maps docids to their documents' _ids: derived where the layout derives them (the sidecar's, or the
// docid in _id: every docid maps, a missing document shows as document_missing_exception), else found with a
// terms query (a docid without a document is absent).
func (a *Adapter) ids(ctx context.Context, docids []string) (map[string]string, error) {
	out := make(map[string]string, len(docids))
	if !a.team || a.f.DocID == IDField {
		for _, d := range docids {
			out[d] = a.idOf(d)
		}
		return out, nil
	}
	hits, err := a.byDocID(ctx, docids, []string{a.f.DocID})
	if err != nil {
		return nil, err
	}
	for _, h := range hits {
		out[h.DocID] = h.ID
	}
	return out, nil
}
