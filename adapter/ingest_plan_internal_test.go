package adapter

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Unit tests of pure logic: Ingest's plan, and how a bulk action and its result are written and read.

func TestPlanIngest(t *testing.T) {
	alpha := Doc{DocID: "Alpha", Title: "Alpha", Text: "alpha text", Summary: "alpha summary"}
	with := func(d Doc, f func(*Doc)) Doc { f(&d); return d }
	// asStored is what is stored of alpha: the same title, text and summary, seen=false, no vector.
	asStored := storedState{text: alpha.Text, title: alpha.Title, summary: alpha.Summary, seqNo: 7, primaryTerm: 2}
	withVector := asStored
	withVector.vector, withVector.vectorModel = []float32{0.6, 0.8}, "enc-v1"
	seen := asStored
	seen.seen = true
	keep := planOptions{keepStored: true}
	tests := []struct {
		name   string
		doc    Doc
		stored *storedState // under the doc's docid; nil: not stored
		opts   planOptions
		want   planOp
		reason string // opRefused: the start of the reason
		// The document as written (opCreate, opUpdate, opIndex, opUnchanged).
		seen        bool
		vector      []float32
		vectorModel string
	}{
		{name: "empty docid is refused", doc: with(alpha, func(d *Doc) { d.DocID = " " }), want: opRefused, reason: "empty docid"},
		{name: "empty title and text are refused", doc: with(alpha, func(d *Doc) { d.Title, d.Text = "", "\t" }), opts: keep,
			want: opRefused, reason: "empty title and text"},
		{name: "a title alone is enough", doc: with(alpha, func(d *Doc) { d.Text = "" }), want: opIndex},
		{name: "without KeepStored: indexed whatever is stored", doc: alpha, stored: &seen, want: opIndex},
		{name: "without KeepStored: the seen flag as sent", doc: with(alpha, func(d *Doc) { d.KeepSeen = true }), stored: &seen,
			want: opIndex, seen: false},
		{name: "not stored: created, seen as sent", doc: with(alpha, func(d *Doc) { d.KeepSeen = true }), opts: keep, want: opCreate},
		{name: "not stored, seen: created seen", doc: with(alpha, func(d *Doc) { d.Seen = true }), opts: keep, want: opCreate, seen: true},
		{name: "another text under the docid: refused", doc: with(alpha, func(d *Doc) { d.Text = "another passage" }), stored: &asStored,
			opts: keep, want: opRefused, reason: ReasonDocIDTaken + ": "},
		{name: "another text with Replace: written over the version read",
			doc: with(alpha, func(d *Doc) { d.Text = "another passage" }), stored: &asStored,
			opts: planOptions{keepStored: true, replace: true}, want: opUpdate},
		{name: "stored as sent: unchanged", doc: alpha, stored: &asStored, opts: keep, want: opUnchanged},
		{name: "a new summary: updated", doc: with(alpha, func(d *Doc) { d.Summary = "new" }), stored: &asStored, opts: keep, want: opUpdate},
		{name: "a new title: updated", doc: with(alpha, func(d *Doc) { d.Title = "Alpha (band)" }), stored: &asStored, opts: keep, want: opUpdate},
		{name: "KeepSeen keeps the stored flag: unchanged", doc: with(alpha, func(d *Doc) { d.KeepSeen = true }), stored: &seen, opts: keep,
			want: opUnchanged, seen: true},
		{name: "seen=false said by the request clears the stored flag", doc: alpha, stored: &seen, opts: keep, want: opUpdate},
		{name: "seen=true sets it", doc: with(alpha, func(d *Doc) { d.Seen = true }), stored: &asStored, opts: keep, want: opUpdate, seen: true},
		{name: "sent without a vector, same text: the stored vector is kept", doc: alpha, stored: &withVector, opts: keep,
			want: opUnchanged, vector: withVector.vector, vectorModel: "enc-v1"},
		{name: "stored vector kept under a new summary", doc: with(alpha, func(d *Doc) { d.Summary = "new" }), stored: &withVector,
			opts: keep, want: opUpdate, vector: withVector.vector, vectorModel: "enc-v1"},
		{name: "a new title drops the stored vector", doc: with(alpha, func(d *Doc) { d.Title = "Alpha (band)" }), stored: &withVector,
			opts: keep, want: opUpdate},
		{name: "with Embed, the stored vector given back: unchanged", doc: with(alpha, func(d *Doc) { d.Vector = []float32{0.6, 0.8} }),
			stored: &withVector, opts: planOptions{keepStored: true, embed: true, vectorModel: "enc-v1"},
			want: opUnchanged, vector: withVector.vector, vectorModel: "enc-v1"},
		{name: "with Embed, a vector of another encoder: updated", doc: with(alpha, func(d *Doc) { d.Vector = []float32{1, 0} }),
			stored: &withVector, opts: planOptions{keepStored: true, embed: true, vectorModel: "enc-v2"},
			want: opUpdate, vector: []float32{1, 0}, vectorModel: "enc-v2"},
		{name: "with Embed, a vector over a document stored without one: updated", doc: with(alpha, func(d *Doc) { d.Vector = []float32{1, 0} }),
			stored: &asStored, opts: planOptions{keepStored: true, embed: true, vectorModel: "enc-v1"},
			want: opUpdate, vector: []float32{1, 0}, vectorModel: "enc-v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stored := map[string]storedState{}
			if tt.stored != nil {
				stored[tt.doc.DocID] = *tt.stored
			}
			other := Doc{DocID: "Other", Title: "Other", Text: "other text"}
			plans := planIngest([]Doc{other, tt.doc}, stored, tt.opts)
			require.Len(t, plans, 2, "one plan per document, in order")
			require.Equal(t, other.DocID, plans[0].doc.DocID)
			p := plans[1]
			require.Equal(t, tt.want, p.op, "op")
			if tt.want == opRefused {
				require.True(t, strings.HasPrefix(p.reason, tt.reason), "reason %q, want it to start with %q", p.reason, tt.reason)
				return
			}
			require.Empty(t, p.reason)
			require.Equal(t, tt.seen, p.doc.Seen, "seen")
			if tt.vector == nil {
				require.Empty(t, p.doc.Vector, "vector")
			} else {
				require.Equal(t, tt.vector, p.doc.Vector, "vector")
				require.Equal(t, tt.vectorModel, p.vectorModel, "vector model")
			}
			if tt.want == opUpdate {
				require.Equal(t, [2]int64{tt.stored.seqNo, tt.stored.primaryTerm}, [2]int64{p.seqNo, p.primaryTerm}, "the version read")
			}
		})
	}
}

