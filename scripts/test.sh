#!/usr/bin/env bash
# The whole test suite (make test; .ci/run runs exactly this). Installs what is missing first.
#   1. Go, CGO off: vet + tests of every pure package against fakes (native seams are stubs)
#   2. Go, race detector, pure packages
#   3. Go native: ONNX Runtime + HF tokenizer against the committed models/tiny fixture (golden vectors)
#   4. Python: training/ stages, export parity, reference decoder (pytest)
#   5. Integration: a real Elasticsearch node on loopback + the real model, end to end, and the official
#      Python and JavaScript Elasticsearch clients against the drop-in (scripts/clients.sh)
# Set ICICLE_TEST_SKIP_PYTHON=1 to skip step 4 on a machine without the venv.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
step() { printf '\n== %s\n' "$*"; }
start=$(date +%s)

step "bootstrap"
if [[ "${ICICLE_TEST_SKIP_PYTHON:-0}" == 1 ]]; then scripts/bootstrap.sh --no-python; else scripts/bootstrap.sh; fi
eval "$(scripts/env.sh)"

step "Go: vet and test with CGO_ENABLED=0 (pure Go, native seams stubbed)"
CGO_ENABLED=0 go vet ./...
CGO_ENABLED=0 go test -count=1 ./...

step "Go: race detector"
go test -race -count=1 ./...

step "Go: native ONNX Runtime + tokenizers against models/tiny"
go vet -tags "ort tokenizers" ./...
go test -race -count=1 -tags "ort tokenizers" ./inference/... ./cmd/...

step "Go: short fuzz of request decoding and corpus parsing"
go test -run '^$' -fuzz '^FuzzRerankRequest$' -fuzztime 10s ./plugin
go test -run '^$' -fuzz '^FuzzCorpusReader$' -fuzztime 10s ./adapter

if [[ "${ICICLE_TEST_SKIP_PYTHON:-0}" != 1 ]]; then
  step "Python: training pipeline (pytest)"
  venv=$(scripts/pyenv.sh)
  rc=0
  (cd training && "$venv/bin/python" -m pytest -q -p no:cacheprovider tests) || rc=$?
  if [[ $rc == 5 ]]; then echo "test.sh: pytest collected no tests; that is a failure here" >&2; exit 1; fi
  [[ $rc == 0 ]] || exit "$rc"
fi

step "Integration: real Elasticsearch node on loopback"
export ICICLE_ES_PORT=${ICICLE_TEST_ES_PORT:-9250} ICICLE_RUN_DIR=$PWD/.run/test
scripts/es.sh start
trap 'scripts/es.sh stop >/dev/null 2>&1 || true' EXIT
eval "$(scripts/clients.sh)" # the official Python and JavaScript clients that integration/clients_test.go drives
ICICLE_ES_URL=$(scripts/es.sh url) go test -count=1 -tags "integration ort tokenizers" ./adapter/... ./integration/...

printf '\ntest.sh: all suites passed in %ss\n' "$(( $(date +%s) - start ))"
