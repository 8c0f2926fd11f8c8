package adapter

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// fieldSpec is what the package needs of one mapped field.
type fieldSpec struct {
	typ    string
	fields map[string]string // multi-fields: name -> type
	dims   int               // dense_vector only: the vector's length
	index  string            // dense_vector only: its index_options type (VectorIndexTypes)
}

// wantFields is the contract between this package and the index. Changing it is a mapping migration:
// EnsureIndex will reject existing indices until they are rebuilt.
var wantFields = map[string]fieldSpec{
	"docid":       {typ: "keyword"},
	"title":       {typ: "text", fields: map[string]string{"keyword": "keyword"}},
	"text":        {typ: "text"},
	"summary":     {typ: "text"},
	"seen":        {typ: "boolean"},
	"ingested_at": {typ: "date"},
}

// Vector fields (Options.VectorDims > 0): the first stage's document vector and the name of the encoder
// that made it, so vectors of another encoder are found and replaced (Enrich) rather than compared.
const (
	// VectorField holds the document's dense vector (dense_vector, indexed for kNN, dot_product over
	// L2-normalised vectors).
	VectorField = "vector"
	// VectorModelField holds the name of the encoder that made VectorField.
	VectorModelField = "vector_model"
)

// fields returns the mapping contract of this adapter: wantFields, and the vector fields when the
// adapter stores vectors.
func (a *Adapter) fields() map[string]fieldSpec {
	if a.vectorDims <= 0 {
		return wantFields
	}
	out := make(map[string]fieldSpec, len(wantFields)+2)
	for k, v := range wantFields {
		out[k] = v
	}
	for k, v := range vectorFields(a.vectorDims, a.vectorIndex) {
		out[k] = v
	}
	return out
}

func vectorFields(dims int, index string) map[string]fieldSpec {
	return map[string]fieldSpec{VectorField: {typ: "dense_vector", dims: dims, index: index}, VectorModelField: {typ: "keyword"}}
}

// DefaultVectorIndex is the index_options type of the vector fields the sidecar maps unless told otherwise:
// plain HNSW, no quantisation (fieldMapping says why). exactVectorIndex is the one type whose cosines are exact.
const (
	DefaultVectorIndex = "hnsw"
	exactVectorIndex   = "hnsw"
)

// VectorIndexTypes are the index_options types Options.VectorIndex may name: HNSW over float vectors, or
// over vectors quantised to 8 bits or 1 bit (bbq_hnsw: Elasticsearch 8.18 and later).
var VectorIndexTypes = []string{"hnsw", "int8_hnsw", "bbq_hnsw"}

// fieldMapping is the mapping of one field as sent to Elasticsearch.
func fieldMapping(f fieldSpec) map[string]any {
	p := map[string]any{"type": f.typ}
	if f.typ == "dense_vector" {
		// index_options is always given, never left to the node's default: 8.14 quantises new float vectors
		// by default (int8_hnsw), and 9.1+ maps 384 and more dims to bbq_hnsw (1-bit, rescored from the
		// floats). The default, plain HNSW, keeps the kNN search's scores exact cosines, comparable with the
		// exact ones of an ids-filtered search (Dense), so the first stage ranks and scores alike on 8.x and
		// 9.x; a quantised type is a choice of memory over that (Options.VectorIndex). checkMapping holds
		// the sidecar's index to the type it was created with.
		p["dims"], p["index"], p["similarity"] = f.dims, true, "dot_product"
		p["index_options"] = map[string]any{"type": cmp.Or(f.index, DefaultVectorIndex)}
	}
	if len(f.fields) > 0 {
		sub := map[string]any{}
		for n, t := range f.fields {
			s := map[string]any{"type": t}
			if t == "keyword" {
				// Terms over 32 KiB are rejected by Lucene; the title is for exact lookup, not storage.
				s["ignore_above"] = 1024
			}
			sub[n] = s
		}
		p["fields"] = sub
	}
	return p
}

