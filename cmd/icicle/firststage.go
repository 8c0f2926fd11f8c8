package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/config"
	"github.com/icicle-search/sidecar/inference/dense"
	"github.com/icicle-search/sidecar/inference/loader"
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/internal/vecfile"
	"github.com/icicle-search/sidecar/retrieve"
)

// openEncoder opens first_stage.encoder_dir (nil, nil when it is ""), embedding up to passageRuns passages
// at once (dense.Options.PassageRuns). ONNX Runtime must be initialised.
func openEncoder(c config.FirstStage, passageRuns int, log *slog.Logger) (*dense.Encoder, error) {
	if c.EncoderDir == "" {
		return nil, nil
	}
	enc, err := loader.OpenEncoder(c.EncoderDir, loader.EncoderOptions{
		Runtime: ort.Options{Threads: c.EncoderThreads, InterOpThreads: 1},
		Encoder: dense.Options{PassageRuns: passageRuns, MaxRuns: max(passageRuns, runtime.GOMAXPROCS(0))}, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("first stage encoder (first_stage.encoder_dir %q): %w", c.EncoderDir, err)
	}
	log.Info("first stage encoder loaded", "encoder", enc.Name(), "dir", c.EncoderDir, "dims", enc.Dims(), "threads", c.EncoderThreads)
	return enc, nil
}

// firstStageParams are the fusion settings of c, replaced by c.ParamsFile's when it is set.
func firstStageParams(c config.FirstStage) (retrieve.Params, error) {
	p := retrieve.Params{Method: c.Method, DenseWeight: c.DenseWeight, DenseWeightSpread: c.DenseWeightSpread, RRFK: c.RRFK,
		Depth: c.Depth, KNN: c.KNN}
	if c.ParamsFile == "" {
		return p, p.Validate()
	}
	f, err := readParamsFile(c.ParamsFile)
	if err != nil {
		return p, fmt.Errorf("first_stage.params_file: %w", err)
	}
	return f.Params, nil
}

// paramsFile is what `icicle calibrate -first-stage` writes: the fitted settings and how they were fitted.
type paramsFile struct {
	retrieve.Params
	// Fit describes the fit: the queries, the objective and the held-out figures.
	Fit json.RawMessage `json:"fit,omitempty"`
}

// fittedFields are the fields BM25 searched when the file was fitted (its fit record's "fields"); nil when the
// record does not say (a file written by hand, or before the record named them).
func (f paramsFile) fittedFields() []string {
	var fit struct {
		Fields []string `json:"fields"`
	}
	if len(f.Fit) == 0 || json.Unmarshal(f.Fit, &fit) != nil {
		return nil
	}
	return fit.Fields
}

// fieldsMismatch says, when c.ParamsFile was fitted with BM25 over other fields than search, which ones: its
// settings were chosen for another BM25 ranking than the one served ("" when they match, the file does not
// say, or no file is set; firstStageParams reports a file it cannot read). The sidecar serves it anyway, with
// a warning: a team may mean it.
func fieldsMismatch(c config.FirstStage, search []string) string {
	if c.ParamsFile == "" {
		return ""
	}
	f, err := readParamsFile(c.ParamsFile)
	if err != nil {
		return ""
	}
	fitted := f.fittedFields()
	if fitted == nil || slices.Equal(fitted, search) {
		return ""
	}
	return fmt.Sprintf("first_stage.params_file %s was fitted with BM25 over [%s], and fields.search is [%s]: "+
		"its settings were chosen for another BM25 ranking; fit them again with icicle calibrate -first-stage",
		c.ParamsFile, strings.Join(fitted, ", "), strings.Join(search, ", "))
}

func readParamsFile(path string) (paramsFile, error) {
	var f paramsFile
	b, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("read %s: %w", path, err)
	}
	if err := f.Params.Validate(); err != nil {
		return f, fmt.Errorf("read %s: %w", path, err)
	}
	return f, nil
}

// embedDocs turns an encoder into the adapter's Embed callback: each document's PassageText.
func embedDocs(enc *dense.Encoder) func(ctx context.Context, docs []adapter.Doc) ([][]float32, error) {
	return func(ctx context.Context, docs []adapter.Doc) ([][]float32, error) {
		texts := make([]string, len(docs))
		for i, d := range docs {
			texts[i] = dense.PassageText(d.Title, d.Text)
		}
		return enc.Passages(ctx, texts)
	}
}

// embedKnown embeds docs with embed, except those whose title and text have a vector in set (made by the
// same encoder: the caller checks), which are taken from it, scaled back to unit length when the encoder
// normalises (the file keeps half precision; the index's dot_product similarity wants unit vectors); known
// counts them.
func embedKnown(set *vecfile.Set, normalize bool, embed func(context.Context, []adapter.Doc) ([][]float32, error),
	known *atomic.Int64) func(context.Context, []adapter.Doc) ([][]float32, error) {
	return func(ctx context.Context, docs []adapter.Doc) ([][]float32, error) {
		out := make([][]float32, len(docs))
		var rest []adapter.Doc
		var at []int
		for i, d := range docs {
			if v, ok := set.Get(d.Title, d.Text); ok {
				if normalize {
					v = dense.Normalized(v)
				}
				out[i] = v
				continue
			}
			rest, at = append(rest, d), append(at, i)
		}
		known.Add(int64(len(docs) - len(rest)))
		if len(rest) == 0 {
			return out, nil
		}
		vs, err := embed(ctx, rest)
		if err != nil {
			return nil, err
		}
		for j, i := range at {
			out[i] = vs[j]
		}
		return out, nil
	}
}

// vectorDims is the adapter's VectorDims for an encoder (0 without one).
func vectorDims(enc *dense.Encoder) int {
	if enc == nil {
		return 0
	}
	return enc.Dims()
}
