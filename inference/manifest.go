package inference

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"
)

// FormatVersion is the model directory format this package reads (MODEL_FORMAT.md).
const FormatVersion = 1

// Prompt formats (MODEL_FORMAT.md "Tokenisation rules"): how a candidate block is cut into separately
// encoded segments.
const (
	// PromptFormatV1 encodes the text after {summary}, title included, as one segment (the models trained
	// before prompt_format existed; a manifest without the field means this format).
	PromptFormatV1 = 1
	// PromptFormatV2 encodes the title as a segment of its own, so its ids inside the prompt are exactly
	// its docid's ids (literal copying).
	PromptFormatV2 = 2
)

// Template holds the prompt pieces of the paper's Appendix A.1 template. {i}, {summary}, {title} and
// {query} are substituted verbatim.
type Template struct {
	Header             string `json:"header"`
	Candidate          string `json:"candidate"`
	CandidateTitleOnly string `json:"candidate_title_only"`
	Query              string `json:"query"`
	// Format is the manifest's prompt_format (LoadManifest copies it here so that a PromptBuilder made
	// from the template builds that format); 0 means PromptFormatV1. Not part of the template object.
	Format int `json:"-"`
}

// Manifest describes a model directory; see MODEL_FORMAT.md for each field's meaning.
type Manifest struct {
	FormatVersion int    `json:"format_version"`
	Name          string `json:"name"`
	Config        string `json:"config"`
	Backbone      string `json:"backbone"`
	ModelVersion  string `json:"model_version"`
	DataVersion   string `json:"data_version"`
	ONNX          string `json:"onnx"`
	ONNXQuantized string `json:"onnx_quantized"`
	// Int8WeightBits is how many bits the int8 file's weights use: 7 (ONNX Runtime's reduce_range, right on
	// every x86 CPU) or 8 (also absent: files written before the field), which CPUs without VNNI multiply
	// with saturating kernels. Only with onnx_quantized.
	Int8WeightBits int `json:"int8_weight_bits,omitempty"`
	// Int8Head says the int8 file's tied output head is int8 too (`python -m icicle.int8 --head`): how
	// scripts/model.sh remakes the file for a directory shipped without it. Only with onnx_quantized.
	Int8Head         bool   `json:"int8_head,omitempty"`
	Tokenizer        string `json:"tokenizer"`
	SeenDocIDs       string `json:"seen_docids"`
	VocabSize        int    `json:"vocab_size"`
	NumLayers        int    `json:"num_layers"`
	NumKVHeads       int    `json:"num_kv_heads"`
	HeadDim          int    `json:"head_dim"`
	KVDType          string `json:"kv_dtype"`
	MaxContextTokens int    `json:"max_context_tokens"`
	// MaxSummaryTokens is the longest candidate summary the model was trained with, in tokens; the engine
	// never puts longer summaries into a prompt. Optional: 0 (absent) states no limit.
	MaxSummaryTokens int `json:"max_summary_tokens,omitempty"`
	// MaxPromptTokens is the longest prompt the model was trained with, in tokens; the engine never builds a
	// longer one (more candidates than training showed it). Optional: 0 (absent) caps at MaxContextTokens.
	MaxPromptTokens int `json:"max_prompt_tokens,omitempty"`
	// PromptFormat is the prompt format the model was trained with (PromptFormatV1 or PromptFormatV2).
	// Optional: 0 (absent) means PromptFormatV1.
	PromptFormat int `json:"prompt_format,omitempty"`
	// RopeTheta is the rotary embedding's base (the positions' frequencies theta^(-2j/head_dim)). Optional;
	// block reading (EngineOptions.Blocks) needs it to move a stored block's keys to another place.
	RopeTheta float64 `json:"rope_theta,omitempty"`
	// AttentionLengthRef records that the graph scales each row's attention logits by
	// max(1, ln(visible positions) / ln(AttentionLengthRef)) (`python -m icicle.delta lengthscale`): a
	// reader trained on short candidate lists reading 100 blocks. The graph does it; the engine only
	// reports it. Optional: 0 (absent) means none.
	AttentionLengthRef int `json:"attention_length_ref,omitempty"`
	// Routes are the decoding routes the model was trained for: "copy" (a title of the candidates, after
	// [COPY]) and "parametric" (a docid of the seen corpus from memory). Optional: absent means both. The
	// engine offers only these at step 0, so that a model never trained to recall the seen corpus does not
	// answer with an untrained route (nor spend Runs on it).
	Routes []Route `json:"routes,omitempty"`
	// BlockModel is the model directory (absolute, or relative to this one) whose fp32 graph computes the header's and the
	// candidates' blocks, for a model trained only at the query and answer positions over that model's frozen
	// blocks (`python -m icicle.queryside export`). Such a model reads only by shared blocks, and a block store
	// filled for BlockModel serves it as it is (loader.BlockFile names the store after BlockModel): a
	// retrained query side is swapped in without computing a block again. Optional.
	BlockModel  string   `json:"block_model,omitempty"`
	CopyTokenID int64    `json:"copy_token_id"`
	EndTokenID  int64    `json:"end_token_id"`
	Template    Template `json:"template"`

	// Dir is the directory the manifest was read from (not part of the file).
	Dir string `json:"-"`
}

