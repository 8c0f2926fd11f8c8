// Package vecfile reads and writes precomputed document vectors: a corpus's first-stage vectors computed once
// (`icicle vectors`) and given to `icicle ingest -vectors`, so that a corpus whose vectors are known is
// ingested without running the encoder again. A vector is used only for the document it was computed from:
// each is keyed by a hash of the document's title and text, and the file names the encoder that made it.
//
// The file is gzip-compressed: one JSON header line (Header), then Count records of an 8-byte key (Key) and
// Dims half-precision floats, little-endian. Half precision keeps a unit vector's cosines to about 1e-6.
package vecfile

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// Format is the header's format string.
const Format = "icicle-vectors/1"

// Header is the file's first line.
type Header struct {
	Format  string `json:"format"`
	Encoder string `json:"encoder"`
	Dims    int    `json:"dims"`
	Count   int    `json:"count"`
	DType   string `json:"dtype"`
	// KeyOf says how a record's key is made (Key).
	KeyOf string `json:"key"`
}

// keyOf describes Key in the header.
const keyOf = "sha256(title + \"\\n\" + text)[:8]"

// Key is a document's record key: the first 8 bytes of the SHA-256 of its title, a newline and its text.
func Key(title, text string) [8]byte {
	sum := sha256.Sum256([]byte(title + "\n" + text))
	var k [8]byte
	copy(k[:], sum[:8])
	return k
}

// Set is a file's vectors by key.
type Set struct {
	Header
	vecs map[[8]byte][]float32
}

// Get returns the vector of the document with this title and text, if the file has it.
func (s *Set) Get(title, text string) ([]float32, bool) {
	v, ok := s.vecs[Key(title, text)]
	return v, ok
}

// Len is the number of vectors.
func (s *Set) Len() int { return len(s.vecs) }

// Read reads a vector file.
func Read(path string) (*Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read vectors: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("read vectors %s: %w", path, err)
	}
	br := bufio.NewReader(zr)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("read vectors %s: header: %w", path, err)
	}
	var h Header
	if err := json.Unmarshal(line, &h); err != nil {
		return nil, fmt.Errorf("read vectors %s: header: %w", path, err)
	}
	if h.Format != Format || h.DType != "float16" || h.Dims < 1 || h.Count < 0 || h.Encoder == "" {
		return nil, fmt.Errorf("read vectors %s: header %s: want format %q, dtype float16, dims > 0 and an encoder", path, line, Format)
	}
	s := &Set{Header: h, vecs: make(map[[8]byte][]float32, h.Count)}
	rec := make([]byte, 8+2*h.Dims)
	for i := range h.Count {
		if _, err := io.ReadFull(br, rec); err != nil {
			return nil, fmt.Errorf("read vectors %s: record %d of %d: %w", path, i+1, h.Count, err)
		}
		var k [8]byte
		copy(k[:], rec[:8])
		v := make([]float32, h.Dims)
		for j := range v {
			v[j] = fromHalf(binary.LittleEndian.Uint16(rec[8+2*j:]))
		}
		s.vecs[k] = v
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read vectors %s: more than the header's %d records", path, h.Count)
	}
	return s, nil
}

// Writer writes a vector file; Close finishes it. The header is written first, so the count must be known.
type Writer struct {
	f    *os.File
	zw   *gzip.Writer
	h    Header
	n    int
	rec  []byte
	path string
}

// Create starts a vector file of count vectors of dims made by encoder.
func Create(path, encoder string, dims, count int) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("write vectors: %w", err)
	}
	h := Header{Format: Format, Encoder: encoder, Dims: dims, Count: count, DType: "float16", KeyOf: keyOf}
	zw := gzip.NewWriter(f)
	line, _ := json.Marshal(h)
	if _, err := zw.Write(append(line, '\n')); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("write vectors %s: %w", path, err)
	}
	return &Writer{f: f, zw: zw, h: h, rec: make([]byte, 8+2*dims), path: path}, nil
}

// Add writes the vector of the document with this title and text.
func (w *Writer) Add(title, text string, v []float32) error {
	if len(v) != w.h.Dims {
		return fmt.Errorf("write vectors %s: a vector of %d dims, the file has %d", w.path, len(v), w.h.Dims)
	}
	if w.n == w.h.Count {
		return fmt.Errorf("write vectors %s: more than the header's %d vectors", w.path, w.h.Count)
	}
	k := Key(title, text)
	copy(w.rec, k[:])
	for j, x := range v {
		binary.LittleEndian.PutUint16(w.rec[8+2*j:], toHalf(x))
	}
	if _, err := w.zw.Write(w.rec); err != nil {
		return fmt.Errorf("write vectors %s: %w", w.path, err)
	}
	w.n++
	return nil
}

// Close finishes the file; it is an error to close it with fewer vectors than the header says.
func (w *Writer) Close() error {
	err := errors.Join(w.zw.Close(), w.f.Close())
	if err == nil && w.n != w.h.Count {
		err = fmt.Errorf("write vectors %s: %d vectors written, the header says %d", w.path, w.n, w.h.Count)
	}
	return err
}

// toHalf rounds x to the nearest IEEE 754 half-precision value (ties to even).
func toHalf(x float32) uint16 {
	b := math.Float32bits(x)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case b&0x7fffffff == 0:
		return sign
	case exp >= 0x1f: // overflow, infinity or NaN
		if b&0x7f800000 == 0x7f800000 && mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp <= 0: // subnormal half, or zero
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		half := mant >> shift
		rest := mant & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rest > mid || rest == mid && half&1 == 1 {
			half++
		}
		return sign | uint16(half)
	}
	half := uint32(exp)<<10 | mant>>13
	rest := mant & 0x1fff
	if rest > 0x1000 || rest == 0x1000 && half&1 == 1 {
		half++ // may carry into the exponent, which is right (up to infinity)
	}
	return sign | uint16(half)
}

// fromHalf is the float32 of a half-precision value.
func fromHalf(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h >> 10 & 0x1f)
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: normalise.
		e := int32(1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | uint32(e-15+127)<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp-15+127)<<23 | mant<<13)
}
