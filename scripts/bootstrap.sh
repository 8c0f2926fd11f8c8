#!/usr/bin/env bash
# Install everything the project needs on a fresh machine, from the package registries only, into
# ${ICICLE_CACHE:-$HOME/.cache/icicle}. Idempotent: a second run takes seconds.
#   scripts/bootstrap.sh            native libraries, Elasticsearch, the encoder, the tests' proxy and clients, Python venv
#   scripts/bootstrap.sh --no-python    all of that but the Python venv
#   scripts/bootstrap.sh --demo         what `make demo` needs: native libraries, Elasticsearch and the encoder
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
step() { printf '\n== %s\n' "$*" >&2; }
# libtokenizers is the one long CPU job (a cold cargo build); it runs in the background while the downloads
# and, for the demo, the Go packages' compilation go on.
tok_log=$(mktemp)
step "libtokenizers (cargo, daulet/tokenizers; in the background, log $tok_log)"
"$here/tokenizers.sh" >/dev/null 2>"$tok_log" &
tok_pid=$!
trap 'kill "$tok_pid" 2>/dev/null || true; rm -f "$tok_log"' EXIT
step "ONNX Runtime (npm onnxruntime-node)";     "$here/ort.sh" >/dev/null
step "Elasticsearch node (Maven Central jars)";  "$here/es.sh" install >/dev/null
step "The first stage's dense encoder (Maven Central jar)"; "$here/encoder.sh" >/dev/null
if [[ "${1:-}" == "--demo" ]]; then
  step "The sidecar's Go packages (compiled while libtokenizers builds)"; "$here/build.sh" --deps
fi
if ! wait "$tok_pid"; then
  tail -n 30 "$tok_log" >&2
  echo "bootstrap: building libtokenizers failed (above)" >&2
  exit 1
fi
grep -h 'tokenizers.sh: built' "$tok_log" >&2 || true
if [[ "${1:-}" == "--demo" ]]; then
  echo "bootstrap: done for the demo (cache ${ICICLE_CACHE:-$HOME/.cache/icicle})" >&2
  exit 0
fi
step "Elasticsearch 9.x node for the tests (Maven Central jars)"; ICICLE_ES_VERSION=9.5.3 "$here/es.sh" install >/dev/null
step "nginx, the tests' authenticating proxy (Debian)"; "$here/authproxy.sh" install >/dev/null
step "Official Elasticsearch clients for the integration tests (PyPI, npm)"; "$here/clients.sh" >/dev/null
if [[ "${1:-}" != "--no-python" ]]; then
  step "Python venv for training/ (PyPI)";        "$here/pyenv.sh" >/dev/null
fi
echo "bootstrap: done (cache ${ICICLE_CACHE:-$HOME/.cache/icicle})" >&2
