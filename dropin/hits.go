package dropin

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/icicle-search/sidecar/adapter"
)

// ESHit is one hit as Elasticsearch returns it in hits.hits.
type ESHit struct {
	ID     string          `json:"_id"`
	Index  string          `json:"_index,omitempty"`
	Score  *float64        `json:"_score"`
	Source json.RawMessage `json:"_source"`
}

// SourceFields name the _source fields a hit's docid, title and summary are read from.
type SourceFields struct {
	DocID, Title, Summary string
}

// WithDefaults returns f with the fields it leaves empty named as in the sidecar's own layout: docid,
// title, summary.
func (f SourceFields) WithDefaults() SourceFields {
	f.DocID = cmp.Or(f.DocID, "docid")
	f.Title = cmp.Or(f.Title, "title")
	f.Summary = cmp.Or(f.Summary, "summary")
	return f
}

// read lists the _source fields the model reads of a hit.
func (f SourceFields) read() []string {
	if f.DocID == adapter.IDField {
		return []string{f.Title, f.Summary}
	}
	return []string{f.DocID, f.Title, f.Summary}
}

// Hits reads the title (docid) and summary out of each hit's _source: the candidates of /v1/rerank and of
// the drop-in's rank window.
//
// The title is required, and is the docid unless the docid field (or the _id, with a team's index keyed
// by it: adapter.IDField) says otherwise. A problem is an *InputError naming the hit's field
// ("hits[3]._source.title").
func (f SourceFields) Hits(in []ESHit) ([]adapter.Hit, error) {
	hits := make([]adapter.Hit, len(in))
	for i, h := range in {
		field := func(f string) string { return "hits[" + strconv.Itoa(i) + "]" + f }
		if len(h.Source) == 0 {
			return nil, &InputError{Field: field("._source"), Problem: "required"}
		}
		var src map[string]json.RawMessage
		if err := json.Unmarshal(h.Source, &src); err != nil {
			return nil, &InputError{Field: field("._source"), Problem: "must be an object with string " + f.Title + " and " + f.Summary + ": " + err.Error()}
		}
		title, err := sourceString(src, f.Title)
		if err == nil && strings.TrimSpace(title) == "" {
			err = errors.New("required (the title is the docid)")
		}
		if err != nil {
			return nil, &InputError{Field: field("._source." + f.Title), Problem: err.Error()}
		}
		hits[i] = adapter.Hit{ID: h.ID, DocID: title, Title: title, Rank: i + 1}
		if f.DocID == adapter.IDField && h.ID != "" {
			hits[i].DocID = h.ID
		} else if d, err := sourceString(src, f.DocID); err == nil && d != "" {
			hits[i].DocID = d
		} else if err != nil {
			return nil, &InputError{Field: field("._source." + f.DocID), Problem: err.Error()}
		}
		summary, err := sourceString(src, f.Summary)
		if err != nil {
			return nil, &InputError{Field: field("._source." + f.Summary), Problem: err.Error()}
		}
		hits[i].Summary = summary
		if h.Score != nil {
			hits[i].Score = *h.Score
		}
	}
	return hits, nil
}

// rawHits reads hits.hits entries as Hits reads a request's hits.
func (f SourceFields) rawHits(raw []json.RawMessage) ([]adapter.Hit, error) {
	es := make([]ESHit, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &es[i]); err != nil {
			return nil, err
		}
	}
	return f.Hits(es)
}

// sourceString reads the string at a field's dotted path in a hit's _source ("" when absent, an array's
// first string); anything else is an error saying what it is.
func sourceString(src map[string]json.RawMessage, path string) (string, error) {
	raw, ok := src[path]
	if !ok {
		head, rest, nested := strings.Cut(path, ".")
		var inner map[string]json.RawMessage
		if !nested || json.Unmarshal(src[head], &inner) != nil {
			return "", nil
		}
		return sourceString(inner, rest)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		if len(ss) > 0 {
			return ss[0], nil
		}
		return "", nil
	}
	if string(raw) == "null" {
		return "", nil
	}
	return "", fmt.Errorf("must be a string, got JSON %s", Excerpt(raw))
}

// Excerpt shortens a JSON value quoted in an error to its first 32 bytes (cut at a character), so that one
// bad value cannot flood the answer.
func Excerpt(b []byte) string {
	if len(b) <= 32 {
		return string(b)
	}
	cut := 32
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return string(b[:cut]) + "..."
}
