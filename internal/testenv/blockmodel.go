package testenv

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BlockModel writes what scripts/block-model.sh writes, for tests: a directory of links to src's files and a
// manifest whose candidate templates drop the per-request "[{i}] " (so that a candidate's block is the same
// wherever it is listed) and whose max_prompt_tokens is max_context_tokens (room for 100 candidates).
func BlockModel(t testing.TB, src string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "manifest.json" {
			continue
		}
		if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(filepath.Join(src, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var man map[string]any
	if err := json.Unmarshal(raw, &man); err != nil {
		t.Fatalf("%s/manifest.json: %v", src, err)
	}
	tmpl, _ := man["template"].(map[string]any)
	for _, k := range []string{"candidate", "candidate_title_only"} {
		s, _ := tmpl[k].(string)
		tmpl[k] = strings.ReplaceAll(s, "[{i}] ", "- ")
	}
	man["max_prompt_tokens"] = man["max_context_tokens"]
	if raw, err = json.Marshal(man); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
