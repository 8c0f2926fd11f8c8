// Package compress holds the document compressors shared by ingestion (cmd/icicle ingest) and, in
// Python, by training (training/icicle/compress.py): both must produce the same summary for the same
// text, or the model sees summaries at serving time unlike those it was trained on.
//
// Two compressors implement Compressor: Lead, the extractive default (the first LeadWords words,
// deterministic and free), and LLM, the paper's abstractive summary (appendix D.1) from an
// OpenAI-compatible chat completions endpoint with the prompt in prompt.json, which the Python side reads
// from the same file.
package compress

import (
	"context"
	"strings"
	"unicode"
)

// LeadWords is the number of words the extractive default keeps.
const LeadWords = 120

// Name identifies the extractive default in manifests and ingestion reports.
const Name = "extractive-lead-120w"

// Compressor summarises one document into the text the prompt shows for it (at most a few hundred
// tokens; the prompt builder cuts it further in tokens).
type Compressor interface {
	// ID names the compressor and every setting that changes its output, such as
	// "extractive-lead-120w" or "llm:<model>:<prompt sha256 prefix>:<max tokens>"; caches key on it.
	ID() string
	// Compress returns the summary of the document with this title and text. It may call a remote
	// model, honours ctx, and never returns an empty summary with a nil error unless text is blank.
	Compress(ctx context.Context, title, text string) (string, error)
}

// Extractive returns the first LeadWords whitespace-separated words of text joined by single spaces:
// deterministic, free, and close to the paper's observation that the lead of a Wikipedia passage carries
// most retrieval cues. Python's twin is " ".join(text.split()[:120]); words are split at exactly the
// characters Python's str.split() splits at (Unicode White_Space plus U+001C..U+001F), which
// testdata/extractive.golden.json pins on both sides.
func Extractive(text string) string {
	words := strings.FieldsFunc(text, isPySpace)
	return strings.Join(words[:min(len(words), LeadWords)], " ")
}

// isPySpace reports whether Python's str.isspace() is true for r: Go's unicode.IsSpace (the White_Space
// property) plus the four ASCII information separators, which Python counts as whitespace.
func isPySpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// Lead is the extractive default as a Compressor: Extractive(text), title unused, never an error.
type Lead struct{}

// ID returns Name.
func (Lead) ID() string { return Name }

// Compress returns Extractive(text).
func (Lead) Compress(_ context.Context, _, text string) (string, error) { return Extractive(text), nil }
