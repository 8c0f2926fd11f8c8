package adapter

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// IDField as Fields.DocID takes each document's docid from its Elasticsearch _id.
const IDField = "_id"

// Fields name the fields the adapter reads and writes. The zero value (every name empty) is the
// sidecar's own layout (package doc): an index EnsureIndex creates with a strict mapping. Any other value
// describes a team's own index, searched as it is: its shards, analyzers and other fields untouched; the
// sidecar's fields (Summary, Seen, Vector, VectorModel) are added to its mapping when missing, and filled
// by `icicle enrich` with partial updates that change nothing else.
type Fields struct {
	// DocID holds the docid (the title the model reads and copies, and what seen_docids.txt lists); IDField
	// takes the _id. Default "docid".
	DocID string
	// Title is the title shown in results. Default "title".
	Title string
	// Search are the fields BM25's multi_match searches (best_fields, tie_breaker 0.5), with optional
	// boosts ("name^2"). Default title, text.
	Search []string
	// Body are the fields whose text, after the title, summaries and vectors are made from. Default text.
	Body []string
	// Summary, Seen, Vector and VectorModel are the sidecar's own fields. Defaults summary, seen, vector,
	// vector_model.
	Summary, Seen, Vector, VectorModel string
}

// DefaultFields is the sidecar's own layout.
var DefaultFields = Fields{DocID: "docid", Title: "title", Search: []string{"title", "text"}, Body: []string{"text"},
	Summary: "summary", Seen: "seen", Vector: VectorField, VectorModel: VectorModelField}

// withDefaults fills every empty name with DefaultFields'.
func (f Fields) withDefaults() Fields {
	d := DefaultFields
	if f.DocID != "" {
		d.DocID = f.DocID
	}
	if f.Title != "" {
		d.Title = f.Title
	}
	if len(f.Search) > 0 {
		d.Search = f.Search
	}
	if len(f.Body) > 0 {
		d.Body = f.Body
	}
	for _, p := range []struct {
		dst *string
		v   string
	}{{&d.Summary, f.Summary}, {&d.Seen, f.Seen}, {&d.Vector, f.Vector}, {&d.VectorModel, f.VectorModel}} {
		if p.v != "" {
			*p.dst = p.v
		}
	}
	return d
}

// own reports whether f (with defaults) is the sidecar's own layout.
func (f Fields) own() bool {
	d := DefaultFields
	return f.DocID == d.DocID && f.Title == d.Title && slices.Equal(f.Search, d.Search) && slices.Equal(f.Body, d.Body) &&
		f.Summary == d.Summary && f.Seen == d.Seen && f.Vector == d.Vector && f.VectorModel == d.VectorModel
}

// Validate reports every problem of the names at once, naming the field.
func (f Fields) Validate() error {
	f = f.withDefaults()
	var errs []error
	valid := func(key, name string, idOK bool) {
		switch {
		case name == IDField && idOK:
		case strings.HasPrefix(name, "_"):
			errs = append(errs, fmt.Errorf("fields.%s: %q is a metadata field; only fields.docid may be %q", key, name, IDField))
		case strings.ContainsAny(name, " ,*^"):
			errs = append(errs, fmt.Errorf("fields.%s: %q is not a field name", key, name))
		}
	}
	valid("docid", f.DocID, true)
	valid("title", f.Title, false)
	for _, s := range f.Search {
		name, boost, ok := strings.Cut(s, "^")
		valid("search", name, false)
		if ok && boost == "" {
			errs = append(errs, fmt.Errorf("fields.search: %q has an empty boost", s))
		}
	}
	for _, b := range f.Body {
		valid("body", b, false)
	}
	own := map[string]string{"summary": f.Summary, "seen": f.Seen, "vector": f.Vector, "vector_model": f.VectorModel}
	for key, name := range own {
		valid(key, name, false)
	}
	names := []string{f.Summary, f.Seen, f.Vector, f.VectorModel}
	for i, a := range names {
		for _, b := range names[i+1:] {
			if a == b {
				errs = append(errs, fmt.Errorf("fields: the sidecar's fields must differ, %q is named twice", a))
			}
		}
		if a == f.DocID || a == f.Title || slices.Contains(f.Body, a) {
			errs = append(errs, fmt.Errorf("fields: the sidecar's field %q is also one of the team's (docid, title or body): enrichment would overwrite it", a))
		}
	}
	return errors.Join(errs...)
}

// searchNames are Search without boosts.
func (f Fields) searchNames() []string {
	out := make([]string, len(f.Search))
	for i, s := range f.Search {
		out[i], _, _ = strings.Cut(s, "^")
	}
	return out
}

// sourceFields are the _source fields a read returns: docid (unless it is the _id), title and summary;
// never the body, which can be tens of kilobytes.
func (f Fields) sourceFields() []string {
	out := []string{f.Title, f.Summary}
	if f.DocID != IDField {
		out = append([]string{f.DocID}, out...)
	}
	return out
}

// leanFields are the doc values a lean search returns: the docid (unless it is the _id) and the seen flag.
func (f Fields) leanFields() []string {
	if f.DocID == IDField {
		return []string{f.Seen}
	}
	return []string{f.DocID, f.Seen}
}

// notSeen is the filter of new documents: not marked seen (a document without the flag, not yet enriched
// in a team's index, counts as new).
func (f Fields) notSeen() map[string]any {
	return map[string]any{"bool": map[string]any{"must_not": []any{map[string]any{"term": map[string]any{f.Seen: true}}}}}
}

// read decodes one hit's _id and _source into a Hit's DocID, Title and Summary. A field holding an array
// gives its first string.
func (f Fields) read(id string, src json.RawMessage) (docid, title, summary string) {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(src, &m)
	docid = id
	if f.DocID != IDField {
		docid = sourceString(m, f.DocID)
	}
	return docid, sourceString(m, f.Title), sourceString(m, f.Summary)
}

// sourceString is the string at a field's path in a _source: a dotted path walks objects (or names a
// key with dots, as a flat _source may have); an array gives its first string; anything else is "".
func sourceString(m map[string]json.RawMessage, path string) string {
	raw, ok := m[path]
	if !ok {
		head, rest, nested := strings.Cut(path, ".")
		var inner map[string]json.RawMessage
		if !nested || json.Unmarshal(m[head], &inner) != nil {
			return ""
		}
		return sourceString(inner, rest)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil && len(ss) > 0 {
		return ss[0]
	}
	return ""
}

// readLean decodes a lean hit's doc values: docid (or the _id) and the seen flag.
func (f Fields) readLean(id string, fields map[string]json.RawMessage) (docid string, seen bool) {
	docid = id
	if f.DocID != IDField {
		var ds []string
		if json.Unmarshal(fields[f.DocID], &ds) == nil && len(ds) > 0 {
			docid = ds[0]
		}
	}
	var ss []bool
	if json.Unmarshal(fields[f.Seen], &ss) == nil && len(ss) > 0 {
		seen = ss[0]
	}
	return docid, seen
}
