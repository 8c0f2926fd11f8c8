package adapter_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
)

// TestDenseUnmappedVector: 9.x answers a kNN search over a field the index does not map with no hits
// (dense_unmapped_9x.json, captured from 9.5.3), where 8.x refuses it; Dense then asks the field's mapping,
// so an index without vectors fails on both versions instead of reading as "nothing near".
func TestDenseUnmappedVector(t *testing.T) {
	const routeMsearch, routeField = "POST /icicle-docs/_msearch", "GET /icicle-docs/_mapping/field/vector"
	tests := []struct {
		name     string
		field    string // the field-mapping fixture
		wantErr  string
		wantHits int
	}{
		{name: "the field is not mapped", field: "field_mapping_missing.json",
			wantErr: `field "vector": missing, want type "dense_vector"`},
		{name: "the field is mapped: no document has a vector", field: "field_mapping_vector.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeES(t, map[string][]reply{
				routeMsearch: {{status: 200, file: "dense_unmapped_9x.json"}},
				routeField:   {{status: 200, file: tt.field}},
			})
			a, err := adapter.New(adapter.Options{Addresses: []string{"http://es.test:9200"}, Transport: f, VectorDims: 3}, nil)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, a.Close()) })
			res, err := a.Dense(t.Context(), []float32{1, 0, 0}, []adapter.DenseQuery{{K: 3}})
			require.Len(t, f.requests("GET", "/icicle-docs/_mapping/field/vector"), 1)
			if tt.wantErr != "" {
				require.ErrorIs(t, err, adapter.ErrMappingMismatch)
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, [][]adapter.Hit{{}}, res)
		})
	}
	t.Run("hits found: the mapping is not asked", func(t *testing.T) {
		f := newFakeES(t, map[string][]reply{routeMsearch: {{status: 200, file: "dense_hits.json"}}})
		a, err := adapter.New(adapter.Options{Addresses: []string{"http://es.test:9200"}, Transport: f, VectorDims: 3}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, a.Close()) })
		res, err := a.Dense(t.Context(), []float32{1, 0, 0}, []adapter.DenseQuery{{K: 3}})
		require.NoError(t, err)
		require.Len(t, res[0], 1)
		require.InDelta(t, 0.6, res[0][0].Dense, 1e-6)
		require.Empty(t, f.requests("GET", "/icicle-docs/_mapping/field/vector"))
	})
}
