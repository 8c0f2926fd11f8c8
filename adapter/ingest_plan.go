package adapter

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// planOp is what Ingest does with one document.
type planOp int

const (
	// opRefused: not written, and not retryable; docPlan.reason says why.
	opRefused planOp = iota
	// opUnchanged: stored already as it would be written (KeepStored); not written again.
	opUnchanged
	// opCreate: not stored (KeepStored); the "create" action fails if someone else created it since the read.
	opCreate
	// opUpdate: stored (KeepStored); the "index" action writes over the version read, and only over it.
	opUpdate
	// opIndex: without KeepStored, the "index" action creates the document or replaces the stored one.
	opIndex
)

// planOptions are what of IngestOptions the plan depends on.
type planOptions struct {
	keepStored, replace bool
	// embed is set when IngestOptions.Embed computes the vectors; vectorModel names their encoder.
	embed       bool
	vectorModel string
}

// docPlan is the decision for one document.
type docPlan struct {
	op planOp
	// reason says why an opRefused document is refused.
	reason string
	// doc is the document as written: the seen flag decided, a stored vector kept; vectorModel names the
	// encoder of doc.Vector.
	doc         Doc
	vectorModel string
	// seqNo and primaryTerm are the version an opUpdate writes over.
	seqNo, primaryTerm int64
}

// planIngest decides, for each document of docs and in order, whether Ingest refuses it, leaves it as stored,
// creates, updates or indexes it, given what is stored under their docids (read by readStored; nil without
// KeepStored). Ingest refuses invalid documents as it draws them, so that they are neither read nor embedded;
// the plan refuses them as well, so that it holds for any input.
func planIngest(docs []Doc, stored map[string]storedState, o planOptions) []docPlan {
	plans := make([]docPlan, len(docs))
	for k, d := range docs {
		plans[k] = planDoc(d, stored, o)
	}
	return plans
}

func planDoc(d Doc, stored map[string]storedState, o planOptions) docPlan {
	if reason := invalidDoc(d); reason != "" {
		return docPlan{op: opRefused, reason: reason, doc: d}
	}
	p := docPlan{op: opIndex, doc: d, vectorModel: o.vectorModel}
	if !o.keepStored {
		return p
	}
	st, ok := stored[d.DocID]
	switch {
	case !ok:
		p.op = opCreate
	case st.text != d.Text && !o.replace:
		return docPlan{op: opRefused, doc: d, reason: ReasonDocIDTaken + ": a document with a different text is stored " +
			"under this docid (another document with the same title?); not overwritten (send it with replace to overwrite)"}
	default:
		p.doc.Seen = d.Seen || (d.KeepSeen && st.seen)
		if len(d.Vector) == 0 && !o.embed && st.text == d.Text && st.title == d.Title && st.vectorModel != "" {
			// Sent without a vector (POST /v1/ingest embeds nothing): the same text keeps its stored one.
			p.doc.Vector, p.vectorModel = st.vector, st.vectorModel
		}
		p.op, p.seqNo, p.primaryTerm = opUpdate, st.seqNo, st.primaryTerm
		if st.same(p.doc, p.vectorModel) {
			p.op = opUnchanged
		}
	}
	return p
}

// storedVectors gives each document of docs whose stored version (stored, by docid) has the same title and
// text and a vector of model with dims dimensions that vector, and returns the positions of the others: the
// documents IngestOptions.Embed has to embed.
func storedVectors(docs []Doc, stored map[string]storedState, model string, dims int) (need []int) {
	for k, d := range docs {
		if st, ok := stored[d.DocID]; ok && st.vectorModel == model && len(st.vector) == dims &&
			st.text == d.Text && st.title == d.Title {
			docs[k].Vector = st.vector
			continue
		}
		need = append(need, k)
	}
	return need
}

// action returns the bulk action that carries out an opCreate, opUpdate or opIndex plan, the document
// stamped as ingested at at.
func (p docPlan) action(at time.Time) (bulkAction, error) {
	src := stored{DocID: p.doc.DocID, Title: p.doc.Title, Text: p.doc.Text, Summary: p.doc.Summary, Seen: p.doc.Seen,
		IngestedAt: at.UTC()}
	if len(p.doc.Vector) > 0 {
		src.Vector, src.VectorModel = p.doc.Vector, p.vectorModel
	}
	body, err := json.Marshal(src)
	if err != nil {
		return bulkAction{}, fmt.Errorf("encode: %w", err)
	}
	act := bulkAction{op: "index", id: DocumentID(p.doc.DocID), source: body}
	switch p.op {
	case opCreate:
		act.op = "create"
	case opUpdate:
		act.seqNo, act.primaryTerm = &p.seqNo, &p.primaryTerm
	}
	return act, nil
}

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

// same reports whether the stored document already holds what writing d (its seen flag decided, its vector
// of vectorModel) would store, ingested_at aside.
func (st *storedState) same(d Doc, vectorModel string) bool {
	if st.text != d.Text || st.title != d.Title || st.summary != d.Summary || st.seen != d.Seen {
		return false
	}
	if len(d.Vector) == 0 {
		return st.vectorModel == "" // writing would drop a stored vector
	}
	return st.vectorModel == vectorModel && slices.Equal(st.vector, d.Vector)
}

// invalidDoc returns why a document cannot be indexed, naming the field, or "".
func invalidDoc(d Doc) string {
	switch {
	case strings.TrimSpace(d.DocID) == "":
		return "empty docid"
	case strings.TrimSpace(d.Text) == "" && strings.TrimSpace(d.Title) == "":
		return "empty title and text"
	}
	return ""
}
