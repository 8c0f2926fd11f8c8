//go:build tokenizers

package tok

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/internal/dataset"
	"github.com/icicle-search/sidecar/internal/testenv"
)

// modelDir is the model directory whose tokenizer and golden vectors the tests use: $ICICLE_MODEL_DIR, or
// models/tiny at the repository root (written by training/).
func modelDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("ICICLE_MODEL_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "models", "tiny")
	}
	if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err != nil {
		testenv.Missing(t, "no model fixture at %s (%v): produce models/tiny with training/ or set ICICLE_MODEL_DIR", dir, err)
	}
	return dir
}

func tokenizerPath(t testing.TB, dir string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	require.NoError(t, err)
	var m struct {
		Tokenizer string `json:"tokenizer"`
	}
	require.NoError(t, json.Unmarshal(raw, &m), "manifest.json")
	if m.Tokenizer == "" {
		m.Tokenizer = "tokenizer.json"
	}
	return filepath.Join(dir, m.Tokenizer)
}

type goldenLine struct {
	Text string  `json:"text"`
	IDs  []int64 `json:"ids"`
}

func readGolden(t testing.TB, dir string) []goldenLine {
	t.Helper()
	path := filepath.Join(dir, "golden", "tokenize.jsonl")
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		testenv.Missing(t, "no %s: training/ writes it with the fixture", path)
	}
	require.NoError(t, err)
	defer f.Close()
	var lines []goldenLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		var g goldenLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &g), "%s:%d", path, n)
		lines = append(lines, g)
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, lines, path)
	return lines
}

func load(t testing.TB) (*Tokenizer, []goldenLine) {
	t.Helper()
	dir := modelDir(t)
	golden := readGolden(t, dir)
	tk, err := Load(tokenizerPath(t, dir))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tk.Close()) })
	return tk, golden
}

func TestEncodeGolden(t *testing.T) {
	tk, golden := load(t)
	for i, g := range golden {
		t.Run(fmt.Sprintf("%d", i), func(t *testing.T) {
			got, err := tk.Encode(g.Text)
			require.NoError(t, err)
			require.NotNil(t, got)
			if len(g.IDs) == 0 {
				require.Empty(t, got, "text %q", g.Text)
				return
			}
			require.Equal(t, g.IDs, got, "text %q", g.Text)
		})
	}
}

// TestEncodeGoldenEveryModel replays the tokenizer golden vectors of every committed model directory
// (models/*/golden/tokenize.jsonl), the shipped default models/small included, each with its own
// tokenizer.json.
func TestEncodeGoldenEveryModel(t *testing.T) {
	found, err := filepath.Glob(filepath.Join("..", "..", "models", "*", "golden", "tokenize.jsonl"))
	require.NoError(t, err)
	var dirs []string
	for _, f := range found {
		dirs = append(dirs, filepath.Dir(filepath.Dir(f)))
	}
	if !slices.Contains(dirs, filepath.Join("..", "..", "models", "small")) {
		testenv.Missing(t, "no golden vectors in models/small, the shipped default; found %v", dirs)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			golden := readGolden(t, dir)
			tk, err := Load(tokenizerPath(t, dir))
			require.NoError(t, err)
			defer tk.Close()
			for i, g := range golden {
				got, err := tk.Encode(g.Text)
				require.NoError(t, err, "line %d", i+1)
				if len(g.IDs) == 0 {
					require.Empty(t, got, "line %d: text %q", i+1, g.Text)
					continue
				}
				require.Equal(t, g.IDs, got, "line %d: text %q", i+1, g.Text)
			}
			t.Logf("%s: %d golden tokenisations match", dir, len(golden))
		})
	}
}

func TestEncodeConcurrent(t *testing.T) {
	tk, golden := load(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for range 50 {
				for _, g := range golden {
					got, err := tk.Encode(g.Text)
					if err != nil {
						errs <- err
						return
					}
					if len(got) != len(g.IDs) {
						errs <- fmt.Errorf("text %q: %d ids, want %d", g.Text, len(got), len(g.IDs))
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func TestEncodeRejectsNUL(t *testing.T) {
	tk, _ := load(t)
	_, err := tk.Encode("a\x00b")
	require.ErrorIs(t, err, ErrNULByte)
}

func TestCloseIdempotent(t *testing.T) {
	dir := modelDir(t)
	tk, err := Load(tokenizerPath(t, dir))
	require.NoError(t, err)
	require.Positive(t, tk.VocabSize())
	require.NoError(t, tk.Close())
	require.NoError(t, tk.Close())
	_, err = tk.Encode("x")
	require.ErrorIs(t, err, ErrClosed)
	require.Zero(t, tk.VocabSize())
}

func TestLoadErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.json")
	_, err := Load(missing)
	require.ErrorContains(t, err, "nope.json")

	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte("{not json"), 0o600))
	_, err = Load(bad)
	require.ErrorContains(t, err, "bad.json")
}

// BenchmarkEncodePassages tokenizes the first 200 nq_qed passages with the encoder's WordPiece tokenizer
// (models/bge-small-en-v15-q) and the reader's byte-level BPE (models/small): the tokenizer's share of embedding
// a document. Reports passages per second.
func BenchmarkEncodePassages(b *testing.B) {
	docs, err := dataset.ReadJSONL[struct{ Title, Text string }](filepath.Join("..", "..", "data", "nq_qed", "corpus.jsonl.gz"), 200)
	require.NoError(b, err)
	passages := make([]string, len(docs))
	for i, d := range docs {
		passages[i] = d.Title + "\n" + d.Text
	}
	require.Len(b, passages, 200)
	for _, model := range []string{"bge-small-en-v15-q", "small"} {
		b.Run(model, func(b *testing.B) {
			tk, err := Load(filepath.Join("..", "..", "models", model, "tokenizer.json"))
			require.NoError(b, err)
			defer tk.Close()
			n := 0
			for b.Loop() {
				for _, p := range passages {
					ids, err := tk.Encode(p)
					require.NoError(b, err)
					n += len(ids)
				}
			}
			b.ReportMetric(float64(b.N*len(passages))/b.Elapsed().Seconds(), "passages/s")
		})
	}
}
