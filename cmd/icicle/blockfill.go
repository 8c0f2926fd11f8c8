package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/rank"
)

// The background fill of a model's block store (issue 26, experimental.block_fill): when a model that reads by
// blocks is loaded (at start or by a hot swap), the index's new documents are listed (adapter.ListNew) and
// their blocks computed and kept (inference.Engine.FillBlocks) before requests ask for them. Requests come
// first: a fill step runs only on a free session, computes at most fillGroup blocks, and waits while every
// session serves. The store stays what it is without the fill, derived from Elasticsearch's contents: a
// block a request misses is computed then. /readyz and /v1/model show the progress (blocks.fill).

const (
	// fillPage is how many documents one listing request reads; fillGroup how many blocks one fill step
	// computes (about 40 tokens each for models/reader135: 8 blocks are one Run of about 0.3 s on 2 cores,
	// the longest a request waits for the fill).
	fillPage, fillGroup = 256, 8
	// fillBusyWait is how long the fill waits when every session is serving before it tries again.
	fillBusyWait = 20 * time.Millisecond
)

// startBlockFill fills store from es's new documents in the background and returns a stop that cancels the
// fill and waits for it to end. opts are the requests' decoding options (the summary cap and title-only make
// a block's tokens; with SummaryCandidates a document is read in either form, and both are filled).
func startBlockFill(es *adapter.Adapter, eng *inference.Engine, store *inference.BlockStore, opts inference.Options, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f := fillBlocks(ctx, es, eng, store, opts)
		switch {
		case f.State == "done":
			log.Info("block store filled from the index", "documents", f.Documents, "computed", f.Computed,
				"seconds", f.Seconds, "store", store.Stats())
		case f.State == "full":
			log.Warn("block store full before every new document of the index was filled: raise experimental.block_store_mb; "+
				"requests compute the other blocks", "documents", f.Documents, "computed", f.Computed, "store", store.Stats())
		case ctx.Err() == nil:
			log.Error("block store fill failed; requests compute the missing blocks", "err", f.Error,
				"documents", f.Documents, "computed", f.Computed)
		}
	}()
	return func() { cancel(); <-done }
}

// errStoreFull stops a fill whose store began to evict.
var errStoreFull = errors.New("the block store is full")

// fillBlocks is startBlockFill's work; it records its progress in the store and returns the last of it. It
// stops when the store starts evicting, or refusing blocks (a full file; state "full": experimental.block_store_mb
// holds fewer blocks than the index has new documents), since filling on would only drop the blocks it computed.
func fillBlocks(ctx context.Context, es *adapter.Adapter, eng *inference.Engine, store *inference.BlockStore, opts inference.Options) inference.BlockFill {
	st := store.Stats()
	fl := filler{eng: eng, store: store, f: inference.BlockFill{State: "running"}, start: time.Now(), dropped: st.Evicted + st.Refused}
	store.SetFill(fl.f)
	err := es.ListNew(ctx, fillPage, func(page []adapter.Hit) error {
		cands := make([]inference.Candidate, len(page))
		for i, h := range page {
			cands[i] = rank.ICICLECandidate(h)
		}
		for form, opts := range blockForms(opts) {
			if err := fl.fill(ctx, opts, cands, form == 0); err != nil {
				return err
			}
		}
		return nil
	})
	f := fl.f
	f.Seconds = time.Since(fl.start).Seconds()
	switch {
	case err == nil:
		f.State = "done"
	case errors.Is(err, errStoreFull):
		// Filling on would evict the blocks just computed: the rest is left to the requests.
		f.State = "full"
	default:
		f.State, f.Error = "failed", err.Error()
	}
	store.SetFill(f)
	return f
}

// blockForms are the forms in which requests under opts read a document's block: with its summary, and
// by title alone when only the first opts.SummaryCandidates candidates have their summaries.
func blockForms(opts inference.Options) []inference.Options {
	full := opts
	full.SummaryCandidates = 0
	forms := []inference.Options{full}
	if opts.SummaryCandidates > 0 && !opts.TitleOnly {
		title := full
		title.TitleOnly = true
		forms = append(forms, title)
	}
	return forms
}

// filler is one fill's work and progress.
type filler struct {
	eng     *inference.Engine
	store   *inference.BlockStore
	f       inference.BlockFill
	start   time.Time
	dropped int64 // the store's evicted and refused blocks when the fill began
}

// fill computes the blocks of cands in one form, fillGroup at a time on a free session, and records the
// progress (documents counted once: in their first form, count).
func (fl *filler) fill(ctx context.Context, opts inference.Options, cands []inference.Candidate, count bool) error {
	for len(cands) > 0 {
		computed, held, err := fl.eng.FillBlocks(ctx, cands[:min(fillGroup, len(cands))], opts)
		if errors.Is(err, inference.ErrBusy) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(fillBusyWait):
				continue
			}
		}
		if err != nil {
			return err
		}
		// A document whose block alone exceeds the prompt is read by no request either: passed over.
		held = max(held, 1)
		if count {
			fl.f.Documents += held
		}
		fl.f.Computed += computed
		fl.f.Seconds = time.Since(fl.start).Seconds()
		fl.store.SetFill(fl.f)
		cands = cands[held:]
		if st := fl.store.Stats(); st.Evicted+st.Refused > fl.dropped {
			return errStoreFull
		}
	}
	return nil
}
