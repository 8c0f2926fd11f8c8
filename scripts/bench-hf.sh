#!/usr/bin/env bash
# Side-by-side latency of the Go engine against GENRE-style serving (Hugging Face generate with num_beams
# and prefix_allowed_tokens_fn) on the same machine, weights, prompts and tries; prints a markdown table
# per (candidates N, beam width W): HF and Go median ms, their ratio, top-1 agreement (HF vs Go, and Go vs
# the Python reference decoder icicle.decode), Go forward Runs per query.
#
#   scripts/bench-hf.sh                 # 20 dev queries x N 3/10/20/50/100 x W 1/4/10, 3 rounds
#   QUERIES=5 ROUNDS=1 scripts/bench-hf.sh   # quick look
#
# Env: QUERIES (20), ROUNDS (3), REPEATS per arm per round (1), OUT (a fresh temp dir), MODEL_DIR
# (models/tiny), EXPLAIN (disagreements to analyse, -1 all). Re-running with the same OUT resumes: slices
# whose results are there are skipped. Both arms use 2 intra-op threads. The arms
# are interleaved: each round runs HF then Go on one N slice of the cases at a time, so a load change on
# a shared machine hits both; a query's latency is the median over rounds (and repeats), a cell's the
# median over its queries.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
QUERIES=${QUERIES:-20}
ROUNDS=${ROUNDS:-3}
REPEATS=${REPEATS:-1}
EXPLAIN=${EXPLAIN:--1}
MODEL_DIR=$(cd "${MODEL_DIR:-models/tiny}" && pwd)
OUT=${OUT:-$(mktemp -d /tmp/icicle-bench-hf.XXXXXX)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

VENV=$(scripts/pyenv.sh)
eval "$(scripts/env.sh)"
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error OMP_NUM_THREADS=2
py() { (cd training && "$VENV/bin/python" -m icicle.lab.hf_baseline --model-dir "$MODEL_DIR" "$@"); }

echo "== out: $OUT" >&2
echo "== 1. HF Llama vs model.py vs ONNX logits" >&2
py verify | tee "$OUT/verify.json" >&2

echo "== 2. cases ($QUERIES dev queries, BM25 top-N)" >&2
py cases --out "$OUT/cases.jsonl" --queries "$QUERIES"
# one file per N, so the arms can alternate on slices of a few seconds to a minute
"$VENV/bin/python" - "$OUT" <<'EOF'
import json, sys, collections
out = sys.argv[1]
by = collections.defaultdict(list)
for l in open(f"{out}/cases.jsonl", encoding="utf-8"):
    by[json.loads(l)["n"]].append(l)
for n, ls in by.items():
    open(f"{out}/cases.n{n}.jsonl", "w", encoding="utf-8").writelines(ls)
EOF

echo "== 3. Go test binary" >&2
go test -c -tags "ort tokenizers" -o "$OUT/inference.test" ./inference

echo "== 4. rounds (HF, Go alternating per N slice)" >&2
for r in $(seq 1 "$ROUNDS"); do
  for f in "$OUT"/cases.n*.jsonl; do
    n=$(basename "$f" .jsonl); n=${n#cases.}
    if [[ -s "$OUT/hf.r$r.$n.jsonl" && -s "$OUT/go.r$r.$n.jsonl" ]]; then continue; fi  # resume with the same OUT
    py hf --cases "$f" --out "$OUT/hf.r$r.$n.jsonl" --repeats "$REPEATS" --threads 2
    (cd inference && ICICLE_MODEL_DIR="$MODEL_DIR" ICICLE_BENCH_CASES="$f" ICICLE_BENCH_OUT="$OUT/go.r$r.$n.jsonl" \
      ICICLE_BENCH_REPEATS="$REPEATS" "$OUT/inference.test" -test.run '^TestCompareHF$' -test.v) | grep -E 'cases|FAIL' >&2
    echo "   round $r $n done" >&2
  done
done

echo "== 5. Python reference decoder (icicle.decode over ONNX Runtime)" >&2
py ref --cases "$OUT/cases.jsonl" --out "$OUT/ref.jsonl"

echo "== 6. table" >&2
py table --cases "$OUT/cases.jsonl" --hf "$OUT"/hf.r*.jsonl --go "$OUT"/go.r*.jsonl --ref "$OUT/ref.jsonl" \
  --explain "$EXPLAIN" | tee "$OUT/table.md"