// indexBody is the create-index request: shards primary shards (one by default: one shard keeps BM25
// statistics global, so scores do not depend on routing; more spread a large index over nodes and over
// `icicle enrich` workers) and a strict mapping so a typo in a field name fails the write instead of creating
// a new field.
func indexBody(want map[string]fieldSpec, shards int) []byte {
	props := map[string]any{}
	for name, f := range want {
		props[name] = fieldMapping(f)
	}
	b, err := json.Marshal(map[string]any{
		"settings": map[string]any{"index": map[string]any{"number_of_shards": max(shards, 1)}},
		"mappings": map[string]any{"dynamic": "strict", "properties": props},
	})
	if err != nil {
		panic(err) // static data
	}
	return b
}

// mappedField is the part of a field mapping the check reads.
type mappedField struct {
	Type         string                 `json:"type"`
	Dims         int                    `json:"dims"`
	IndexOptions indexOptions           `json:"index_options"`
	Fields       map[string]mappedField `json:"fields"`
	Properties   map[string]mappedField `json:"properties"`
}

// indexOptions is a dense_vector's index_options: its type is hnsw, int8_hnsw, bbq_hnsw, flat, ...
type indexOptions struct {
	Type string `json:"type"`
}

func (f mappedField) kind() string {
	if f.Type == "" {
		return "object"
	}
	return f.Type
}

// checkMapping compares the properties of one index's mapping with want. It returns nil or the
// errors.Join of one *MappingError per problem, in field order.
func checkMapping(props map[string]mappedField, want map[string]fieldSpec) error {
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		want := want[name]
		got, ok := props[name]
		if !ok {
			errs = append(errs, &MappingError{Field: name, Problem: fmt.Sprintf("missing, want type %q", want.typ)})
			continue
		}
		if got.kind() != want.typ {
			errs = append(errs, &MappingError{Field: name, Problem: fmt.Sprintf("type is %q, want %q", got.kind(), want.typ)})
			continue
		}
		if want.dims > 0 && got.Dims != want.dims {
			errs = append(errs, &MappingError{Field: name, Problem: fmt.Sprintf("dims is %d, the encoder's vectors have %d (another encoder's index: use its encoder, or a new index)", got.Dims, want.dims)})
			continue
		}
		if wantIndex := cmp.Or(want.index, DefaultVectorIndex); want.typ == "dense_vector" &&
			cmp.Or(got.IndexOptions.Type, exactVectorIndex) != wantIndex {
			// Not the type configured (first_stage.vector_index): changing it means a new index, as the
			// vectors' graph is built for one type. Mappings from before 8.14 may not report the type; their
			// default was hnsw.
			errs = append(errs, &MappingError{Field: name, Problem: fmt.Sprintf("index_options type is %q, want %q "+
				"(first_stage.vector_index; another type needs a new index)", got.IndexOptions.Type, wantIndex)})
			continue
		}
		subs := make([]string, 0, len(want.fields))
		for n := range want.fields {
			subs = append(subs, n)
		}
		sort.Strings(subs)
		for _, sub := range subs {
			wt := want.fields[sub]
			g, ok := got.Fields[sub]
			switch {
			case !ok:
				errs = append(errs, &MappingError{Field: name + "." + sub, Problem: fmt.Sprintf("missing, want type %q", wt)})
			case g.kind() != wt:
				errs = append(errs, &MappingError{Field: name + "." + sub, Problem: fmt.Sprintf("type is %q, want %q", g.kind(), wt)})
			}
		}
	}
	return errors.Join(errs...)
}

// mappingResponse is GET /<index>/_mapping: concrete index name -> mapping. An alias may resolve to several.
type mappingResponse map[string]struct {
	Mappings struct {
		Properties map[string]mappedField `json:"properties"`
	} `json:"mappings"`
}

// lacksAll reports whether every index in the response has none of the fields.
func (m mappingResponse) lacksAll(fields map[string]fieldSpec) bool {
	for _, idx := range m {
		for name := range fields {
			if _, ok := idx.Mappings.Properties[name]; ok {
				return false
			}
		}
	}
	return len(m) > 0
}

// check verifies every index in the response. Problems are prefixed with the concrete index name when it
// differs from the requested one (an alias).
func (m mappingResponse) check(requested string, want map[string]fieldSpec) error {
	return m.checkWith(requested, func(props map[string]mappedField) error { return checkMapping(props, want) })
}

