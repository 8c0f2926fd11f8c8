//go:build !(linux || darwin)

package inference

import "errors"

// blockFile is a file-backed store's file; this platform has none (blockfile.go maps files on Linux and macOS).
type blockFile struct{}

func (*blockFile) append(*blockKV) (*blockKV, error) {
	return nil, errors.New("no block files on this platform")
}
func (*blockFile) close() error  { return nil }
func (*blockFile) release() bool { return true }

// OpenBlockStore is unsupported on this platform: experimental.block_dir needs Linux or macOS.
func OpenBlockStore(path string, maxBytes int64, quant bool, spec Spec) (*BlockStore, error) {
	return nil, errors.New("open block store " + path + ": block files need Linux or macOS (leave experimental.block_dir empty)")
}
