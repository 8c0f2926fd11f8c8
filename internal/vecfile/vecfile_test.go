package vecfile

import (
	"compress/gzip"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHalfRoundTrip(t *testing.T) {
	// Exact halves come back exactly, from the smallest subnormal to the largest normal.
	for _, x := range []float32{0, 1, -1, 0.5, 65504, -65504, 6.103515625e-05, 5.960464477539063e-08, 0.333251953125} {
		require.Equal(t, x, fromHalf(toHalf(x)), "%v", x)
	}
	require.True(t, math.IsInf(float64(fromHalf(toHalf(1e6))), 1))
	require.True(t, math.IsNaN(float64(fromHalf(toHalf(float32(math.NaN()))))))
	require.Equal(t, uint16(0x8000), toHalf(float32(math.Copysign(0, -1))))
	// Ties go to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
	require.Equal(t, float32(1), fromHalf(toHalf(1+1.0/2048)))
	require.Equal(t, float32(1+2.0/1024), fromHalf(toHalf(1+3.0/2048)))
	// Every value in the range a unit vector's components take is within half a step.
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		x := float32(r.Float64()*2 - 1)
		got := fromHalf(toHalf(x))
		step := math.Max(math.Abs(float64(x))*math.Pow(2, -10), math.Pow(2, -24))
		require.LessOrEqual(t, math.Abs(float64(got-x)), step/2+1e-12, "%v -> %v", x, got)
	}
}

func TestWriteRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.f16.gz")
	w, err := Create(path, "enc-1", 4, 2)
	require.NoError(t, err)
	require.NoError(t, w.Add("A", "alpha", []float32{0.5, -0.5, 0.5, -0.5}))
	require.NoError(t, w.Add("B", "beta", []float32{1, 0, 0, 0}))
	require.ErrorContains(t, w.Add("C", "gamma", []float32{1, 0, 0, 0}), "more than the header's 2")
	require.NoError(t, w.Close())

	s, err := Read(path)
	require.NoError(t, err)
	require.Equal(t, "enc-1", s.Encoder)
	require.Equal(t, 2, s.Len())
	v, ok := s.Get("A", "alpha")
	require.True(t, ok)
	require.Equal(t, []float32{0.5, -0.5, 0.5, -0.5}, v)
	_, ok = s.Get("A", "alpha changed")
	require.False(t, ok, "a vector belongs to the text it was computed from")

	short, err := Create(filepath.Join(t.TempDir(), "short.gz"), "enc-1", 4, 2)
	require.NoError(t, err)
	require.NoError(t, short.Add("A", "alpha", make([]float32, 4)))
	require.ErrorContains(t, short.Close(), "1 vectors written, the header says 2")
	require.ErrorContains(t, short.Add("A", "alpha", make([]float32, 3)), "3 dims")

	bad := filepath.Join(t.TempDir(), "bad.gz")
	f, err := os.Create(bad)
	require.NoError(t, err)
	zw := gzip.NewWriter(f)
	_, _ = zw.Write([]byte(`{"format":"other"}` + "\n"))
	require.NoError(t, zw.Close())
	require.NoError(t, f.Close())
	_, err = Read(bad)
	require.ErrorContains(t, err, "want format")
}