func TestStoredVectors(t *testing.T) {
	d := Doc{DocID: "Alpha", Title: "Alpha", Text: "alpha text"}
	st := storedState{text: d.Text, title: d.Title, vector: []float32{0.6, 0.8}, vectorModel: "enc-v1"}
	tests := []struct {
		name   string
		stored *storedState
		model  string
		dims   int
		reused bool
	}{
		{name: "not stored", model: "enc-v1", dims: 2},
		{name: "same title, text and encoder", stored: &st, model: "enc-v1", dims: 2, reused: true},
		{name: "another encoder", stored: &st, model: "enc-v2", dims: 2},
		{name: "another length", stored: &st, model: "enc-v1", dims: 3},
		{name: "another text", stored: &storedState{text: "changed", title: d.Title, vector: st.vector, vectorModel: "enc-v1"}, model: "enc-v1", dims: 2},
		{name: "another title", stored: &storedState{text: d.Text, title: "changed", vector: st.vector, vectorModel: "enc-v1"}, model: "enc-v1", dims: 2},
		{name: "stored without a vector", stored: &storedState{text: d.Text, title: d.Title}, model: "enc-v1", dims: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stored := map[string]storedState{}
			if tt.stored != nil {
				stored[d.DocID] = *tt.stored
			}
			other := Doc{DocID: "Other", Title: "Other", Text: "other"}
			docs := []Doc{other, d}
			need := storedVectors(docs, stored, tt.model, tt.dims)
			if tt.reused {
				require.Equal(t, []int{0}, need)
				require.Equal(t, st.vector, docs[1].Vector)
			} else {
				require.Equal(t, []int{0, 1}, need)
				require.Empty(t, docs[1].Vector)
			}
		})
	}
}

