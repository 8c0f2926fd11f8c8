#!/usr/bin/env bash
# Measure the first stage over a large index, once per vector index type: what docs/sizing.md is built from.
#
#   scripts/sizing.sh DATA_DIR OUT_DIR [TYPES]
#
# DATA_DIR holds corpus.jsonl.gz and vectors.gz (`python -m icicle.lab.million make` in training/: nq_qed and
# wiki_intro_pool with their real vectors, synthetic documents around them up to a million). TYPES defaults to
# "hnsw int8_hnsw bbq_hnsw" (first_stage.vector_index). For each type, against the Elasticsearch node at
# $ICICLE_ELASTICSEARCH_ADDRESSES (one node; 9.x for bbq_hnsw):
#   1. `icicle ingest -refresh=false` into index sizing-<type>, then a refresh and a force merge to one
#      segment, each timed (the index's refresh_interval is -1 while it loads: an index template);
#   2. the index's size by field (`_disk_usage`) and in all (`_stats`);
#   3. the kNN's recall@10 against exact search over the same vectors, for 200 nq_qed dev queries
#      (`icicle.lab.million recall`);
#   4. a sidecar over the index, and `icicle eval` through it: BM25 (A) against the first stage (F) on the
#      nq_qed dev queries, Hits@1 and p50/p99 one request at a time.
# Everything lands in OUT_DIR/<type>/; a type whose index is already loaded (OUT_DIR/<type>/times.json) is
# measured again without reloading. Needs bin/icicle (scripts/build.sh) and the graft venv (numpy).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
DATA=${1:?usage: scripts/sizing.sh DATA_DIR OUT_DIR [TYPES]}
OUT=${2:?usage: scripts/sizing.sh DATA_DIR OUT_DIR [TYPES]}
TYPES=${3:-hnsw int8_hnsw bbq_hnsw}
ES=${ICICLE_ELASTICSEARCH_ADDRESSES:?set ICICLE_ELASTICSEARCH_ADDRESSES to the node}
PORT=${SIZING_SIDECAR_PORT:-8097}
DATA=$(cd "$DATA" && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$REPO"
PY=$(scripts/pyenv.sh --graft)/bin/python
now() { date +%s.%N; }
secs() { python3 -c "print(round($2 - $1, 1))"; }
sidecar=
trap '[[ -n $sidecar ]] && kill $sidecar 2>/dev/null || true' EXIT

curl -sf -XPUT "$ES/_index_template/icicle-sizing" -H 'Content-Type: application/json' \
  -d '{"index_patterns":["sizing-*"],"template":{"settings":{"refresh_interval":"-1","number_of_replicas":0}}}' >/dev/null

# The query vectors: the served encoder's (the manifest's prefix, one query a run), computed in Python with the
# encoder's own graph and a WordPiece that reproduces its golden ids (icicle.lab.encoder_nbits).
qv=$OUT/dev-queries.npy
if [[ ! -f $qv ]]; then
  (cd training && "$PY" - "$qv" <<'EOF'
import gzip, json, sys
import numpy as np
from icicle.lab.encoder_nbits import WordPiece, run, session
d = "../models/bge-small-en-v15-q"
prefix = json.load(open(d + "/encoder.json"))["query_prefix"]
wp, sess = WordPiece(d + "/tokenizer.json"), session(d + "/model.onnx", 2)
with gzip.open("../data/nq_qed/queries.jsonl.gz", "rt") as f:
    qs = [q["query"] for q in map(json.loads, f) if q["split"] == "dev"][:200]
np.save(sys.argv[1], np.concatenate([run(sess, [wp.encode(prefix + q)]) for q in qs]))
EOF
  )
fi

for t in $TYPES; do
  idx=sizing-${t//_/-}
  dir=$OUT/$t
  mkdir -p "$dir"
  echo "== $t: index $idx"
  if [[ -f $dir/times.json ]] && curl -sf "$ES/$idx/_count" >/dev/null; then
    echo "(loaded before: $(cat "$dir/times.json"))"   # a rerun measures the index again without reloading it
  else
    curl -s -XDELETE "$ES/$idx" >/dev/null
    t0=$(now)
    ICICLE_ELASTICSEARCH_INDEX=$idx ICICLE_FIRST_STAGE_VECTOR_INDEX=$t /usr/bin/time -v bin/icicle ingest -quiet -refresh=false \
      -corpus "$DATA/corpus.jsonl.gz" -vectors "$DATA/vectors.gz" >"$dir/ingest.log" 2>&1
    t1=$(now)
    curl -sf -XPOST "$ES/$idx/_refresh" >/dev/null
    t2=$(now)
    curl -sf -XPOST "$ES/$idx/_forcemerge?max_num_segments=1" >/dev/null
    t3=$(now)
    docs=$(curl -sf "$ES/$idx/_count" | python3 -c 'import json,sys; print(json.load(sys.stdin)["count"])')
    echo "{\"type\":\"$t\",\"docs\":$docs,\"ingest_s\":$(secs "$t0" "$t1"),\"refresh_s\":$(secs "$t1" "$t2"),\"forcemerge_s\":$(secs "$t2" "$t3")}" | tee "$dir/times.json"
  fi
  curl -sf -XPOST "$ES/$idx/_disk_usage?run_expensive_tasks=true" >"$dir/disk_usage.json"
  curl -sf "$ES/$idx/_stats/store,segments" >"$dir/stats.json"
  (cd training && "$PY" -m icicle.lab.million recall --es "$ES" --index "$idx" --vectors "$DATA/vectors.gz" \
    --corpus "$DATA/corpus.jsonl.gz" --queries "$qv" --num-candidates 100,200) | tee "$dir/recall.jsonl"
  ICICLE_ELASTICSEARCH_INDEX=$idx ICICLE_FIRST_STAGE_VECTOR_INDEX=$t ICICLE_SERVER_ADDR=127.0.0.1:$PORT \
    bin/icicle serve >"$dir/serve.log" 2>&1 &
  sidecar=$!
  for _ in $(seq 120); do curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null && break; sleep 1; done
  ICICLE_ELASTICSEARCH_INDEX=$idx ICICLE_FIRST_STAGE_VECTOR_INDEX=$t bin/icicle eval -sidecar "http://127.0.0.1:$PORT" \
    -n 500 -sweep '' -paper-shots '' -concurrency 1 -warmup 20 -out "$dir/eval" >"$dir/eval.log" 2>&1
  grep -A12 "^| arm" "$dir/eval.log" | head -20 || tail -20 "$dir/eval.log"
  grep -o "VmRSS[^,]*" "$dir/eval.log" || true
  kill $sidecar; wait $sidecar 2>/dev/null || true; sidecar=
done
