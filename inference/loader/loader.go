// Package loader opens a model directory (inference/MODEL_FORMAT.md) into a ready inference.Engine: the
// manifest, the HF tokenizer (inference/tok), one ONNX Runtime session per concurrent request
// (inference/ort) and the seen corpus. ONNX Runtime itself must be initialised first (ort.Init), once per
// process, by the caller.
package loader

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/cpu"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/inference/tok"
)

// Options configure Open.
type Options struct {
	// Sessions is the number of ONNX Runtime sessions, i.e. requests decoded at once (default 1).
	Sessions int
	// Quantized loads the manifest's onnx_quantized file instead of onnx. With Blocks, the fp32 file is
	// loaded too, in one more session that computes the blocks (inference.EngineOptions.BlockModel).
	Quantized bool
	// Runtime is passed to every session.
	Runtime ort.Options
	// EncodeCacheEntries is passed to the engine (inference.EngineOptions): 0 default, negative off.
	EncodeCacheEntries int
	// CopyMaskBytes is passed to the engine (inference.EngineOptions): 0 default (64 MiB), negative no bound.
	CopyMaskBytes int64
	// Blocks, if set, turns block reading on with this store (inference.EngineOptions.Blocks); give each
	// model its own, since blocks are keyed by their ids alone.
	Blocks *inference.BlockStore
	// BlockLayout is inference.BlockContiguous (default) or inference.BlockShared.
	BlockLayout string
	// Logger receives load and engine logs; nil discards.
	Logger *slog.Logger
}

// Model is a loaded model directory.
type Model struct {
	// Engine ranks candidates; it owns the sessions.
	Engine *inference.Engine
	// Manifest is the directory's manifest.
	Manifest *inference.Manifest
	// File is the ONNX file loaded (relative to the directory).
	File string
	// BlockFile is the ONNX file that computes the blocks when it is not File (the fp32 graph beside int8
	// sessions with block reading, or the block_model's graph), relative to the directory; empty otherwise.
	BlockFile string
	// Seen is the seen corpus, in file order.
	Seen []string

	tok *tok.Tokenizer
}

// Open loads dir. On error nothing stays open.
func Open(dir string, opts Options) (_ *Model, err error) {
	man, err := inference.LoadManifest(dir)
	if err != nil {
		return nil, err
	}
	// A query-side model reads only over the blocks its block_model computes: checked before any session.
	var bman *inference.Manifest
	if man.BlockModel != "" {
		if opts.Blocks == nil || opts.BlockLayout != inference.BlockShared {
			return nil, fmt.Errorf("open model %s: its query side was trained over the blocks of %s (block_model), so it reads only by them: serve it with experimental.block_reading: shared", dir, man.BlockModel)
		}
		if bman, err = BlockManifest(man); err != nil {
			return nil, fmt.Errorf("open model %s: %w", dir, err)
		}
	}
	file := man.ONNX
	if opts.Quantized {
		if man.ONNXQuantized == "" {
			return nil, fmt.Errorf("open model %s: quantized requested but the manifest has no onnx_quantized", dir)
		}
		file = man.ONNXQuantized
		if err := int8Runs(man, hostCPU()); err != nil {
			return nil, fmt.Errorf("open model %s: %w", dir, err)
		}
	}
	seen, err := inference.ReadDocIDs(man.Path(man.SeenDocIDs))
	if err != nil {
		return nil, fmt.Errorf("open model %s: %w", dir, err)
	}
	tk, err := tok.Load(man.Path(man.Tokenizer))
	if err != nil {
		return nil, fmt.Errorf("open model %s: tokenizer: %w", dir, err)
	}
	var models []inference.Model
	defer func() {
		if err != nil {
			for _, m := range models {
				m.Close()
			}
			tk.Close()
		}
	}()
	for range max(opts.Sessions, 1) {
		m, err := ort.Load(man.Path(file), man.Spec(), opts.Runtime, opts.Logger)
		if err != nil {
			return nil, fmt.Errorf("open model %s: %w", dir, err)
		}
		models = append(models, m)
	}
	var blockModel inference.Model
	blockFile, blockName := "", ""
	switch {
	case bman != nil:
		blockFile, blockName = bman.Path(bman.ONNX), filepath.Join(man.BlockModel, bman.ONNX)
	case opts.Quantized && opts.Blocks != nil:
		blockFile, blockName = man.Path(man.ONNX), man.ONNX
	}
	if blockFile != "" {
		if blockModel, err = ort.Load(blockFile, man.Spec(), opts.Runtime, opts.Logger); err != nil {
			return nil, fmt.Errorf("open model %s: the fp32 graph that computes the blocks: %w", dir, err)
		}
	}
	engine, err := inference.NewEngine(man, tk, models, seen, inference.EngineOptions{Logger: opts.Logger, EncodeCacheEntries: opts.EncodeCacheEntries,
		CopyMaskBytes: opts.CopyMaskBytes, Blocks: opts.Blocks, BlockLayout: opts.BlockLayout, BlockModel: blockModel})
	if err != nil {
		if blockModel != nil {
			blockModel.Close()
		}
		return nil, fmt.Errorf("open model %s: %w", dir, err)
	}
	out := &Model{Engine: engine, Manifest: man, File: file, Seen: seen, tok: tk}
	if blockModel != nil {
		out.BlockFile = blockName
	}
	return out, nil
}

