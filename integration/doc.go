// Package integration holds the end-to-end tests: a real Elasticsearch node (scripts/es.sh, named by
// ICICLE_ES_URL), the real ONNX model and tokenizer (models/small, which has both routes, else the models/tiny fixture;
// ICICLE_MODEL_DIR overrides), and the sidecar's HTTP API in
// between. They carry the build tags "integration ort tokenizers" and run from scripts/test.sh. The
// docker-compose validation (compose_test.go) is pure Go and runs everywhere.
package integration
