// Package compress holds the document compressors shared by ingestion (cmd/icicle ingest) and, in
// Python, by training (training/icicle/compress.py): both must produce the same summary for the same
// text, or the model sees summaries at serving time unlike those it was trained on.
package compress

import "strings"

// LeadWords is the number of words the extractive default keeps.
const LeadWords = 120

// Name identifies the extractive default in manifests and ingestion reports.
const Name = "extractive-lead-120w"

// Extractive returns the first LeadWords whitespace-separated words of text joined by single spaces:
// deterministic, free, and close to the paper's observation that the lead of a Wikipedia passage carries
// most retrieval cues. Python's twin is " ".join(text.split()[:120]).
func Extractive(text string) string {
	words := strings.Fields(text)
	return strings.Join(words[:min(len(words), LeadWords)], " ")
}
