// Package plugin is the sidecar's HTTP face: the Gin router, the wire types (wire.go), the handlers, the
// one error to HTTP mapping (errors.go), authentication (auth.go), the model's hot swap (swap.go) and the
// HTTP layer's Prometheus metrics.
//
// A /v1 handler decodes and checks its request, calls the package that does the work and returns its
// answer or error to one writer (api.go): /v1/rerank and /v1/search rank with the pipeline (package rank),
// /v1/search from the request's arm of the A/B experiment (package internal/abtest, ab.go), whose clicks
// POST /v1/click logs. The Elasticsearch API in front of the cluster, its searches reranked, is package
// dropin; dropin.go serves it in Elasticsearch's shapes. The package declares the small interfaces it
// consumes (Searcher, Ingester); cmd/icicle wires the adapter, the pipeline and the logs into them.
package plugin
