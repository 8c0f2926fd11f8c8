// Package plugin is the sidecar's HTTP face: the Gin router, the wire types, the handlers, the error
// to HTTP mapping (errors.go), the circuit breaker that falls back to BM25, and the Prometheus metrics.
//
// A request reads top to bottom: handler -> Searcher (BM25 hits with summaries) -> Reranker (prompt,
// routed decode) -> Searcher.Resolve (documents of parametric docids) -> response. The package declares
// the two small interfaces it consumes; cmd/icicle wires the adapter and inference packages into them.
package plugin
