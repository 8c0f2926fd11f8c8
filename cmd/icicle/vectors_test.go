package main

import (
	"context"
	"math"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/internal/vecfile"
)

// TestEmbedKnown: documents whose title and text are in the vector file take its vector, scaled back to unit
// length (half precision is not exactly unit); the others go to the encoder, in their order.
func TestEmbedKnown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.gz")
	w, err := vecfile.Create(path, "enc", 3, 1)
	require.NoError(t, err)
	third := float32(1 / math.Sqrt(3))
	require.NoError(t, w.Add("A", "alpha", []float32{third, third, third}))
	require.NoError(t, w.Close())
	set, err := vecfile.Read(path)
	require.NoError(t, err)

	var asked []string
	encoder := func(_ context.Context, docs []adapter.Doc) ([][]float32, error) {
		out := make([][]float32, len(docs))
		for i, d := range docs {
			asked = append(asked, d.DocID)
			out[i] = []float32{1, 0, 0}
		}
		return out, nil
	}
	var known atomic.Int64
	embed := embedKnown(set, true, encoder, &known)
	vs, err := embed(t.Context(), []adapter.Doc{{DocID: "B", Title: "B", Text: "beta"}, {DocID: "A", Title: "A", Text: "alpha"},
		{DocID: "A2", Title: "A", Text: "alpha, changed"}})
	require.NoError(t, err)
	require.Equal(t, []string{"B", "A2"}, asked, "only the documents the file lacks are embedded")
	require.EqualValues(t, 1, known.Load())
	var norm float64
	for _, x := range vs[1] {
		norm += float64(x) * float64(x)
	}
	require.InDelta(t, 1, norm, 1e-6, "unit length again")
	require.InDelta(t, third, vs[1][0], 1e-3)
	require.Equal(t, []float32{1, 0, 0}, vs[0])
}
