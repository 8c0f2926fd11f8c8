package loader

import (
	"fmt"
	"log/slog"

	"github.com/icicle-search/sidecar/inference/dense"
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/inference/tok"
)

// EncoderOptions configure OpenEncoder.
type EncoderOptions struct {
	// Runtime is the encoder session's ONNX Runtime options (threads).
	Runtime ort.Options
	// Encoder tunes batching (dense.Options).
	Encoder dense.Options
	// Logger receives load logs; nil discards.
	Logger *slog.Logger
}

// OpenEncoder loads the encoder directory dir (encoder.json, its ONNX graph and tokenizer.json; fetched
// by scripts/encoder.sh) into a ready dense.Encoder. ONNX Runtime must be initialised first. Every error
// names the directory and the file at fault; on error nothing stays open.
func OpenEncoder(dir string, opts EncoderOptions) (*dense.Encoder, error) {
	man, err := dense.LoadManifest(dir)
	if err != nil {
		return nil, fmt.Errorf("open encoder %s: %w", dir, err)
	}
	tk, err := tok.Load(man.Path(man.Tokenizer))
	if err != nil {
		return nil, fmt.Errorf("open encoder %s: tokenizer: %w", dir, err)
	}
	sess, err := ort.LoadEncoder(man.Path(man.ONNX), man.Dims, man.TokenTypeIDs, opts.Runtime, opts.Logger)
	if err != nil {
		tk.Close()
		return nil, fmt.Errorf("open encoder %s: %w", dir, err)
	}
	enc, err := dense.New(man, tk, sess, opts.Encoder)
	if err != nil {
		sess.Close()
		tk.Close()
		return nil, fmt.Errorf("open encoder %s: %w", dir, err)
	}
	return enc, nil
}