// Spec returns the model shapes the manifest declares.
func (m *Manifest) Spec() Spec {
	return Spec{VocabSize: m.VocabSize, NumLayers: m.NumLayers, NumKVHeads: m.NumKVHeads, HeadDim: m.HeadDim}
}

// CheckBlockModel says why b (the directory m's block_model names) cannot compute m's blocks: another shape,
// tokenizer, prompt (template, format, summary cap) or rotary base would give blocks m's query side was not
// trained over. tokSame says whether the two tokenizer files are byte for byte the same.
func (m *Manifest) CheckBlockModel(b *Manifest, tokSame bool) error {
	var why []string
	if b.BlockModel != "" {
		why = append(why, fmt.Sprintf("it names a block_model of its own (%s)", b.BlockModel))
	}
	if m.Spec() != b.Spec() {
		why = append(why, fmt.Sprintf("its shape %+v is not %+v", b.Spec(), m.Spec()))
	}
	if !tokSame {
		why = append(why, "its tokenizer file differs")
	}
	if m.Template != b.Template || m.PromptFormat != b.PromptFormat || m.MaxSummaryTokens != b.MaxSummaryTokens {
		why = append(why, "its prompt (template, prompt_format or max_summary_tokens) differs")
	}
	if m.RopeTheta != b.RopeTheta || m.AttentionLengthRef != b.AttentionLengthRef {
		why = append(why, "its rope_theta or attention_length_ref differs")
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s: block_model %s cannot compute its blocks: %s", ErrBadModelDir, m.Dir, b.Dir, strings.Join(why, "; "))
}

// BlockModelDir is the directory block_model names: as written when absolute, else relative to m's.
func (m *Manifest) BlockModelDir() string {
	if filepath.IsAbs(m.BlockModel) {
		return m.BlockModel
	}
	return m.Path(m.BlockModel)
}

// Path returns the absolute path of a file named in the manifest.
func (m *Manifest) Path(name string) string { return filepath.Join(m.Dir, name) }

// ErrBadModelDir means a model directory breaks the MODEL_FORMAT.md contract.
var ErrBadModelDir = errors.New("bad model directory")

// LoadManifest reads and validates dir/manifest.json, reporting every broken field at once.
func LoadManifest(dir string) (*Manifest, error) {
	path := filepath.Join(dir, "manifest.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w: %w", dir, ErrBadModelDir, err)
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	m := &Manifest{Dir: dir}
	if err := dec.Decode(m); err != nil {
		return nil, fmt.Errorf("load model: %s: %w: %w", path, ErrBadModelDir, err)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("load model: %s: %w: %w", path, ErrBadModelDir, err)
	}
	m.Template.Format = m.promptFormat()
	return m, nil
}

// HasRoute reports whether the model was trained for route r (every route when the manifest names none).
func (m *Manifest) HasRoute(r Route) bool {
	return m.Routes == nil || slices.Contains(m.Routes, r)
}

func (m *Manifest) validate() error {
	var errs []error
	bad := func(field string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("field %q: %s", field, fmt.Sprintf(format, args...)))
	}
	if m.FormatVersion != FormatVersion {
		bad("format_version", "is %d, this build reads %d", m.FormatVersion, FormatVersion)
	}
	files := []struct{ field, name string }{{"onnx", m.ONNX}, {"tokenizer", m.Tokenizer}, {"seen_docids", m.SeenDocIDs}}
	for _, f := range files {
		field, name := f.field, f.name
		if name == "" {
			bad(field, "missing")
		} else if _, err := os.Stat(m.Path(name)); err != nil {
			bad(field, "file %s: %v", name, err)
		}
	}
	if m.BlockModel != "" {
		if _, err := os.Stat(filepath.Join(m.BlockModelDir(), "manifest.json")); err != nil {
			bad("block_model", "directory %s has no manifest: %v", m.BlockModel, err)
		}
	}
	if m.ONNXQuantized != "" {
		if _, err := os.Stat(m.Path(m.ONNXQuantized)); err != nil {
			bad("onnx_quantized", "file %s: %v", m.ONNXQuantized, err)
		}
	}
	switch {
	case m.Int8WeightBits != 0 && m.Int8WeightBits != 7 && m.Int8WeightBits != 8:
		bad("int8_weight_bits", "must be 7 or 8, got %d", m.Int8WeightBits)
	case m.Int8WeightBits != 0 && m.ONNXQuantized == "":
		bad("int8_weight_bits", "is set but onnx_quantized names no int8 file")
	}
	if m.Int8Head && m.ONNXQuantized == "" {
		bad("int8_head", "is set but onnx_quantized names no int8 file")
	}
	sizes := []struct {
		field string
		v     int
	}{{"vocab_size", m.VocabSize}, {"num_layers", m.NumLayers}, {"num_kv_heads", m.NumKVHeads}, {"head_dim", m.HeadDim}, {"max_context_tokens", m.MaxContextTokens}}
	for _, sz := range sizes {
		field, v := sz.field, sz.v
		if v <= 0 {
			bad(field, "must be positive, got %d", v)
		}
	}
	if m.MaxSummaryTokens < 0 {
		bad("max_summary_tokens", "must be positive or absent, got %d", m.MaxSummaryTokens)
	}
	if m.MaxPromptTokens < 0 || m.MaxPromptTokens > m.MaxContextTokens {
		bad("max_prompt_tokens", "must be in [1, max_context_tokens=%d] or absent, got %d", m.MaxContextTokens, m.MaxPromptTokens)
	}
	if m.AttentionLengthRef < 0 || m.AttentionLengthRef == 1 {
		bad("attention_length_ref", "must be at least 2 positions or absent, got %d", m.AttentionLengthRef)
	}
	if m.RopeTheta < 0 {
		bad("rope_theta", "must be positive or absent, got %g", m.RopeTheta)
	}
	if m.Routes != nil {
		if len(m.Routes) == 0 {
			bad("routes", "must name at least one of %q and %q, or be absent (both)", RouteCopy, RouteParametric)
		}
		for i, r := range m.Routes {
			if r != RouteCopy && r != RouteParametric {
				bad("routes", "entry %d is %q, want %q or %q", i, r, RouteCopy, RouteParametric)
			} else if slices.Index(m.Routes, r) != i {
				bad("routes", "names %q twice", r)
			}
		}
	}
	if m.KVDType != "float32" {
		bad("kv_dtype", "must be \"float32\", got %q", m.KVDType)
	}
	if m.CopyTokenID < 0 || int(m.CopyTokenID) >= m.VocabSize {
		bad("copy_token_id", "%d outside the vocabulary [0,%d)", m.CopyTokenID, m.VocabSize)
	}
	if m.EndTokenID < 0 || int(m.EndTokenID) >= m.VocabSize {
		bad("end_token_id", "%d outside the vocabulary [0,%d)", m.EndTokenID, m.VocabSize)
	}
	if m.CopyTokenID == m.EndTokenID {
		bad("end_token_id", "equals copy_token_id %d", m.CopyTokenID)
	}
	checks := []struct{ field, value string }{
		{"template.header", m.Template.Header},
		{"template.candidate", m.Template.Candidate},
		{"template.candidate_title_only", m.Template.CandidateTitleOnly},
		{"template.query", m.Template.Query},
	}
	for _, c := range checks {
		if c.value == "" {
			bad(c.field, "missing")
		}
	}
	if strings.Count(m.Template.Candidate, "{summary}") != 1 || !strings.Contains(m.Template.Candidate, "{title}") {
		bad("template.candidate", "must contain {summary} once and {title}")
	}
	if !strings.Contains(m.Template.CandidateTitleOnly, "{title}") {
		bad("template.candidate_title_only", "must contain {title}")
	}
	if !strings.Contains(m.Template.Query, "{query}") {
		bad("template.query", "must contain {query}")
	}
	switch m.PromptFormat {
	case 0, PromptFormatV1:
	case PromptFormatV2:
		if err := checkTemplateV2(m.Template); err != nil {
			bad(err.field, "%s", err.msg)
		}
	default:
		bad("prompt_format", "is %d, this build reads %d or %d (absent = %d)", m.PromptFormat, PromptFormatV1, PromptFormatV2, PromptFormatV1)
	}
	return errors.Join(errs...)
}

