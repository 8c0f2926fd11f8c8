#!/usr/bin/env bash
# Install (once) the official Elasticsearch clients the integration tests drive against the drop-in, and
# print the environment that points the tests at them.
#
#   scripts/clients.sh          install if missing; print ICICLE_CLIENTS_PYTHON=... and ICICLE_CLIENTS_NODE_PATH=...
#   eval "$(scripts/clients.sh)"
#
# Python: the `elasticsearch` client (PyPI, PYTHON_PIN) in its own venv, never training/'s, under
#   ${ICICLE_CACHE:-$HOME/.cache/icicle}/clients/python-<pin>.
# JavaScript: `@elastic/elasticsearch` (npm, NODE_PIN) under .../clients/node-<pin>/node_modules.
# A marker written after a successful install makes later runs an instant no-op; an interrupted install is
# redone. Needs python3 (3.9+, with venv) and node/npm (18+), network to PyPI and npm on the first run.
set -euo pipefail

PYTHON_PIN='elasticsearch==8.19.*'
NODE_PIN='@elastic/elasticsearch@8.19'

die() { echo "clients.sh: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found on PATH: $2"; }

cache=${ICICLE_CACHE:-$HOME/.cache/icicle}/clients
py_dir=$cache/python-8.19
node_dir=$cache/node-8.19

python_client() {
  [[ -f $py_dir/.icicle-ok ]] && return
  local py=${ICICLE_CLIENTS_PY:-python3}
  need "$py" "install python3 with venv (apt-get install python3-venv)"
  rm -rf "$py_dir"
  mkdir -p "$cache"
  "$py" -m venv "$py_dir" >&2 || die "'$py -m venv $py_dir' failed (on Debian: apt-get install python3-venv)"
  PIP_CACHE_DIR=${ICICLE_CACHE:-$HOME/.cache/icicle}/pip PIP_DISABLE_PIP_VERSION_CHECK=1 \
    "$py_dir/bin/pip" install --quiet "$PYTHON_PIN" >&2 || die "pip install $PYTHON_PIN failed (PyPI reachable?)"
  "$py_dir/bin/python" -c 'import elasticsearch, sys; v = elasticsearch.__versionstr__; sys.exit(not v.startswith("8.19."))' ||
    die "the installed elasticsearch client is not 8.19.x"
  touch "$py_dir/.icicle-ok"
}

node_client() {
  [[ -f $node_dir/.icicle-ok ]] && return
  need node "install Node.js 18+ (apt-get install nodejs npm)"
  need npm "install npm (apt-get install npm)"
  rm -rf "$node_dir"
  mkdir -p "$node_dir"
  echo '{"name":"icicle-clients","private":true}' >"$node_dir/package.json"
  (cd "$node_dir" && npm install --silent --no-audit --no-fund --cache "${ICICLE_CACHE:-$HOME/.cache/icicle}/npm" "$NODE_PIN" >&2) ||
    die "npm install $NODE_PIN failed (npm registry reachable?)"
  (cd "$node_dir" && node -e 'const v = JSON.parse(require("fs").readFileSync("node_modules/@elastic/elasticsearch/package.json")).version; process.exit(v.startsWith("8.19.") ? 0 : 1)') ||
    die "the installed @elastic/elasticsearch is not 8.19.x"
  touch "$node_dir/.icicle-ok"
}

python_client
node_client
echo "export ICICLE_CLIENTS_PYTHON=$py_dir/bin/python ICICLE_CLIENTS_NODE_PATH=$node_dir/node_modules"
