//go:build linux || darwin

package inference

// A block store kept in a file (experimental.block_dir), so that the blocks computed once survive a restart: the
// store of a model is one file named by the model's identity (its weights and manifest, loader.Identity), the
// layout and the precision, mapped into memory and shared with the page cache. Blocks are appended as records
// and read in place (no copy, no Go heap): the sidecar's own memory stays small and the kernel keeps the pages
// that requests use. The file is derived from the index and the model, and can be deleted at any time; the
// fill (cmd/icicle blockfill.go) computes what is missing.
//
// Layout, little endian:
//
//	header (64 bytes): "ICBLOCK1", layers u32, stride u32 (kv_heads x head_dim), head_dim u32, int8 u32,
//	                   used u64 (bytes of the header and the complete records), zeros
//	record:            key [32]byte, n u32 (positions), base u32 (the offset its keys are rotated for),
//	                   crc32c u32 (of the payload), 0 u32, payload, zeros to a multiple of 8
//	payload float32:   keys of each layer (n x stride float32), then values of each layer
//	payload int8:      scales (keys of each layer, then values; n x stride / head_dim float32), then the
//	                   int8 values in the same order
//
// used is written after a record's bytes, so a record that a crash cut short is past used and not read; a record
// whose checksum fails (a torn write the kernel had not flushed when the machine stopped) ends the file there.
// The file's size is the store's bound (experimental.block_store_mb) plus the header, allocated sparse: only what is
// written takes disk space. A full file keeps what it has and refuses new blocks (Stats.Refused).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"unsafe"
)

const (
	blockFileMagic  = "ICBLOCK1"
	blockFileHeader = 64
	blockRecordHead = 48
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// blockFile is a store's file, mapped shared: data is the whole file.
type blockFile struct {
	f     *os.File
	data  []byte
	used  int64
	spec  Spec
	quant bool
	path  string // absolute, the key in openFiles
	refs  int    // OpenBlockStore calls not yet closed (under openFiles' lock)
}

// OpenBlockStore returns a store kept in the file at path for a model of the given spec, holding at most
// maxBytes of records (DefaultBlockStoreBytes when 0), as int8 when quant is set. The file is created if it
// does not exist; an existing file's blocks are read back (those of a file written for another spec or
// precision are an error naming the file; a damaged tail is cut off). Close releases it.
//
// One process writes a file: a second process that opens it is refused (an exclusive lock), while a second
// OpenBlockStore of the same file in this process (a hot swap to the same weights) shares the open store, which
// the last Close releases.
func OpenBlockStore(path string, maxBytes int64, quant bool, spec Spec) (*BlockStore, error) {
	if maxBytes == 0 {
		maxBytes = DefaultBlockStoreBytes
	}
	if spec.NumLayers <= 0 || spec.NumKVHeads <= 0 || spec.HeadDim <= 0 {
		return nil, fmt.Errorf("open block store %s: bad model spec %+v", path, spec)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open block store: %w", err)
	}
	openFiles.Lock()
	defer openFiles.Unlock()
	if s := openFiles.m[abs]; s != nil {
		if s.quant != quant || s.file.spec != spec {
			return nil, fmt.Errorf("open block store %s: open in this process for another model shape or precision", path)
		}
		s.file.refs++
		return s, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open block store: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("open block store %s: in use by another process (give each sidecar its own directory): %w", path, err)
	}
	bf, err := mapBlockFile(f, maxBytes, quant, spec)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("open block store %s: %w", path, err)
	}
	s := NewBlockStore(maxBytes, quant)
	s.file, s.stats.File = bf, path
	bf.load(func(b *blockKV) {
		s.byKey[b.key] = s.order.PushBack(b)
		s.bytes += b.size()
		s.stats.Loaded++
	})
	bf.path, bf.refs = abs, 1
	openFiles.m[abs] = s
	return s, nil
}

// openFiles are the stores open in this process, by absolute path.
var openFiles = struct {
	sync.Mutex
	m map[string]*BlockStore
}{m: map[string]*BlockStore{}}

// release drops one OpenBlockStore's hold on the file; it reports whether that was the last (the caller then
// closes the file).
func (bf *blockFile) release() bool {
	openFiles.Lock()
	defer openFiles.Unlock()
	if bf.refs--; bf.refs > 0 {
		return false
	}
	delete(openFiles.m, bf.path)
	return true
}

func mapBlockFile(f *os.File, maxBytes int64, quant bool, spec Spec) (*blockFile, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	bf := &blockFile{f: f, spec: spec, quant: quant}
	want := header(spec, quant)
	used := int64(blockFileHeader)
	if st.Size() > 0 {
		head := make([]byte, blockFileHeader)
		if _, err := f.ReadAt(head, 0); err != nil {
			return nil, fmt.Errorf("read header: %w", err)
		}
		if !bytes.Equal(head[:24], want[:24]) {
			return nil, fmt.Errorf("written for another model shape or precision (header %q, want %q): delete it to rebuild",
				head[:24], want[:24])
		}
		used = int64(binary.LittleEndian.Uint64(head[24:]))
		if used < blockFileHeader || used > st.Size() {
			return nil, fmt.Errorf("header says %d bytes used of %d: delete it to rebuild", used, st.Size())
		}
	}
	// The bound plus the header, or what the file already holds if the bound was lowered (the store is then
	// full). Truncate to a larger size allocates no disk blocks.
	size := max(int64(blockFileHeader)+maxBytes, used)
	if st.Size() != size {
		if err := f.Truncate(size); err != nil {
			return nil, fmt.Errorf("size to %d bytes: %w", size, err)
		}
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes: %w", size, err)
	}
	bf.data, bf.used = data, used
	if st.Size() == 0 {
		copy(data, want)
		bf.setUsed(used)
	}
	return bf, nil
}

