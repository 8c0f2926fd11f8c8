package adapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
)

const (
	// bulkFlushBytes is the size of the bulk requests a bulkWriter sends unless told otherwise.
	bulkFlushBytes = 5e6
	// bulkFlushInterval is how long queued actions wait for more before they are sent anyway, so that a
	// slow source (an encoder, a stream) still sees its documents written and its progress reported.
	bulkFlushInterval = 30 * time.Second
)

// errNoResult settles an action that its bulk response has no item for.
var errNoResult = errors.New("no result from the bulk indexer")

// bulkAction is one action of a bulk request.
type bulkAction struct {
	// op is "index", "create" or "update".
	op string
	// id is the document's _id.
	id string
	// seqNo and primaryTerm, when set, apply the action only over that version of the document.
	seqNo, primaryTerm *int64
	// source is the action's JSON line: the document (index, create) or {"doc": ...} (update).
	source []byte
}

// line returns the action's metadata and source lines, as a bulk request carries them.
func (act bulkAction) line() []byte {
	type meta struct {
		ID          string `json:"_id"`
		SeqNo       *int64 `json:"if_seq_no,omitempty"`
		PrimaryTerm *int64 `json:"if_primary_term,omitempty"`
	}
	b, _ := json.Marshal(map[string]meta{act.op: {ID: act.id, SeqNo: act.seqNo, PrimaryTerm: act.primaryTerm}}) // strings and numbers
	b = append(b, '\n')
	b = append(b, act.source...)
	return append(b, '\n')
}

// bulkResult is how one action ended.
type bulkResult struct {
	// status, result ("created", "updated", "noop") and errType/errReason are the action's item in the
	// bulk response that settled it.
	status             int
	result             string
	errType, errReason string
	// err is set instead when no response item settled the action: its request failed (after the retries
	// every request gets), it was not sent, or the response had no item for it. Never the document's fault.
	err error
	// sends counts the requests that carried the action.
	sends int
}

// failed reports whether the action was not carried out.
func (r bulkResult) failed() bool { return r.err != nil || r.errType != "" || r.status > 201 }

// retryable reports whether sending a failed action again may succeed: it was not answered, or
// Elasticsearch refused it for load.
func (r bulkResult) retryable() bool { return r.err != nil || retryable(r.status) }

// reason says why a failed action failed: why it was not answered, or the item's error, with how many
// times an action shed for load was sent.
func (r bulkResult) reason() string {
	if r.err != nil {
		return r.err.Error()
	}
	if retryable(r.status) && r.sends > 1 {
		return fmt.Sprintf("%s (sent %d times)", r.itemReason(), r.sends)
	}
	return r.itemReason()
}

// itemReason is the item's error type and reason, or its status where it has no error.
func (r bulkResult) itemReason() string {
	if r.errType == "" {
		return fmt.Sprintf("status %d", r.status)
	}
	return r.errType + ": " + r.errReason
}

// bulkResponse is the answer to a bulk request: per action, in order, its item keyed by the action.
type bulkResponse struct {
	Items []map[string]struct {
		Status int    `json:"status"`
		Result string `json:"result"`
		Error  struct {
			Type   string `json:"type"`
			Reason string `json:"reason"`
		} `json:"error"`
	} `json:"items"`
}

// result returns what the response says of its k-th action.
func (res *bulkResponse) result(k int) bulkResult {
	if k >= len(res.Items) {
		return bulkResult{err: errNoResult}
	}
	var r bulkResult
	for _, item := range res.Items[k] { // one key: the action
		r.status, r.result, r.errType, r.errReason = item.Status, item.Result, item.Error.Type, item.Error.Reason
	}
	return r
}

// bulkOptions tune a bulkWriter.
type bulkOptions struct {
	// workers is how many requests may be in flight at once. Default 1.
	workers int
	// flushBytes is the request size that sends the queued actions. Default bulkFlushBytes.
	flushBytes int
	// refresh is the requests' refresh parameter ("wait_for"); empty leaves it out.
	refresh string
	// onFlush, if set, is called after each request once its actions are settled (or set aside to be sent
	// again), from the goroutine that sent it: it may run concurrently with itself.
	onFlush func()
}

