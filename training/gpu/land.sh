#!/usr/bin/env bash
# Here, after a GPU queue job's `collect` came back: joins the delta's pieces, checks them, keeps the run's log in
# training/results/reader/ with the delta itself (commit them), and builds a servable model directory from the
# delta (icicle.delta build: export, parity, golden decodes; then its int8 file, icicle.export int8) unless
# --check-only.
#
#   training/gpu/land.sh NAME FILES_DIR [MODEL_DIR]      # MODEL_DIR default models/NAME
#   training/gpu/land.sh --check-only NAME FILES_DIR     # join, sha256, and the delta applies to the backbone
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
check=0
if [[ ${1:-} == --check-only ]]; then check=1; shift; fi
name=${1:?NAME} from=$(cd "${2:?FILES_DIR}" && pwd) dest=$(realpath -m "${3:-$root/models/$1}")
venv=${ICICLE_VENV:-$("$root/scripts/pyenv.sh")}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat "$from/$name".delta.part* >"$work/$name.delta.safetensors"
(cd "$work" && sha256sum -c "$from/$name.delta.sha256")
if [[ $check == 1 ]]; then
  (cd "$root/training" && HF_HUB_OFFLINE=1 "$venv/bin/python" -c "
import sys
from safetensors.torch import load_file
from icicle.configs import get_config
from icicle.delta import base_state_dict, unpack
sd = unpack(load_file(sys.argv[1]), base_state_dict(get_config('reader135')))
print(f'land.sh: the delta applies: {len(sd)} tensors')" "$work/$name.delta.safetensors")
  exit 0
fi
res="$root/training/results/reader"
mkdir -p "$res" "$dest"
cp "$from/$name.log.jsonl" "$res/$name.log.jsonl"
cp "$from/$name.run.json" "$res/$name.run.json"
# The delta itself beside its log, to be committed: it is the loan's only product, and nothing outside git survives
# to the next session's machine (r26e, landed in session 26 into .run/ only, was lost so).
cp "$work/$name.delta.safetensors" "$res/$name.delta.safetensors"
(cd "$root/training" && HF_HUB_OFFLINE=1 "$venv/bin/python" -m icicle.delta build --delta "$work/$name.delta.safetensors" --out "$dest")
# The manifest names the run, not its config (icicle-reader135 otherwise): what /readyz, A/B reports and gates show.
(cd "$root/training" && "$venv/bin/python" -c "
import json, sys
p = sys.argv[1] + '/manifest.json'
m = json.load(open(p))
m['name'] = 'icicle-' + sys.argv[2]
open(p, 'w', encoding='utf-8').write(json.dumps(m, indent=2, ensure_ascii=False) + chr(10))" "$dest" "$name")
# The int8 file for the query (served with model.quantized: true; docs/research/2026-11-readers.md, "int8 weights for
# the query").
(cd "$root/training" && "$venv/bin/python" -m icicle.export int8 --model "$dest" &&
  "$venv/bin/python" -m icicle.export agree --model "$dest")  # how often its next token is fp32's (30 s)
cp "$work/$name.delta.safetensors" "$dest/delta.safetensors"
# model.onnx was just built from this delta: the stamp that scripts/model.sh checks (no graph.onnx here)
sha256sum <"$dest/delta.safetensors" | cut -d' ' -f1 >"$dest/model.onnx.delta-sha256"
# The seen-document questions the run never trained on, for scripts/calibrate.sh's second half (the memory route).
# The set is the one stage.sh carried (ICICLE_READERSET).
set_file=${ICICLE_READERSET:-$HOME/.cache/icicle/readerset/readerset.json.gz}
(cd "$root/training" && "$venv/bin/python" -m icicle.readerdata seen-heldout --set "$set_file" \
  --data "$root/data/nq_qed" --out "$dest/seen_heldout_queries.jsonl")
echo "land.sh: commit $res/$name.delta.safetensors with its log: nothing outside git outlives this machine" >&2
echo "land.sh: $dest built; next: scripts/calibrate.sh $dest, then the sidecar's eval (training/gpu/README.md)"
