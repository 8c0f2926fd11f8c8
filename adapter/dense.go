package adapter

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/elastic/go-elasticsearch/v8/esapi"
)

// DenseQuery is one search of Dense: either the kNN top K over the index (OnlyNew: over seen=false
// documents), or, with IDs, the exact cosine of those documents (by _id) and no others.
type DenseQuery struct {
	// K is how many nearest documents the kNN search returns; ignored with IDs.
	K int
	// OnlyNew restricts the kNN search to documents the model was not trained on.
	OnlyNew bool
	// IDs are Elasticsearch _ids whose exact cosine is wanted (at most MaxK).
	IDs []string
}

// Dense runs the queries with vec in one multi-search and returns each one's hits, nearest first, with
// Dense (and Score) the cosine of vec and the document's vector. kNN hits carry ID, DocID and Seen (doc
// values, as SearchLean; Sources reads the rest); IDs hits carry only ID, since the caller has the rest.
// A document without a vector is never returned; an index that does not map the vector field fails the
// call with a *MappingError (ErrMappingMismatch) rather than answering no hits.
// Scores are exact under the default index type, plain HNSW over the float vectors (a kNN query filtered to
// at most num_candidates ids is searched exhaustively); under a quantised type (Options.VectorIndex) they are
// the node's estimate, or the floats' cosines where it rescores (bbq_hnsw by default). Any one search failing
// fails the call.
func (a *Adapter) Dense(ctx context.Context, vec []float32, qs []DenseQuery) ([][]Hit, error) {
	if a.vectorDims <= 0 {
		return nil, fmt.Errorf("dense search %q: %w: the adapter has no vector dims (no encoder configured)", a.index, ErrInvalidArgument)
	}
	if len(vec) != a.vectorDims {
		return nil, fmt.Errorf("dense search %q: %w: query vector has %d dims, the index %d", a.index, ErrInvalidArgument, len(vec), a.vectorDims)
	}
	if len(qs) == 0 {
		return nil, nil
	}
	key := make([]byte, 0, 4*len(vec))
	for _, x := range vec {
		key = binary.LittleEndian.AppendUint32(key, math.Float32bits(x))
	}
	header := map[string]any{"allow_partial_search_results": false, "preference": preference(key)} // as whole() and search do
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	for i, q := range qs {
		s, err := a.denseBody(vec, q)
		if err != nil {
			return nil, fmt.Errorf("dense search %q: query %d: %w", a.index, i, err)
		}
		_ = enc.Encode(header)
		_ = enc.Encode(s)
	}
	var res struct {
		Responses []struct {
			Status int `json:"status"`
			Error  *struct {
				Type   string `json:"type"`
				Reason string `json:"reason"`
			} `json:"error"`
			Hits struct {
				Hits []leanHit `json:"hits"`
			} `json:"hits"`
		} `json:"responses"`
	}
	req := esapi.MsearchRequest{Index: []string{a.index}, Body: &body}
	if err := a.do(ctx, req, &res); err != nil {
		return nil, fmt.Errorf("dense search %q: %w", a.index, err)
	}
	if len(res.Responses) != len(qs) {
		return nil, fmt.Errorf("dense search %q: %d responses for %d searches", a.index, len(res.Responses), len(qs))
	}
	out := make([][]Hit, len(qs))
	found := false
	for i, r := range res.Responses {
		if r.Error != nil {
			return nil, fmt.Errorf("dense search %q: search %d: %w", a.index, i, &ResponseError{Status: r.Status, Type: r.Error.Type, Reason: r.Error.Reason})
		}
		hits := make([]Hit, 0, len(r.Hits.Hits))
		for j, h := range r.Hits.Hits {
			hit := a.leanHit(h, j+1)
			if h.Score != nil {
				// dot_product similarity scores (1 + cos) / 2, a float32: 6 decimals are all it carries.
				hit.Dense, hit.HasDense = math.Round((2*(*h.Score)-1)*1e6)/1e6, true
				hit.Score = hit.Dense
			}
			hits = append(hits, hit)
		}
		out[i] = hits
		found = found || len(hits) > 0
	}
	if !found {
		// 8.x refuses a kNN search over a field the index does not map (query_shard_exception); 9.x answers
		// it with no hits, which would read as "no document has a vector near". Nothing found anywhere is
		// rare enough to ask the mapping then, so that both versions fail alike.
		if err := a.vectorMapped(ctx); err != nil {
			return nil, fmt.Errorf("dense search %q: %w", a.index, err)
		}
	}
	return out, nil
}

// vectorMapped returns a *MappingError when no index behind the adapter's index (an alias may name
// several) maps the vector field.
func (a *Adapter) vectorMapped(ctx context.Context) error {
	var res map[string]struct {
		Mappings map[string]json.RawMessage `json:"mappings"`
	}
	req := esapi.IndicesGetFieldMappingRequest{Index: []string{a.index}, Fields: []string{a.f.Vector}}
	if err := a.do(ctx, req, &res); err != nil {
		return fmt.Errorf("read the vector field's mapping: %w", err)
	}
	for _, idx := range res {
		if _, ok := idx.Mappings[a.f.Vector]; ok {
			return nil
		}
	}
	return &MappingError{Field: a.f.Vector,
		Problem: `missing, want type "dense_vector" (the sidecar adds it at its start; icicle enrich fills it)`}
}

func (a *Adapter) denseBody(vec []float32, q DenseQuery) (map[string]any, error) {
	if len(q.IDs) > 0 {
		if len(q.IDs) > MaxK {
			return nil, fmt.Errorf("%w: %d ids, at most %d", ErrInvalidArgument, len(q.IDs), MaxK)
		}
		return map[string]any{
			"size":             len(q.IDs),
			"_source":          false,
			"track_total_hits": false,
			"query": map[string]any{"knn": map[string]any{
				"field": a.f.Vector, "query_vector": vec, "num_candidates": len(q.IDs),
				"filter": map[string]any{"ids": map[string]any{"values": q.IDs}},
			}},
		}, nil
	}
	if q.K < 1 || q.K > MaxK {
		return nil, fmt.Errorf("%w: k=%d, want 1..%d", ErrInvalidArgument, q.K, MaxK)
	}
	knn := map[string]any{"field": a.f.Vector, "query_vector": vec, "k": q.K, "num_candidates": min(MaxK, max(2*q.K, 100))}
	if q.OnlyNew {
		knn["filter"] = a.f.notSeen()
	}
	return map[string]any{"size": q.K, "knn": knn, "_source": false, "docvalue_fields": a.f.leanFields(), "track_total_hits": false}, nil
}
