package inference

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func writeModelDir(t *testing.T, mutate func(map[string]any)) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"model.onnx", "tokenizer.json"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "seen_docids.txt"), []byte("Alpha\nBeta\n"), 0o644))
	m := map[string]any{
		"format_version": 1, "name": "t", "onnx": "model.onnx", "tokenizer": "tokenizer.json", "seen_docids": "seen_docids.txt",
		"vocab_size": 10, "num_layers": 1, "num_kv_heads": 1, "head_dim": 4, "kv_dtype": "float32", "max_context_tokens": 64,
		"copy_token_id": 9, "end_token_id": 0,
		"template": map[string]any{"header": "H", "candidate": "[{i}] {summary} {title}", "candidate_title_only": "[{i}] {title}", "query": "Q {query}"},
	}
	if mutate != nil {
		mutate(m)
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644))
	return dir
}

func TestLoadManifest(t *testing.T) {
	m, err := LoadManifest(writeModelDir(t, nil))
	require.NoError(t, err)
	require.Equal(t, Spec{VocabSize: 10, NumLayers: 1, NumKVHeads: 1, HeadDim: 4}, m.Spec())
	require.Equal(t, PromptFormatV1, m.Template.Format, "no prompt_format: format 1, as every older model")
	m, err = LoadManifest(writeModelDir(t, func(m map[string]any) { m["prompt_format"] = 2 }))
	require.NoError(t, err)
	require.Equal(t, PromptFormatV2, m.Template.Format, "prompt_format reaches the template the engine builds with")
	require.True(t, m.HasRoute(RouteCopy) && m.HasRoute(RouteParametric), "no routes: both")
	m, err = LoadManifest(writeModelDir(t, func(m map[string]any) { m["routes"] = []string{"copy"} }))
	require.NoError(t, err)
	require.True(t, m.HasRoute(RouteCopy))
	require.False(t, m.HasRoute(RouteParametric))

	tests := []struct {
		name   string
		mutate func(map[string]any)
		want   []string
	}{
		{"every problem at once", func(m map[string]any) {
			m["format_version"] = 2
			m["copy_token_id"] = 10
			m["onnx"] = "missing.onnx"
			m["kv_dtype"] = "float16"
		}, []string{`"format_version"`, `"copy_token_id": 10 outside`, `"onnx": file missing.onnx`, `"kv_dtype"`}},
		{"template without placeholders", func(m map[string]any) {
			m["template"] = map[string]any{"header": "H", "candidate": "{title}", "candidate_title_only": "x", "query": "q"}
		}, []string{`"template.candidate"`, `"template.candidate_title_only"`, `"template.query"`}},
		{"unknown field", func(m map[string]any) { m["vocab"] = 3 }, []string{`unknown field "vocab"`}},
		{"negative summary cap", func(m map[string]any) { m["max_summary_tokens"] = -1 }, []string{`"max_summary_tokens": must be positive or absent`}},
		{"prompt cap past the context", func(m map[string]any) { m["max_prompt_tokens"] = 1 << 20 }, []string{`"max_prompt_tokens": must be in [1, max_context_tokens=`}},
		{"length ref of one position", func(m map[string]any) { m["attention_length_ref"] = 1 }, []string{`"attention_length_ref": must be at least 2 positions or absent, got 1`}},
		{"same copy and end token", func(m map[string]any) { m["end_token_id"] = 9 }, []string{`"end_token_id": equals copy_token_id`}},
		{"unknown route", func(m map[string]any) { m["routes"] = []string{"copy", "memory"} }, []string{`"routes": entry 1 is "memory", want "copy" or "parametric"`}},
		{"no route", func(m map[string]any) { m["routes"] = []string{} }, []string{`"routes": must name at least one`}},
		{"route twice", func(m map[string]any) { m["routes"] = []string{"copy", "copy"} }, []string{`"routes": names "copy" twice`}},
		{"unknown prompt format", func(m map[string]any) { m["prompt_format"] = 3 }, []string{`"prompt_format": is 3, this build reads 1 or 2`}},
		{"int8 bits neither 7 nor 8", func(m map[string]any) {
			m["onnx_quantized"] = "model.onnx"
			m["int8_weight_bits"] = 4
		}, []string{`"int8_weight_bits": must be 7 or 8, got 4`}},
		{"int8 bits without an int8 file", func(m map[string]any) { m["int8_weight_bits"] = 7 }, []string{`"int8_weight_bits": is set but onnx_quantized names no int8 file`}},
		{"block model without a manifest", func(m map[string]any) { m["block_model"] = "../nowhere" }, []string{`"block_model": directory ../nowhere has no manifest`}},
		{"int8 head without an int8 file", func(m map[string]any) { m["int8_head"] = true }, []string{`"int8_head": is set but onnx_quantized names no int8 file`}},
		{"format 2 title before summary", func(m map[string]any) {
			m["prompt_format"] = 2
			m["template"] = map[string]any{"header": "H", "candidate": "{title} {summary}", "candidate_title_only": "{title}", "query": "{query}"}
		}, []string{`"template.candidate": prompt_format 2 needs {summary} then {title}`}},
		{"format 2 title twice", func(m map[string]any) {
			m["prompt_format"] = 2
			m["template"] = map[string]any{"header": "H", "candidate": "{summary} {title}", "candidate_title_only": "{title}{title}", "query": "{query}"}
		}, []string{`"template.candidate_title_only": prompt_format 2 needs {title} once`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadManifest(writeModelDir(t, tc.mutate))
			require.ErrorIs(t, err, ErrBadModelDir)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

// TestCheckBlockModel: a block model computes a query side's blocks only with the same shape, tokenizer, prompt
// and rotary base, and without a block model of its own; every difference is named.
func TestCheckBlockModel(t *testing.T) {
	frozen, err := LoadManifest(writeModelDir(t, nil))
	require.NoError(t, err)
	q, err := LoadManifest(writeModelDir(t, func(m map[string]any) { m["block_model"] = frozen.Dir }))
	require.NoError(t, err)
	require.NoError(t, q.CheckBlockModel(frozen, true))

	other := *frozen
	other.HeadDim, other.MaxSummaryTokens, other.RopeTheta, other.BlockModel = 8, 24, 1e4, "x"
	err = q.CheckBlockModel(&other, false)
	require.ErrorIs(t, err, ErrBadModelDir)
	for _, w := range []string{"block_model of its own (x)", "its shape", "its tokenizer file differs",
		"its prompt (template, prompt_format or max_summary_tokens) differs", "its rope_theta"} {
		require.ErrorContains(t, err, w)
	}
	tmpl := *frozen
	tmpl.Template.Header = "other"
	require.ErrorContains(t, q.CheckBlockModel(&tmpl, true), "its prompt")
}

func TestReadDocIDs(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "ids.txt")
		require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
		return p
	}
	ids, err := ReadDocIDs(write("A\nB (film)\nZürich\n"))
	require.NoError(t, err)
	require.Equal(t, []string{"A", "B (film)", "Zürich"}, ids)
	_, err = ReadDocIDs(write("A\n\nB\n"))
	require.ErrorContains(t, err, ":2: empty docid")
	_, err = ReadDocIDs(write("A\nB\nA\n"))
	require.ErrorContains(t, err, `:3: docid "A" repeats line 1`)
	_, err = ReadDocIDs(write("A\n\xff\n"))
	require.ErrorContains(t, err, ":2: invalid UTF-8")
}