// bulkWriter writes bulk actions into the adapter's index: in requests of up to flushBytes, up to workers
// of them in flight, each through Adapter.do (the request timeout, and the retries of a request that fails
// as a whole). An action that Elasticsearch shed for load inside an answered request (item status 429, 502,
// 503 or 504) is sent again in a later round, after the same backoff as request retries, at most
// Options.MaxRetries times. Every action added is settled exactly once, by the attempt that decides it,
// before close returns.
type bulkWriter struct {
	a    *Adapter
	opts bulkOptions
	// jobs carries full requests to the workers; stop ends the flush ticker. Both are remade each round.
	jobs    chan []*bulkPending
	stop    chan struct{}
	workers sync.WaitGroup
	ticker  sync.WaitGroup

	mu       sync.Mutex // guards what follows
	queued   []*bulkPending
	size     int // bytes of queued
	round    int // the round being sent: 0, then each retry of shed actions
	shed     []*bulkPending
	firstErr error
	requests int
}

// bulkPending is an action between add and its settling.
type bulkPending struct {
	line   []byte
	settle func(bulkResult)
	sends  int
	// shed is the item's error when the last round shed it for load, kept for its failure if no retry
	// gets it through.
	shed string
}

// notSent is the result of an action that the writer stopped sending because of cause.
func (p *bulkPending) notSent(cause error) bulkResult {
	if p.shed == "" {
		return bulkResult{err: fmt.Errorf("not sent: %w", cause), sends: p.sends}
	}
	return bulkResult{err: fmt.Errorf("%s; not sent again: %w", p.shed, cause), sends: p.sends}
}

// newBulkWriter starts a writer whose requests run under ctx. Call close once done adding.
func (a *Adapter) newBulkWriter(ctx context.Context, opts bulkOptions) *bulkWriter {
	if opts.workers <= 0 {
		opts.workers = 1
	}
	if opts.flushBytes <= 0 {
		opts.flushBytes = bulkFlushBytes
	}
	w := &bulkWriter{a: a, opts: opts}
	w.start(ctx)
	return w
}

// start runs the workers and the flush ticker of one round.
func (w *bulkWriter) start(ctx context.Context) {
	jobs, stop := make(chan []*bulkPending), make(chan struct{})
	w.jobs, w.stop = jobs, stop
	for range w.opts.workers {
		w.workers.Add(1)
		go func() {
			defer w.workers.Done()
			for batch := range jobs {
				w.send(ctx, batch)
			}
		}()
	}
	w.ticker.Add(1)
	go func() {
		defer w.ticker.Done()
		t := time.NewTicker(bulkFlushInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if batch := w.take(); len(batch) > 0 {
					jobs <- batch
				}
			}
		}
	}()
}

// add queues an action. settle is called once with its result, possibly from another goroutine, before
// close returns. An error means that ctx ended while the action waited for a request to finish; the action,
// and those queued with it, are then settled as not sent.
func (w *bulkWriter) add(ctx context.Context, act bulkAction, settle func(bulkResult)) error {
	return w.enqueue(ctx, &bulkPending{line: act.line(), settle: settle})
}

// enqueue queues p, handing the queued actions to a worker when they fill a request.
func (w *bulkWriter) enqueue(ctx context.Context, p *bulkPending) error {
	var full [][]*bulkPending
	w.mu.Lock()
	if len(w.queued) > 0 && w.size+len(p.line) >= w.opts.flushBytes {
		full = append(full, w.takeLocked())
	}
	w.queued = append(w.queued, p)
	w.size += len(p.line)
	if w.size >= w.opts.flushBytes {
		full = append(full, w.takeLocked()) // one action the size of a request goes alone
	}
	w.mu.Unlock()
	for k, batch := range full {
		select {
		case w.jobs <- batch:
		case <-ctx.Done():
			for _, rest := range full[k:] {
				for _, q := range rest {
					q.settle(q.notSent(ctx.Err()))
				}
			}
			return ctx.Err()
		}
	}
	return nil
}

func (w *bulkWriter) take() []*bulkPending {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.takeLocked()
}

