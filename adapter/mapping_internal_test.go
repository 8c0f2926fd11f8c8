package adapter

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckMapping(t *testing.T) {
	good := `{"docid":{"type":"keyword"},"title":{"type":"text","fields":{"keyword":{"type":"keyword"}}},` +
		`"text":{"type":"text"},"summary":{"type":"text"},"seen":{"type":"boolean"},"ingested_at":{"type":"date"}}`
	tests := []struct {
		name  string
		props string
		want  []string // MappingError texts, in order
	}{
		{name: "exact", props: good},
		{
			name: "extra fields are fine",
			props: `{"docid":{"type":"keyword"},"title":{"type":"text","fields":{"keyword":{"type":"keyword"},"en":{"type":"text"}}},` +
				`"text":{"type":"text"},"summary":{"type":"text"},"seen":{"type":"boolean"},"ingested_at":{"type":"date"},"lang":{"type":"keyword"}}`,
		},
		{
			name:  "empty mapping",
			props: `{}`,
			want: []string{
				`field "docid": missing, want type "keyword"`,
				`field "ingested_at": missing, want type "date"`,
				`field "seen": missing, want type "boolean"`,
				`field "summary": missing, want type "text"`,
				`field "text": missing, want type "text"`,
				`field "title": missing, want type "text"`,
			},
		},
		{
			name: "wrong types, object field, wrong subfield",
			props: `{"docid":{"type":"text"},"title":{"type":"text","fields":{"keyword":{"type":"text"}}},` +
				`"text":{"properties":{"a":{"type":"text"}}},"summary":{"type":"text"},"seen":{"type":"boolean"},"ingested_at":{"type":"long"}}`,
			want: []string{
				`field "docid": type is "text", want "keyword"`,
				`field "ingested_at": type is "long", want "date"`,
				`field "text": type is "object", want "text"`,
				`field "title.keyword": type is "text", want "keyword"`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var props map[string]mappedField
			require.NoError(t, json.Unmarshal([]byte(tt.props), &props))
			err := checkMapping(props, wantFields)
			if len(tt.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrMappingMismatch)
			var got []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var me *MappingError
				require.True(t, errors.As(e, &me))
				got = append(got, me.Error())
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func TestIndexBodyMatchesCheck(t *testing.T) {
	// The mapping EnsureIndex creates must pass the check EnsureIndex applies.
	var body struct {
		Mappings struct {
			Properties map[string]mappedField `json:"properties"`
		} `json:"mappings"`
	}
	require.NoError(t, json.Unmarshal(indexBody(wantFields, 1), &body))
	require.NoError(t, checkMapping(body.Mappings.Properties, wantFields))
}

func TestCheckMappingVectorIndexOptions(t *testing.T) {
	base := `"docid":{"type":"keyword"},"title":{"type":"text","fields":{"keyword":{"type":"keyword"}}},` +
		`"text":{"type":"text"},"summary":{"type":"text"},"seen":{"type":"boolean"},"ingested_at":{"type":"date"},` +
		`"vector_model":{"type":"keyword"},`
	want := map[string]fieldSpec{}
	for k, v := range wantFields {
		want[k] = v
	}
	for k, v := range vectorFields(384, DefaultVectorIndex) {
		want[k] = v
	}
	tests := []struct {
		name   string
		vector string
		want   string // the MappingError's text, or "" for none
	}{
		{
			name:   "hnsw, as the sidecar maps it",
			vector: `{"type":"dense_vector","dims":384,"index_options":{"type":"hnsw","m":16}}`,
		},
		{name: "no index_options reported (before 8.14: hnsw)", vector: `{"type":"dense_vector","dims":384}`},
		{
			name:   "8.14's default",
			vector: `{"type":"dense_vector","dims":384,"index_options":{"type":"int8_hnsw","m":16}}`,
			want:   `field "vector": index_options type is "int8_hnsw", want "hnsw"`,
		},
		{
			name:   "9.1+'s default for 384 dims",
			vector: `{"type":"dense_vector","dims":384,"index_options":{"type":"bbq_hnsw","m":16}}`,
			want:   `field "vector": index_options type is "bbq_hnsw", want "hnsw"`,
		},
		{
			name:   "dims are checked first",
			vector: `{"type":"dense_vector","dims":768,"index_options":{"type":"bbq_hnsw"}}`,
			want:   `field "vector": dims is 768, the encoder's vectors have 384`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var props map[string]mappedField
			require.NoError(t, json.Unmarshal([]byte(`{`+base+`"vector":`+tt.vector+`}`), &props))
			err := checkMapping(props, want)
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrMappingMismatch)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestCheckMappingConfiguredVectorIndex: with first_stage.vector_index set to a quantised type, the index
// must have that type, and one made with the default is refused (its graph is built for the other type).
func TestCheckMappingConfiguredVectorIndex(t *testing.T) {
	want := map[string]fieldSpec{}
	for k, v := range vectorFields(384, "int8_hnsw") {
		want[k] = v
	}
	check := func(vector string) error {
		var props map[string]mappedField
		require.NoError(t, json.Unmarshal([]byte(`{"vector_model":{"type":"keyword"},"vector":`+vector+`}`), &props))
		return checkMapping(props, want)
	}
	require.NoError(t, check(`{"type":"dense_vector","dims":384,"index_options":{"type":"int8_hnsw","m":16}}`))
	err := check(`{"type":"dense_vector","dims":384,"index_options":{"type":"hnsw","m":16}}`)
	require.ErrorIs(t, err, ErrMappingMismatch)
	require.ErrorContains(t, err, `field "vector": index_options type is "hnsw", want "int8_hnsw" (first_stage.vector_index`)
	require.ErrorContains(t, check(`{"type":"dense_vector","dims":384}`), `want "int8_hnsw"`, "no type reported is hnsw")

	var body struct {
		Mappings struct {
			Properties map[string]map[string]any `json:"properties"`
		} `json:"mappings"`
	}
	require.NoError(t, json.Unmarshal(indexBody(vectorFields(384, "bbq_hnsw"), 1), &body))
	require.Equal(t, map[string]any{"type": "bbq_hnsw"}, body.Mappings.Properties[VectorField]["index_options"])
}

func TestIndexBodyPinsVectorIndexOptions(t *testing.T) {
	var body struct {
		Mappings struct {
			Properties map[string]map[string]any `json:"properties"`
		} `json:"mappings"`
	}
	require.NoError(t, json.Unmarshal(indexBody(vectorFields(384, DefaultVectorIndex), 1), &body))
	v := body.Mappings.Properties[VectorField]
	require.Equal(t, map[string]any{"type": "hnsw"}, v["index_options"])
	require.Equal(t, "dot_product", v["similarity"])
	require.Equal(t, true, v["index"])
}

func TestQuantizedVectors(t *testing.T) {
	var m mappingResponse
	require.NoError(t, json.Unmarshal([]byte(`{
		"team-a": {"mappings": {"properties": {"emb": {"properties": {"v": {"type": "dense_vector", "dims": 384,
			"index_options": {"type": "bbq_hnsw"}}}}}}},
		"team-b": {"mappings": {"properties": {"emb": {"properties": {"v": {"type": "dense_vector", "dims": 384,
			"index_options": {"type": "int8_hnsw"}}}}}}},
		"team-c": {"mappings": {"properties": {"emb": {"properties": {"v": {"type": "dense_vector", "dims": 384,
			"index_options": {"type": "hnsw"}}}}}}},
		"team-d": {"mappings": {"properties": {"emb": {"properties": {"v": {"type": "dense_vector", "dims": 384}}}}}},
		"team-e": {"mappings": {"properties": {}}}
	}`), &m))
	require.Equal(t, []string{"team-a: bbq_hnsw", "team-b: int8_hnsw"}, m.quantizedVectors("emb.v"))
	require.Empty(t, m.quantizedVectors("other"))
}

func TestIndexBodyShards(t *testing.T) {
	shards := func(n int) any {
		var body struct {
			Settings struct {
				Index map[string]any `json:"index"`
			} `json:"settings"`
		}
		require.NoError(t, json.Unmarshal(indexBody(wantFields, n), &body))
		return body.Settings.Index["number_of_shards"]
	}
	require.EqualValues(t, 1, shards(0), "the default")
	require.EqualValues(t, 1, shards(1))
	require.EqualValues(t, 8, shards(8))
}
