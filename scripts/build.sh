#!/usr/bin/env bash
# Build bin/icicle with ONNX Runtime and the HF tokenizer compiled in (installs them first if needed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
eval "$(scripts/env.sh)"
mkdir -p bin
go build -tags "ort tokenizers" -o bin/icicle ./cmd/icicle
echo "build: bin/icicle (ICICLE_ORT_LIB=$ICICLE_ORT_LIB)" >&2