func (w *bulkWriter) takeLocked() []*bulkPending {
	batch := w.queued
	w.queued, w.size = nil, 0
	return batch
}

// drain sends what is queued and waits for the round's requests.
func (w *bulkWriter) drain() {
	close(w.stop)
	w.ticker.Wait()
	if batch := w.take(); len(batch) > 0 {
		w.jobs <- batch // even after ctx ended: the request then fails at once and settles its actions
	}
	close(w.jobs)
	w.workers.Wait()
}

// close sends what is queued, then the shed actions in retry rounds, and returns once every action added has
// been settled. stopped, if set, is why the caller stopped adding: shed actions are then settled as not sent
// again instead of being retried. The error is the one that ended the retries (stopped, or ctx's), else nil.
func (w *bulkWriter) close(ctx context.Context, stopped error) error {
	w.drain()
	err := stopped
	for round := 1; len(w.shed) > 0; round++ {
		pending := w.shed
		w.shed = nil
		w.a.log.Info("bulk: retrying actions shed by elasticsearch", "index", w.a.index, "actions", len(pending),
			"round", round, "reason", pending[0].shed)
		if err == nil {
			err = sleepCtx(ctx, w.a.backoff(round))
		}
		if err != nil {
			for _, p := range pending {
				p.settle(p.notSent(err))
			}
			break
		}
		w.mu.Lock()
		w.round = round
		w.mu.Unlock()
		w.start(ctx)
		for k, p := range pending {
			if err = w.enqueue(ctx, p); err != nil {
				for _, q := range pending[k+1:] {
					q.settle(q.notSent(err))
				}
				break
			}
		}
		w.drain()
	}
	return err
}

// err returns the error of the first request that failed as a whole, or nil. Valid after close.
func (w *bulkWriter) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.firstErr
}

// sent returns the number of bulk requests made. Valid after close.
func (w *bulkWriter) sent() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.requests
}

// send makes one bulk request of batch and settles its actions, or sets aside those shed for load.
func (w *bulkWriter) send(ctx context.Context, batch []*bulkPending) {
	var body bytes.Buffer
	for _, p := range batch {
		body.Write(p.line)
		p.sends++
	}
	var res bulkResponse
	err := w.a.do(ctx, esapi.BulkRequest{Index: w.a.index, Body: bytes.NewReader(body.Bytes()), Refresh: w.opts.refresh}, &res)
	w.mu.Lock()
	w.requests++
	if err != nil && w.firstErr == nil {
		w.firstErr = err
	}
	round := w.round
	w.mu.Unlock()
	for k, p := range batch {
		var r bulkResult
		if err != nil {
			r.err = fmt.Errorf("bulk request: %w", err)
		} else {
			r = res.result(k)
		}
		r.sends = p.sends
		if r.err == nil && r.failed() && retryable(r.status) && round < w.a.retries {
			p.shed = r.itemReason()
			w.mu.Lock()
			w.shed = append(w.shed, p)
			w.mu.Unlock()
			continue
		}
		p.settle(r)
	}
	if w.opts.onFlush != nil {
		w.opts.onFlush()
	}
}

// bulkAll writes actions with one request in flight at a time and returns each action's result, in order.
// The error is for the writing as a whole: a request that failed, an answer without an item for every
// action, ctx ending; the results are then incomplete.
func (a *Adapter) bulkAll(ctx context.Context, refresh string, actions []bulkAction) ([]bulkResult, error) {
	results := make([]bulkResult, len(actions))
	w := a.newBulkWriter(ctx, bulkOptions{refresh: refresh})
	var stopped error
	for k, act := range actions {
		if stopped = w.add(ctx, act, func(r bulkResult) { results[k] = r }); stopped != nil {
			break
		}
	}
	if err := w.close(ctx, stopped); err != nil {
		return results, err
	}
	if err := w.err(); err != nil {
		return results, err
	}
	answered := 0
	for _, r := range results {
		if !errors.Is(r.err, errNoResult) {
			answered++
		}
	}
	if answered != len(actions) {
		return results, fmt.Errorf("bulk request answered %d items for %d actions", answered, len(actions))
	}
	return results, nil
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
