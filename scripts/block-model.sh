#!/usr/bin/env bash
# Write a block-reading variant of a model directory: links to SRC's files and a manifest whose
# candidate templates drop the per-request "[{i}] " (so that a candidate's block is the same wherever it is
# listed and is stored once) and whose max_prompt_tokens is MAX (room for 100 candidates). The weights are
# SRC's: a model trained on causal prompts reads blocks zero-shot (docs/research/2026-11-readers.md,
# "Block reading").
# ROUTES=copy writes "routes": ["copy"] (a model trained with no seen-corpus instances, as b1: MODEL_FORMAT.md).
#   [ROUTES=copy] scripts/block-model.sh SRC DST [MAX=4096]
# Serve it with experimental.block_reading contiguous or shared (ICICLE_EXPERIMENTAL_BLOCK_READING).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
die() { echo "block-model.sh: $*" >&2; exit 1; }
[[ $# == 2 || $# == 3 ]] || die "usage: scripts/block-model.sh SRC DST [MAX_PROMPT_TOKENS]"
src=$(cd "$1" && pwd) dst=$2 max=${3:-4096}
[[ -f $src/manifest.json ]] || die "$src: no manifest.json"
scripts/model.sh "$src"
[[ -f $src/model.onnx ]] || die "$src: no model.onnx"
mkdir -p "$dst"
for f in "$src"/*; do
  [[ $(basename "$f") == manifest.json ]] || ln -sfn "$f" "$dst/$(basename "$f")"
done
python3 - "$src/manifest.json" "$dst/manifest.json" "$max" "${ROUTES:-}" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
if not m.get("rope_theta"):
    sys.exit(f"block-model.sh: {sys.argv[1]} has no rope_theta (block reading moves keys by it)")
for k in ("candidate", "candidate_title_only"):
    m["template"][k] = m["template"][k].replace("[{i}] ", "- ")
m["max_prompt_tokens"] = min(int(sys.argv[3]), m["max_context_tokens"])
m["name"] += "-blocks"
if sys.argv[4]:
    m["routes"] = sys.argv[4].split(",")
json.dump(m, open(sys.argv[2], "w"), indent=2)
PY
echo "block-model.sh: $dst (template without [{i}], max_prompt_tokens $(python3 -c "import json;print(json.load(open('$dst/manifest.json'))['max_prompt_tokens'])"))" >&2
