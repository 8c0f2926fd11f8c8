package adapter

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"sync"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
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
	// Default: false (visible within the index refresh interval, 1s by default). On an index whose
	// refresh_interval is -1 (a bulk load's setting) such a request waits until something else refreshes.
	Refresh bool
	// RefreshAtEnd refreshes the index once after the last bulk request when any document was written, so
	// that all are searchable when Ingest returns: what a bulk load wants, and it holds whatever the
	// index's refresh_interval. Default: false.
	RefreshAtEnd bool
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
	// bulk writer's workers, possibly concurrently, so it must be safe for concurrent use and return quickly;
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
	if err := a.ingestable(ctx, opts); err != nil {
		return IngestReport{}, fmt.Errorf("ingest %q: %w", a.index, err)
	}
	run := &ingestRun{a: a, opts: opts, start: a.now(),
		plan: planOptions{keepStored: opts.KeepStored, replace: opts.Replace, embed: opts.Embed != nil, vectorModel: opts.VectorModel}}
	bulk := bulkOptions{workers: opts.Workers, flushBytes: opts.FlushBytes}
	if bulk.workers <= 0 {
		bulk.workers = 2
	}
	if opts.Refresh {
		bulk.refresh = "wait_for"
	}
	if opts.Progress != nil {
		bulk.onFlush = func() { opts.Progress(run.total()) }
	}
	run.w = a.newBulkWriter(ctx, bulk)

	// Documents wait in batch until a multi-get has read their stored versions (KeepStored) and the encoder
	// has embedded those that need it (Embed); without either, each is written as it is drawn.
	size := 1
	if opts.KeepStored || opts.Embed != nil {
		size = KeepStoredBatch
	}
	var batch []Doc
	var stop error // why drawing stopped early
	for d := range docs {
		if stop = ctx.Err(); stop != nil {
			run.failAll([]Doc{d}, stop)
			break
		}
		if reason := invalidDoc(d); reason != "" {
			run.fail(d.DocID, reason, false)
			continue
		}
		if batch = append(batch, d); len(batch) >= size {
			stop, batch = run.write(ctx, batch), batch[:0]
			if stop != nil {
				break
			}
		}
	}
	if stop == nil {
		stop = run.write(ctx, batch)
	} else {
		run.failAll(batch, stop) // drawn before the stop, not yet written
	}
	// Wait for every queued document even if ctx is done: requests use ctx, so they end quickly, and
	// returning earlier would let the workers write to the report after it is handed out.
	if err := run.w.close(ctx, stop); err != nil && stop == nil {
		stop = err
	}

	rep := run.rep // the workers are gone
	a.log.Info("ingest", "index", a.index, "indexed", rep.Indexed, "updated", rep.Updated, "unchanged", rep.Unchanged,
		"failed", len(rep.Failed), "requests", run.w.sent(), "took_ms", a.now().Sub(run.start).Milliseconds())
	if opts.Progress != nil {
		opts.Progress(rep.Total()) // the last call, with the final count
	}
	switch flushErr := run.w.err(); {
	case stop != nil:
		return rep, fmt.Errorf("ingest %q: %w", a.index, transportError(ctx, stop))
	case ctx.Err() != nil:
		return rep, fmt.Errorf("ingest %q: %w", a.index, ctx.Err())
	case flushErr != nil && rep.Indexed+rep.Updated == 0:
		// Not one document went through and the requests themselves failed: the cluster or the index
		// is the problem, not the documents. Say which, so callers can tell an outage from bad data.
		return rep, fmt.Errorf("ingest %q: %w", a.index, flushErr)
	}
	if opts.RefreshAtEnd && rep.Indexed+rep.Updated > 0 {
		if err := a.do(ctx, esapi.IndicesRefreshRequest{Index: []string{a.index}}, nil); err != nil {
			return rep, fmt.Errorf("ingest %q: refresh: %w", a.index, err)
		}
	}
	return rep, nil
}

// ingestable checks that Ingest can write into the index with opts.
func (a *Adapter) ingestable(ctx context.Context, opts IngestOptions) error {
	if a.closed.Load() {
		return ErrClosed
	}
	if a.team {
		return fmt.Errorf("%w: the index is a team's own layout (fields configured): the sidecar writes "+
			"only its own fields there, with `icicle enrich`", ErrInvalidArgument)
	}
	if opts.Embed != nil && (opts.VectorModel == "" || a.vectorDims <= 0) {
		return fmt.Errorf("%w: Embed needs VectorModel and an adapter with VectorDims", ErrInvalidArgument)
	}
	// Bulk writes to a missing index would auto-create it with a dynamic mapping (text+keyword for every
	// string, no boolean seen), which EnsureIndex would then reject forever. Check first.
	var m mappingResponse
	if err := a.do(ctx, esapi.IndicesGetMappingRequest{Index: []string{a.index}}, &m); err != nil {
		return err
	}
	return m.check(a.index, a.fields())
}