// checkWith verifies every index in the response with check, as check does.
func (m mappingResponse) checkWith(requested string, check func(map[string]mappedField) error) error {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs []error
	for _, n := range names {
		err := check(m[n].Mappings.Properties)
		switch {
		case err == nil:
		case n == requested:
			errs = append(errs, err)
		default:
			errs = append(errs, fmt.Errorf("index %q: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// lookup finds a field by its dotted path through object properties and multi-fields.
func lookup(props map[string]mappedField, path string) (mappedField, bool) {
	head, rest, nested := strings.Cut(path, ".")
	f, ok := props[head]
	if !ok || !nested {
		return f, ok
	}
	if g, ok := lookup(f.Properties, rest); ok {
		return g, true
	}
	return lookup(f.Fields, rest)
}

// quantizedVectors lists, as "index: type", each index of the response whose vector field (at path) has
// an index_options type other than exactVectorIndex: a team's own vector field, mapped before the sidecar
// came, with the node's default (int8_hnsw on 8.14+, bbq_hnsw for 384+ dims on 9.1+). It still serves,
// but the kNN's and the exact lookups' cosines are then approximate, and differ between 8.x and 9.x.
func (m mappingResponse) quantizedVectors(path string) []string {
	var out []string
	for name, idx := range m {
		if f, ok := lookup(idx.Mappings.Properties, path); ok && f.kind() == "dense_vector" &&
			f.IndexOptions.Type != "" && f.IndexOptions.Type != exactVectorIndex {
			out = append(out, name+": "+f.IndexOptions.Type)
		}
	}
	sort.Strings(out)
	return out
}

// ownFields are the sidecar's fields in a team's index, with the types they must have.
func (a *Adapter) ownFields() map[string]fieldSpec {
	out := map[string]fieldSpec{a.f.Summary: {typ: "text"}, a.f.Seen: {typ: "boolean"}}
	if a.vectorDims > 0 {
		out[a.f.Vector] = fieldSpec{typ: "dense_vector", dims: a.vectorDims, index: a.vectorIndex}
		out[a.f.VectorModel] = fieldSpec{typ: "keyword"}
	}
	return out
}

// checkTeam checks a team's index: the fields named for the team's documents exist (the docid a keyword,
// unless it is the _id), and the sidecar's fields, where present, have the sidecar's types. With missing,
// the sidecar's fields that are absent are listed into it instead of being problems.
func (a *Adapter) checkTeam(props map[string]mappedField, missing map[string]fieldSpec) error {
	var errs []error
	need := func(field, name string, types ...string) {
		got, ok := lookup(props, name)
		switch {
		case !ok:
			errs = append(errs, &MappingError{Field: name, Problem: fmt.Sprintf("missing: fields.%s names it", field)})
		case len(types) > 0 && !slices.Contains(types, got.kind()):
			errs = append(errs, &MappingError{Field: name, Problem: fmt.Sprintf("type is %q, fields.%s needs %s", got.kind(), field, strings.Join(types, " or "))})
		}
	}
	if a.f.DocID != IDField {
		need("docid", a.f.DocID, "keyword")
	}
	need("title", a.f.Title, "text", "keyword", "match_only_text")
	own := a.ownFields()
	for _, s := range a.f.searchNames() {
		if _, ours := own[s]; !ours { // the sidecar's summary may be searched: it is added below if missing
			need("search", s)
		}
	}
	for _, b := range a.f.Body {
		need("body", b, "text", "keyword", "match_only_text")
	}
	names := make([]string, 0, len(own))
	for n := range own {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		want := own[name]
		got, ok := lookup(props, name)
		switch {
		case !ok && missing != nil:
			missing[name] = want
		case !ok:
			errs = append(errs, &MappingError{Field: name, Problem: fmt.Sprintf("missing, want type %q (the sidecar adds it: icicle enrich, or its start)", want.typ)})
		case got.kind() != want.typ:
			errs = append(errs, &MappingError{Field: name, Problem: fmt.Sprintf("type is %q, the sidecar needs %q here: name another field for it (fields.*)", got.kind(), want.typ)})
		case want.dims > 0 && got.Dims != want.dims:
			errs = append(errs, &MappingError{Field: name, Problem: fmt.Sprintf("dims is %d, the encoder's vectors have %d", got.Dims, want.dims)})
		}
	}
	return errors.Join(errs...)
}