// BlockManifest loads the manifest of man's block_model and checks that it computes the blocks man was
// trained over (inference.Manifest.CheckBlockModel: shape, tokenizer file, prompt, rotary base).
func BlockManifest(man *inference.Manifest) (*inference.Manifest, error) {
	b, err := inference.LoadManifest(man.BlockModelDir())
	if err != nil {
		return nil, fmt.Errorf("block_model: %w", err)
	}
	mine, err := os.ReadFile(man.Path(man.Tokenizer))
	if err != nil {
		return nil, err
	}
	theirs, err := os.ReadFile(b.Path(b.Tokenizer))
	if err != nil {
		return nil, err
	}
	if err := man.CheckBlockModel(b, bytes.Equal(mine, theirs)); err != nil {
		return nil, err
	}
	return b, nil
}

// cpuFacts is what int8Runs needs to know of the CPU.
type cpuFacts struct {
	x86, vnni bool
}

func hostCPU() cpuFacts {
	return cpuFacts{x86: runtime.GOARCH == "amd64" || runtime.GOARCH == "386", vnni: cpu.X86.HasAVX512VNNI || cpu.X86.HasAVXVNNI}
}

// int8Runs refuses an int8 file with 8-bit weights on an x86 CPU without VNNI. ONNX Runtime multiplies u8
// activations by s8 weights there with instructions that add pairs of products into 16 bits and saturate
// (255 x 127 x 2 > 32767); 7-bit weights (int8_weight_bits: 7) cannot overflow. On an AVX2 host (session 24) the
// 8-bit file of models/r24a agreed with fp32 on 0.24 of next tokens over real text, its 7-bit file on 0.86.
func int8Runs(man *inference.Manifest, c cpuFacts) error {
	if man.Int8WeightBits == 7 || !c.x86 || c.vnni {
		return nil
	}
	return fmt.Errorf("model.quantized: %s has 8-bit weights (manifest int8_weight_bits absent or 8), which this CPU "+
		"(x86 without AVX-512 VNNI or AVX-VNNI) multiplies with saturating kernels and gets wrong answers from; rewrite "+
		"it with 7-bit weights (python -m icicle.export int8 --model DIR) or serve fp32 (model.quantized: false)",
		man.ONNXQuantized)
}

// Close closes the engine (waiting for in-flight requests) and the tokenizer. It is idempotent.
func (m *Model) Close() error {
	return errors.Join(m.Engine.Close(), m.tok.Close())
}

// BlockFile names dir's block store file in blockDir for a block layout and precision (inference.OpenBlockStore)
// and returns the model's spec: the name holds a hash of the manifest (less onnx_quantized and int8_weight_bits),
// the tokenizer and the fp32 ONNX file, which computes the blocks whether the sessions are int8 or not (Options.Quantized), so that
// blocks are only ever read by the model, template and tokenizer that computed them, and adding an int8 file to a
// directory keeps its store. A directory with a block_model is given its block model's file: every query side
// trained over the same frozen blocks reads one store. It reads the whole ONNX file (about 0.5 s for 540 MB).
func BlockFile(blockDir, dir, layout, precision string) (string, inference.Spec, error) {
	man, err := inference.LoadManifest(dir)
	if err != nil {
		return "", inference.Spec{}, err
	}
	if man.BlockModel != "" {
		// The blocks are the block model's: its file, shared by every query side trained over it.
		bman, err := BlockManifest(man)
		if err != nil {
			return "", inference.Spec{}, fmt.Errorf("block file of %s: %w", dir, err)
		}
		return BlockFile(blockDir, bman.Dir, layout, precision)
	}
	facts := *man
	facts.ONNXQuantized, facts.Int8WeightBits = "", 0
	raw, err := json.Marshal(facts)
	if err != nil {
		return "", inference.Spec{}, fmt.Errorf("block file of %s: %w", dir, err)
	}
	h := sha256.New()
	h.Write(raw)
	for _, name := range []string{man.Tokenizer, man.ONNX} {
		f, err := os.Open(man.Path(name))
		if err != nil {
			return "", inference.Spec{}, fmt.Errorf("block file of %s: %w", dir, err)
		}
		_, err = io.Copy(h, f)
		_ = f.Close()
		if err != nil {
			return "", inference.Spec{}, fmt.Errorf("block file of %s: read %s: %w", dir, name, err)
		}
	}
	id := hex.EncodeToString(h.Sum(nil))[:16]
	return filepath.Join(blockDir, fmt.Sprintf("%s-%s-%s-%s.blocks", man.Name, id, layout, precision)), man.Spec(), nil
}
