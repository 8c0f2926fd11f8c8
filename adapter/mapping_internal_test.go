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
	require.NoError(t, json.Unmarshal(indexBody(wantFields), &body))
	require.NoError(t, checkMapping(body.Mappings.Properties, wantFields))
}
