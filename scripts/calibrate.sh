#!/usr/bin/env bash
# Fit a model directory's gate (gate.json) on nq_qed queries the model never trained on, through the sidecar
# exactly as it serves: the last step of `make model-small` (and of any reader the reader pipeline or the fixture recipe builds).
#   scripts/calibrate.sh MODEL_DIR [more icicle calibrate flags, e.g. -dry-run]
#
# What it runs (docs/evaluation.md, "Calibrating the gate", says why these queries):
#   1. an Elasticsearch node on loopback (its own, in $ICICLE_RUN_DIR/calibrate), or the one at
#      ICICLE_CALIBRATE_ES_URL (left running);
#   2. data/nq_qed ingested into the index icicle-calibrate with the first stage's vectors, MODEL_DIR/seen_docids.txt
#      marking the seen ones;
#   3. the sidecar on that index with MODEL_DIR, policy.mode gate, the first stage of data/nq_qed/first_stage.json
#      (ICICLE_FIRST_STAGE_PARAMS_FILE), a 20 s request budget (so a loaded machine gives the model's answer, not a
#      timeout fallback, for every query);
#   4. bin/icicle calibrate on the NQ train queries whose document is in D_new (training/icicle/data.py:
#      no D_new document is ever trained on), which writes MODEL_DIR/gate.json and keeps the features in
#      $run/samples.jsonl (refit with `bin/icicle calibrate -samples FILE -model-dir MODEL_DIR`);
#      for a model with a memory route, whose directory holds seen_heldout_queries.jsonl (the seen-document
#      questions kept out of its training: training/gpu/land.sh writes it), on those too, and the gate is
#      fitted on both halves together.
# Environment: ICICLE_CALIBRATE_ES_PORT [9270], ICICLE_CALIBRATE_ADDR [127.0.0.1:8170],
# ICICLE_CALIBRATE_N [10000] (queries at most; 657 exist), ICICLE_CALIBRATE_ES_URL [start a node].
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
die() { echo "calibrate.sh: $*" >&2; exit 1; }
[[ $# -ge 1 ]] || die "usage: scripts/calibrate.sh MODEL_DIR [icicle calibrate flags]"
model=$1; shift
[[ -f $model/manifest.json ]] || die "$model: no manifest.json (want a model directory, inference/MODEL_FORMAT.md)"
[[ -f $model/seen_docids.txt ]] || die "$model: no seen_docids.txt"

run=${ICICLE_RUN_DIR:-$PWD/.run}/calibrate
mkdir -p "$run"
scripts/bootstrap.sh --no-python >/dev/null
scripts/build.sh >/dev/null
eval "$(scripts/env.sh)"

started_es=0
pid=
cleanup() {
  [[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  if [[ $started_es == 1 ]]; then ICICLE_RUN_DIR=$run ICICLE_ES_PORT=$es_port scripts/es.sh stop >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

if [[ -n ${ICICLE_CALIBRATE_ES_URL:-} ]]; then
  es_url=$ICICLE_CALIBRATE_ES_URL
else
  es_port=${ICICLE_CALIBRATE_ES_PORT:-9270}
  ICICLE_RUN_DIR=$run ICICLE_ES_PORT=$es_port scripts/es.sh start
  started_es=1
  es_url=$(ICICLE_RUN_DIR=$run ICICLE_ES_PORT=$es_port scripts/es.sh url)
fi

export ICICLE_ELASTICSEARCH_ADDRESSES=$es_url ICICLE_ELASTICSEARCH_INDEX=icicle-calibrate
export ICICLE_MODEL_DIR=$model ICICLE_POLICY_MODE=gate
# The model's answer is what the gate is fitted on, even where the model's current gate.json never promotes.
export ICICLE_EXPERIMENTAL_RUN_MODEL_WHEN_GATE_NEVER=true
# The gate decides against the baseline the sidecar serves: the first stage fitted on nq_qed's training queries.
export ICICLE_FIRST_STAGE_PARAMS_FILE=${ICICLE_FIRST_STAGE_PARAMS_FILE:-data/nq_qed/first_stage.json}
export ICICLE_SERVER_ADDR=${ICICLE_CALIBRATE_ADDR:-127.0.0.1:8170}
export ICICLE_SERVER_REQUEST_TIMEOUT=20s ICICLE_SERVER_WRITE_TIMEOUT=60s
# and a queue wait as long: with the default 1 s, a second query waiting on a busy model fell back "overloaded"
# and was left out of the fit (r24a: 92 to 153 of 657 on a busy machine)
export ICICLE_CONCURRENCY_QUEUE_TIMEOUT=10s
url=http://$ICICLE_SERVER_ADDR

printf '\n== Ingest nq_qed into icicle-calibrate (seen: %s/seen_docids.txt)\n' "$model" >&2
bin/icicle ingest -corpus data/nq_qed/corpus.jsonl.gz >&2

printf '\n== The D_new documents (the hash rule of training/icicle/data.py)\n' >&2
(cd training && python3 -c "import gzip, json, sys; from icicle.data import is_new_doc
ids = [json.loads(l)['docid'] for l in gzip.open('../data/nq_qed/corpus.jsonl.gz')]
open(sys.argv[1], 'w').write(''.join(d + '\n' for d in ids if is_new_doc(d)))" "$run/d_new.txt")
echo "calibrate.sh: $(wc -l <"$run/d_new.txt") D_new documents" >&2

printf '\n== Sidecar (policy gate) at %s\n' "$url" >&2
bin/icicle serve >"$run/sidecar.log" 2>&1 &
pid=$!
for _ in $(seq 120); do
  curl -fsS "$url/readyz" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { tail -n 30 "$run/sidecar.log" >&2; die "the sidecar exited (log above)"; }
  sleep 0.5
done
curl -fsS "$url/readyz" >/dev/null || die "sidecar not ready after 60 s; log: $run/sidecar.log"

new_half=(-sidecar "$url" -model-dir "$model" -split train -subsets new -n "${ICICLE_CALIBRATE_N:-10000}"
  -docids "$run/d_new.txt")
seen=$model/seen_heldout_queries.jsonl
if [[ ! -f $seen ]]; then
  printf '\n== icicle calibrate (new-document queries; the model has no %s)\n' "$(basename "$seen")" >&2
  bin/icicle calibrate "${new_half[@]}" -samples-out "$run/samples.jsonl" "$@"
  exit 0
fi
# A model with a memory route: its gate is fitted on both halves, or it promotes the memory route's answers on
# seen-document queries it was never fitted on (docs/research/2026-11-readers.md, "`models/r24a`": 10 promoted,
# all wrong).
printf '\n== icicle calibrate, new-document queries\n' >&2
bin/icicle calibrate "${new_half[@]}" -samples-out "$run/samples_new.jsonl" "$@" -dry-run
printf '\n== icicle calibrate, %s seen-document questions kept out of its training (%s)\n' "$(wc -l <"$seen")" "$seen" >&2
bin/icicle calibrate -sidecar "$url" -model-dir "$model" -queries "$seen" -split train -subsets seen -docids "" \
  -n "${ICICLE_CALIBRATE_N:-10000}" -samples-out "$run/samples_seen.jsonl" "$@" -dry-run
cat "$run/samples_new.jsonl" "$run/samples_seen.jsonl" >"$run/samples.jsonl"
printf '\n== icicle calibrate, both halves\n' >&2
bin/icicle calibrate -samples "$run/samples.jsonl" -model-dir "$model" "$@"