// ingestRun is one Ingest call: its options, its writer and the report that the writer's workers fill
// while more documents are drawn.
type ingestRun struct {
	a     *Adapter
	opts  IngestOptions
	plan  planOptions
	w     *bulkWriter
	start time.Time // every document's ingested_at

	mu  sync.Mutex // guards rep
	rep IngestReport
}

func (r *ingestRun) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rep.Total()
}

func (r *ingestRun) fail(docid, reason string, retryable bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Failed = append(r.rep.Failed, Failure{DocID: docid, Reason: reason, Retryable: retryable})
}

// failAll fails docs as not sent, because of err.
func (r *ingestRun) failAll(docs []Doc, err error) {
	for _, d := range docs {
		r.fail(d.DocID, "not sent: "+err.Error(), true)
	}
}

// write reads what is stored of batch (KeepStored), embeds what needs it (Embed), and carries out the plan:
// counts the unchanged documents, fails the refused ones and queues the others. Every document of batch is
// accounted for when it returns; an error stops the run.
func (r *ingestRun) write(ctx context.Context, batch []Doc) error {
	if len(batch) == 0 {
		return nil
	}
	var have map[string]storedState
	if r.opts.KeepStored {
		ids := make([]string, len(batch))
		for k, d := range batch {
			ids[k] = d.DocID
		}
		var err error
		if have, err = r.a.readStored(ctx, ids); err != nil {
			r.failAll(batch, err)
			return err
		}
	}
	if r.opts.Embed != nil {
		if need := storedVectors(batch, have, r.opts.VectorModel, r.a.vectorDims); len(need) > 0 {
			vs, err := embedDocs(ctx, r.opts.Embed, pick(batch, need), r.a.vectorDims)
			if err != nil {
				err = fmt.Errorf("embed: %w", err)
				r.failAll(batch, err)
				return err
			}
			for j, k := range need {
				batch[k].Vector = vs[j]
			}
			r.mu.Lock()
			r.rep.Embedded += len(need)
			r.mu.Unlock()
		}
	}
	for k, p := range planIngest(batch, have, r.plan) {
		switch p.op {
		case opRefused:
			r.fail(p.doc.DocID, p.reason, false)
			continue
		case opUnchanged:
			r.mu.Lock()
			r.rep.Unchanged++
			r.mu.Unlock()
			continue
		}
		act, err := p.action(r.start)
		if err != nil {
			r.fail(p.doc.DocID, err.Error(), false)
			continue
		}
		if err := r.w.add(ctx, act, r.settle(p.doc.DocID)); err != nil {
			r.failAll(batch[k+1:], err)
			return err
		}
	}
	return nil
}

// settle returns the callback that counts the outcome of writing the document docid.
func (r *ingestRun) settle(docid string) func(bulkResult) {
	return func(res bulkResult) {
		if res.failed() {
			reason, retry := res.reason(), res.retryable()
			if res.err == nil && res.status == http.StatusConflict {
				// KeepStored's write over the version it read: someone else wrote the document since.
				reason, retry = reason+" (the stored document changed during the ingestion; send it again)", true
			}
			r.fail(docid, reason, retry)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if res.result == "updated" {
			r.rep.Updated++
		} else {
			r.rep.Indexed++
		}
	}
}

// KeepStoredBatch is how many documents IngestOptions.KeepStored reads with one multi-get.
const KeepStoredBatch = 500

// ReasonDocIDTaken starts the reason of a document that KeepStored did not write because another
// document with a different text is stored under its docid.
const ReasonDocIDTaken = "docid taken"

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
// An update that Elasticsearch sheds for load is sent again as Ingest's documents are; one shed at every
// attempt is in Failed, retryable.
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
	ids, err := a.ids(ctx, docids)
	if err != nil {
		return err
	}
	seen, _ := json.Marshal(map[string]any{"doc": map[string]any{a.f.Seen: true}})
	var present []string
	var actions []bulkAction
	for _, d := range docids {
		id, ok := ids[d]
		if !ok {
			rep.Missing = append(rep.Missing, d)
			continue
		}
		present = append(present, d)
		actions = append(actions, bulkAction{op: "update", id: id, source: seen})
	}
	if len(actions) == 0 {
		return nil
	}
	results, err := a.bulkAll(ctx, "wait_for", actions)
	if err != nil {
		return err
	}
	for i, r := range results {
		switch {
		case r.errType == "document_missing_exception":
			rep.Missing = append(rep.Missing, present[i])
		case r.errType == "index_not_found_exception":
			return &ResponseError{Status: r.status, Type: r.errType, Reason: r.errReason}
		case r.failed():
			rep.Failed = append(rep.Failed, Failure{DocID: present[i], Reason: r.reason(), Retryable: r.retryable()})
		case r.result == "noop":
			rep.Unchanged++
		default:
			rep.Marked++
		}
	}
	return nil
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
