// Package dense embeds queries and passages with a bi-encoder, the dense half of the first stage: BM25's
// candidates re-scored, and kNN over the index, by the cosine of the query's vector and each document's
// (adapter stores one per document at ingest).
//
// The package is pure Go: the manifest (encoder.json), tokenisation rules (the model's own [CLS] and
// [SEP] around at most max_tokens-2 word pieces, the query prefix), batching by length, pooling and L2
// normalisation. The native seams are Tokenizer (inference/tok) and Session (inference/ort's
// Encoder), so the logic is tested against fakes with CGO off. The encoder's files come from a Maven
// Central jar (scripts/encoder.sh); golden vectors from a Python reference pin Go to it
// (parity_test.go).
package dense
