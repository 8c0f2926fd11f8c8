//go:build linux || darwin

package inference

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// randomBlock is a block of n positions of random keys and values for spec, as a request would store it.
func randomBlock(spec Spec, key byte, n, base int, quant bool, rng *rand.Rand) *blockKV {
	c := NewKVCache(spec, n)
	for l := range spec.NumLayers {
		for i := range c.keys[l] {
			c.keys[l][i], c.values[l][i] = rng.Float32()*4-2, rng.Float32()*4-2
		}
	}
	c.n = n
	return c.takeBlock(blockKey{key}, 0, n, base, quant)
}

// placed is a block as a request reads it: appended to an empty cache at its own base.
func placed(t *testing.T, spec Spec, b *blockKV) ([][]float32, [][]float32) {
	t.Helper()
	c := NewKVCache(spec, b.n)
	require.NoError(t, c.appendBlock(b, b.base, nil))
	return c.keys, c.values
}

// TestBlockFileRoundTrip: blocks put in a file-backed store are read back after the store is closed and opened
// again, bit for bit as a request places them (float32 and int8), a damaged tail is cut off and written over,
// a full file refuses blocks and keeps what it has, and a file of another model shape is refused by name.
func TestBlockFileRoundTrip(t *testing.T) {
	spec := Spec{VocabSize: 10, NumLayers: 3, NumKVHeads: 2, HeadDim: 8}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, quant := range []bool{false, true} {
		t.Run(map[bool]string{false: "float32", true: "int8"}[quant], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "blocks.bin")
			s, err := OpenBlockStore(path, 1<<20, quant, spec)
			require.NoError(t, err)
			blocks := []*blockKV{randomBlock(spec, 1, 5, 0, quant, rng), randomBlock(spec, 2, 3, 7, quant, rng), randomBlock(spec, 3, 1, 0, quant, rng)}
			for _, b := range blocks {
				s.put(b)
			}
			require.Equal(t, 3, s.Stats().Blocks)
			require.Equal(t, path, s.Stats().File)
			require.NoError(t, s.Close())
			require.Nil(t, s.get(blockKey{1}), "a closed store holds nothing")

			s, err = OpenBlockStore(path, 1<<20, quant, spec)
			require.NoError(t, err)
			st := s.Stats()
			require.Equal(t, 3, st.Blocks)
			require.Equal(t, 3, st.Loaded)
			for _, b := range blocks {
				got := s.get(b.key)
				require.NotNil(t, got, "block %d", b.key[0])
				require.Equal(t, b.n, got.n)
				require.Equal(t, b.base, got.base)
				wk, wv := placed(t, spec, b)
				gk, gv := placed(t, spec, got)
				require.Equal(t, wk, gk, "block %d keys", b.key[0])
				require.Equal(t, wv, gv, "block %d values", b.key[0])
			}
			require.NoError(t, s.Close())

			// A torn last record (its checksum fails): the blocks before it are kept, it is dropped and written over.
			raw, err := os.ReadFile(path)
			require.NoError(t, err)
			last := blockFileHeader + recordBytes(spec, quant, 5) + recordBytes(spec, quant, 3)
			raw[last+blockRecordHead+5] ^= 0xff
			require.NoError(t, os.WriteFile(path, raw, 0o644))
			s, err = OpenBlockStore(path, 1<<20, quant, spec)
			require.NoError(t, err)
			require.Equal(t, 2, s.Stats().Loaded)
			require.Nil(t, s.get(blockKey{3}))
			s.put(blocks[2])
			require.NoError(t, s.Close())
			s, err = OpenBlockStore(path, 1<<20, quant, spec)
			require.NoError(t, err)
			require.Equal(t, 3, s.Stats().Loaded)
			require.NoError(t, s.Close())

			// A bound below what the file holds: the store opens full, keeps every block and refuses new ones.
			s, err = OpenBlockStore(path, 64, quant, spec)
			require.NoError(t, err)
			require.Equal(t, 3, s.Stats().Loaded)
			s.put(randomBlock(spec, 9, 2, 0, quant, rng))
			require.Equal(t, int64(1), s.Stats().Refused)
			require.Nil(t, s.get(blockKey{9}))
			require.NoError(t, s.Close())

			// Another shape or precision: refused, naming the file, and the file is left as it was.
			other := spec
			other.NumKVHeads = 1
			_, err = OpenBlockStore(path, 1<<20, quant, other)
			require.ErrorContains(t, err, path)
			require.ErrorContains(t, err, "another model shape or precision")
			_, err = OpenBlockStore(path, 1<<20, !quant, spec)
			require.ErrorContains(t, err, "another model shape or precision")
			s, err = OpenBlockStore(path, 1<<20, quant, spec)
			require.NoError(t, err)
			require.Equal(t, 3, s.Stats().Loaded)
			require.NoError(t, s.Close())
		})
	}
}

// recordBytes is the record size of a block of n positions in a file of spec and precision.
func recordBytes(spec Spec, quant bool, n int) int {
	return int((&blockFile{spec: spec, quant: quant}).recordSize(n))
}

// TestBlockFileShared: a second OpenBlockStore of an open file in this process (a hot swap to the same weights)
// shares the store, which stays readable until the last Close; another precision on the same file is refused.
func TestBlockFileShared(t *testing.T) {
	spec := Spec{VocabSize: 10, NumLayers: 2, NumKVHeads: 1, HeadDim: 4}
	path := filepath.Join(t.TempDir(), "blocks.bin")
	a, err := OpenBlockStore(path, 1<<20, true, spec)
	require.NoError(t, err)
	a.put(randomBlock(spec, 1, 2, 0, true, rand.New(rand.NewPCG(5, 6))))
	b, err := OpenBlockStore(path, 1<<20, true, spec)
	require.NoError(t, err)
	require.Same(t, a, b)
	_, err = OpenBlockStore(path, 1<<20, false, spec)
	require.ErrorContains(t, err, "another model shape or precision")
	require.NoError(t, a.Close())
	require.NotNil(t, b.get(blockKey{1}), "the other holder still reads it")
	require.NoError(t, b.Close())
	require.Nil(t, b.get(blockKey{1}))
	c, err := OpenBlockStore(path, 1<<20, true, spec)
	require.NoError(t, err)
	require.Equal(t, 1, c.Stats().Loaded)
	require.NoError(t, c.Close())
}
