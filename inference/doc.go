// Package inference turns a query and its BM25 candidates into ranked document ids with the ICICLE
// model: it builds the prompt under a token budget, prefills it once, and runs the routed,
// trie-constrained search of the paper's Algorithm 1. The router token [COPY] sends decoding to the
// context trie (the in-context titles, scored exactly with one tree-attention Run); otherwise the
// global trie of the seen corpus constrains a beam search over the model's parametric memory, or, with
// Options.MemoryScope, a trie of the seen documents the first stage listed for this request.
//
// Files: prompt.go builds the prompt, decode.go is the Engine and the search (prefill, copy route,
// parametric route), blocks.go the block reading that replaces the prefill when EngineOptions.Blocks is
// set (each candidate block computed once and stored, only the query and the answer per request), trie.go
// the tries, manifest.go the model directory's contract.
//
// The package is pure Go. The native seams, Tokenizer and Model, are implemented in inference/tok
// (daulet/tokenizers) and inference/ort (ONNX Runtime); tests use fakes. MODEL_FORMAT.md is the
// contract with the training pipeline.
package inference