// promptFormat returns the manifest's prompt format, PromptFormatV1 when absent.
func (m *Manifest) promptFormat() int {
	if m.PromptFormat == 0 {
		return PromptFormatV1
	}
	return m.PromptFormat
}

type templateError struct{ field, msg string }

// checkTemplateV2 reports the first template field that PromptFormatV2 cannot cut into segments: the
// candidate needs {summary} then {title}, once each; the title-only block {title} once.
func checkTemplateV2(t Template) *templateError {
	c := t.Candidate
	if strings.Count(c, "{summary}") != 1 || strings.Count(c, "{title}") != 1 || strings.Index(c, "{summary}") > strings.Index(c, "{title}") {
		return &templateError{"template.candidate", "prompt_format 2 needs {summary} then {title}, once each"}
	}
	if strings.Count(t.CandidateTitleOnly, "{title}") != 1 {
		return &templateError{"template.candidate_title_only", "prompt_format 2 needs {title} once"}
	}
	return nil
}

// ReadDocIDs reads a seen-corpus file: one docid per line, UTF-8, no empty lines, no duplicates.
func ReadDocIDs(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read docids: %w", err)
	}
	defer f.Close()
	var ids []string
	seen := make(map[string]int)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for line := 1; sc.Scan(); line++ {
		s := sc.Text()
		switch {
		case s == "":
			return nil, fmt.Errorf("read docids: %s:%d: empty docid", path, line)
		case !utf8.ValidString(s):
			return nil, fmt.Errorf("read docids: %s:%d: invalid UTF-8", path, line)
		}
		if prev, ok := seen[s]; ok {
			return nil, fmt.Errorf("read docids: %s:%d: docid %q repeats line %d", path, line, s, prev)
		}
		seen[s] = line
		ids = append(ids, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read docids: %s: %w", path, err)
	}
	return ids, nil
}