func TestDocPlanAction(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	d := Doc{DocID: "Alpha", Title: "Alpha", Text: "alpha text", Seen: true}
	id := DocumentID("Alpha")
	tests := []struct {
		name     string
		plan     docPlan
		wantMeta string
		wantSrc  string
	}{
		{
			name:     "index",
			plan:     docPlan{op: opIndex, doc: d},
			wantMeta: `{"index":{"_id":"` + id + `"}}`,
			wantSrc:  `{"docid":"Alpha","title":"Alpha","text":"alpha text","seen":true,"ingested_at":"2025-03-01T11:00:00Z"}`,
		},
		{
			name:     "create",
			plan:     docPlan{op: opCreate, doc: d},
			wantMeta: `{"create":{"_id":"` + id + `"}}`,
			wantSrc:  `{"docid":"Alpha","title":"Alpha","text":"alpha text","seen":true,"ingested_at":"2025-03-01T11:00:00Z"}`,
		},
		{
			name: "update over the version read, with a vector",
			plan: docPlan{op: opUpdate, doc: Doc{DocID: "Alpha", Title: "Alpha", Text: "alpha text", Summary: "s", Vector: []float32{0.5, 1}},
				vectorModel: "enc-v1", seqNo: 7, primaryTerm: 2},
			wantMeta: `{"index":{"_id":"` + id + `","if_seq_no":7,"if_primary_term":2}}`,
			wantSrc: `{"docid":"Alpha","title":"Alpha","text":"alpha text","summary":"s","seen":false,` +
				`"ingested_at":"2025-03-01T11:00:00Z","vector":[0.5,1],"vector_model":"enc-v1"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			act, err := tt.plan.action(at)
			require.NoError(t, err)
			lines := strings.Split(string(act.line()), "\n")
			require.Len(t, lines, 3, "meta, source, and the line's end")
			require.JSONEq(t, tt.wantMeta, lines[0])
			require.JSONEq(t, tt.wantSrc, lines[1])
			require.Empty(t, lines[2])
		})
	}
	t.Run("a vector JSON cannot hold is an encoding failure", func(t *testing.T) {
		_, err := docPlan{op: opIndex, doc: Doc{DocID: "Alpha", Text: "t", Vector: []float32{float32(math.NaN())}}}.action(at)
		require.ErrorContains(t, err, "encode: ")
	})
}

func TestBulkResult(t *testing.T) {
	tests := []struct {
		name      string
		item      string // the response item; empty: r.err is set instead
		err       error
		sends     int
		failed    bool
		retryable bool
		reason    string
	}{
		{name: "created", item: `{"index":{"status":201,"result":"created"}}`, sends: 1},
		{name: "noop", item: `{"update":{"status":200,"result":"noop"}}`, sends: 1},
		{name: "rejected as a document", item: `{"index":{"status":400,"error":{"type":"document_parsing_exception","reason":"bad seen"}}}`, sends: 1,
			failed: true, reason: "document_parsing_exception: bad seen"},
		{name: "a version conflict is not retryable by itself", item: `{"index":{"status":409,"error":{"type":"version_conflict_engine_exception","reason":"v"}}}`,
			sends: 1, failed: true, reason: "version_conflict_engine_exception: v"},
		{name: "shed on the first send", item: `{"update":{"status":429,"error":{"type":"es_rejected_execution_exception","reason":"full"}}}`, sends: 1,
			failed: true, retryable: true, reason: "es_rejected_execution_exception: full"},
		{name: "shed at every send", item: `{"index":{"status":503,"error":{"type":"unavailable_shards_exception","reason":"x"}}}`, sends: 4,
			failed: true, retryable: true, reason: "unavailable_shards_exception: x (sent 4 times)"},
		{name: "a status without an error", item: `{"index":{"status":500}}`, sends: 1, failed: true, reason: "status 500"},
		{name: "not answered", err: errNoResult, failed: true, retryable: true, reason: "no result from the bulk indexer"},
		{name: "the request failed", err: errors.New("bulk request: elasticsearch: 503 Service Unavailable"), failed: true, retryable: true,
			reason: "bulk request: elasticsearch: 503 Service Unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := bulkResult{err: tt.err, sends: tt.sends}
			if tt.item != "" {
				var res bulkResponse
				require.NoError(t, json.Unmarshal([]byte(`{"items":[`+tt.item+`]}`), &res))
				r = res.result(0)
				r.sends = tt.sends
			}
			require.Equal(t, tt.failed, r.failed(), "failed")
			if tt.failed {
				require.Equal(t, tt.retryable, r.retryable(), "retryable")
				require.Equal(t, tt.reason, r.reason())
			}
		})
	}
}
