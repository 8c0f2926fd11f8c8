// Package retrieve is the sidecar's first stage: BM25 and a dense encoder combined, the ranking every
// answer starts from. It is the baseline a response keeps when the model does not move anything, the
// order every fallback answers, and the order of the model's candidates (its context is the first stage's
// top N among new documents).
//
// One query runs, within Elasticsearch's share of the request budget:
//
//  1. BM25 over all documents and over new ones (Params.Depth each), while the encoder embeds the query;
//  2. one multi-search with the query vector: the kNN top Params.KNN over all and over new documents, and
//     the exact cosine of every BM25 hit (a kNN query filtered to their ids);
//  3. Fuse: the union of each pair of lists, ordered by Params.Method (a min-max linear blend of the
//     cosine and the BM25 score, or weighted reciprocal rank fusion).
//
// The fusion runs in the sidecar, not in Elasticsearch: the node the project runs (no x-pack, no
// painless) has no rrf retriever and no script_score, and the same code then works against any cluster.
// When the encoder or the dense searches fail, BM25 alone answers and the result says so (Info.Baseline,
// Info.Reason); the model's circuit breaker is not involved.
package retrieve
