package dense

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ManifestFile is the name of an encoder directory's manifest.
const ManifestFile = "encoder.json"

// Pooling modes: how one vector is read out of the last hidden state.
const (
	// PoolCLS takes the first position's hidden state (BGE).
	PoolCLS = "cls"
	// PoolMean averages the hidden states of the unmasked positions (E5).
	PoolMean = "mean"
)

// Manifest describes an encoder directory (encoder.json beside model.onnx and tokenizer.json).
type Manifest struct {
	// Name identifies the encoder and its version; it is stored with the vectors it made, so vectors of
	// another encoder are never compared with this one's.
	Name string `json:"name"`
	// Source says where the files come from (the Maven coordinates of the jar, its sha256).
	Source string `json:"source"`
	// ONNX and Tokenizer are the files, relative to the directory.
	ONNX      string `json:"onnx"`
	Tokenizer string `json:"tokenizer"`
	// Dims is the vector's length.
	Dims int `json:"dims"`
	// MaxTokens is the longest input the model takes, special tokens included (512 for BERT models).
	MaxTokens int `json:"max_tokens"`
	// Pooling is PoolCLS or PoolMean.
	Pooling string `json:"pooling"`
	// Normalize L2-normalises every vector, so that the dot product is the cosine.
	Normalize bool `json:"normalize"`
	// QueryPrefix and PassagePrefix are prepended to the text before tokenisation.
	QueryPrefix   string `json:"query_prefix"`
	PassagePrefix string `json:"passage_prefix"`
	// CLSID, SEPID and PadID are the special token ids put around every input and after it.
	CLSID int64 `json:"cls_id"`
	SEPID int64 `json:"sep_id"`
	PadID int64 `json:"pad_id"`
	// TokenTypeIDs says whether the graph takes a token_type_ids input (all zero).
	TokenTypeIDs bool `json:"token_type_ids"`
	// MaxBatch caps the inputs of one run (0: no cap). A dynamically quantised graph (int8 activations
	// scaled per tensor) needs 1: inputs sharing a batch change each other's vectors.
	MaxBatch int `json:"max_batch,omitempty"`

	// Dir is the directory the manifest was read from (not part of the file).
	Dir string `json:"-"`
}

// LoadManifest reads dir/encoder.json and checks it. A missing file or one of the files it names is an
// error that names the path and how to get it.
func LoadManifest(dir string) (*Manifest, error) {
	path := filepath.Join(dir, ManifestFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read encoder manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("read encoder manifest %s: %w", path, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("read encoder manifest %s: %w", path, err)
	}
	m.Dir = abs
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("encoder manifest %s: %w", path, err)
	}
	for _, f := range []struct{ key, name string }{{"onnx", m.ONNX}, {"tokenizer", m.Tokenizer}} {
		if _, err := os.Stat(m.Path(f.name)); err != nil {
			return nil, fmt.Errorf("encoder %s: %s file: %w (scripts/encoder.sh %s fetches it)", m.Name, f.key, err, dir)
		}
	}
	return &m, nil
}

// Validate reports every problem of the manifest's fields at once.
func (m *Manifest) Validate() error {
	var errs []error
	if m.Name == "" {
		errs = append(errs, errors.New("name: required"))
	}
	if m.ONNX == "" {
		errs = append(errs, errors.New("onnx: required"))
	}
	if m.Tokenizer == "" {
		errs = append(errs, errors.New("tokenizer: required"))
	}
	if m.Dims <= 0 || m.Dims > 4096 {
		errs = append(errs, fmt.Errorf("dims: %d, want 1..4096 (Elasticsearch's dense_vector limit)", m.Dims))
	}
	if m.MaxTokens < 3 {
		errs = append(errs, fmt.Errorf("max_tokens: %d, want at least 3 (two special tokens and one word piece)", m.MaxTokens))
	}
	if m.Pooling != PoolCLS && m.Pooling != PoolMean {
		errs = append(errs, fmt.Errorf("pooling: %q, want %q or %q", m.Pooling, PoolCLS, PoolMean))
	}
	if m.MaxBatch < 0 {
		errs = append(errs, fmt.Errorf("max_batch: %d, want >= 0 (0: no cap)", m.MaxBatch))
	}
	if m.CLSID < 0 || m.SEPID < 0 || m.PadID < 0 {
		errs = append(errs, fmt.Errorf("cls_id, sep_id, pad_id: %d, %d, %d, want non-negative token ids", m.CLSID, m.SEPID, m.PadID))
	}
	return errors.Join(errs...)
}

// Path returns the absolute path of a file named in the manifest.
func (m *Manifest) Path(name string) string {
	if filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(m.Dir, name)
}