// header is the first 64 bytes of a file for spec and precision, used 0.
func header(spec Spec, quant bool) []byte {
	h := make([]byte, blockFileHeader)
	copy(h, blockFileMagic)
	binary.LittleEndian.PutUint32(h[8:], uint32(spec.NumLayers))
	binary.LittleEndian.PutUint32(h[12:], uint32(spec.NumKVHeads*spec.HeadDim))
	binary.LittleEndian.PutUint32(h[16:], uint32(spec.HeadDim))
	if quant {
		binary.LittleEndian.PutUint32(h[20:], 1)
	}
	return h
}

func (bf *blockFile) setUsed(used int64) {
	bf.used = used
	binary.LittleEndian.PutUint64(bf.data[24:], uint64(used))
}

// recordSize is the bytes of a record of n positions, padding included.
func (bf *blockFile) recordSize(n int) int64 {
	vals := int64(n) * int64(bf.spec.NumKVHeads*bf.spec.HeadDim) * int64(bf.spec.NumLayers) * 2
	payload := vals * 4
	if bf.quant {
		payload = vals + vals/int64(bf.spec.HeadDim)*4
	}
	return (blockRecordHead + payload + 7) &^ 7
}

// load reads every record up to used, stopping at the first that fails its checksum (used is cut back there).
func (bf *blockFile) load(add func(*blockKV)) {
	off := int64(blockFileHeader)
	for off < bf.used {
		if bf.used-off < blockRecordHead {
			break
		}
		n := int(binary.LittleEndian.Uint32(bf.data[off+32:]))
		size := bf.recordSize(n)
		if n <= 0 || off+size > bf.used {
			break
		}
		rec := bf.data[off : off+size]
		if crc32.Checksum(rec[blockRecordHead:], castagnoli) != binary.LittleEndian.Uint32(rec[40:]) {
			break
		}
		add(bf.view(rec))
		off += size
	}
	if off != bf.used {
		bf.setUsed(off)
	}
}

// view returns the block of a record, its slices pointing into the mapping.
func (bf *blockFile) view(rec []byte) *blockKV {
	b := &blockKV{n: int(binary.LittleEndian.Uint32(rec[32:])), base: int(binary.LittleEndian.Uint32(rec[36:]))}
	copy(b.key[:], rec[:32])
	per := b.n * bf.spec.NumKVHeads * bf.spec.HeadDim // values per layer
	layers := bf.spec.NumLayers
	p := rec[blockRecordHead:]
	if !bf.quant {
		all := unsafe.Slice((*float32)(unsafe.Pointer(&p[0])), 2*layers*per)
		b.keys, b.values = make([][]float32, layers), make([][]float32, layers)
		for l := range layers {
			b.keys[l] = all[l*per : (l+1)*per : (l+1)*per]
			b.values[l] = all[(layers+l)*per : (layers+l+1)*per : (layers+l+1)*per]
		}
		return b
	}
	heads := per / bf.spec.HeadDim
	scales := unsafe.Slice((*float32)(unsafe.Pointer(&p[0])), 2*layers*heads)
	q := unsafe.Slice((*int8)(unsafe.Pointer(&p[len(scales)*4])), 2*layers*per)
	for kv := range 2 {
		b.q[kv], b.scale[kv] = make([][]int8, layers), make([][]float32, layers)
		for l := range layers {
			i := kv*layers + l
			b.scale[kv][l] = scales[i*heads : (i+1)*heads : (i+1)*heads]
			b.q[kv][l] = q[i*per : (i+1)*per : (i+1)*per]
		}
	}
	return b
}

// errFileFull is append's answer when the record does not fit in the file's bound.
var errFileFull = errors.New("block file full")

// append writes b as a record after the last and returns its view in the mapping.
func (bf *blockFile) append(b *blockKV) (*blockKV, error) {
	size := bf.recordSize(b.n)
	if bf.used+size > int64(len(bf.data)) {
		return nil, errFileFull
	}
	rec := bf.data[bf.used : bf.used+size]
	copy(rec, b.key[:])
	binary.LittleEndian.PutUint32(rec[32:], uint32(b.n))
	binary.LittleEndian.PutUint32(rec[36:], uint32(b.base))
	p := rec[blockRecordHead:]
	put := func(xs []float32) {
		copy(p, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(xs))), len(xs)*4))
		p = p[len(xs)*4:]
	}
	if !bf.quant {
		for _, bufs := range [2][][]float32{b.keys, b.values} {
			for _, x := range bufs {
				put(x)
			}
		}
	} else {
		for kv := range 2 {
			for _, x := range b.scale[kv] {
				put(x)
			}
		}
		for kv := range 2 {
			for _, x := range b.q[kv] {
				copy(p, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), len(x)))
				p = p[len(x):]
			}
		}
	}
	clear(p) // padding
	binary.LittleEndian.PutUint32(rec[40:], crc32.Checksum(rec[blockRecordHead:], castagnoli))
	bf.setUsed(bf.used + size) // after the record: a crash before this line leaves the record unread
	return bf.view(rec), nil
}

// close flushes the mapping to the file and releases both.
func (bf *blockFile) close() error {
	if bf.data == nil {
		return nil
	}
	_, _, errno := syscall.Syscall(syscall.SYS_MSYNC, uintptr(unsafe.Pointer(&bf.data[0])), uintptr(bf.used), syscall.MS_SYNC)
	var err error
	if errno != 0 {
		err = fmt.Errorf("sync block file: %w", errno)
	}
	err = errors.Join(err, syscall.Munmap(bf.data), bf.f.Close())
	bf.data = nil
	return err
}
