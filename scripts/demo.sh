#!/usr/bin/env bash
# The main job on the embedded default: a real Elasticsearch node on loopback, the demo corpus (nq_qed) with
# the first stage's vectors, the sidecar (by default no reader: the first stage alone), and a side-by-side
# comparison of BM25, the first stage alone and the sidecar. Leaves the sidecar running.
#   scripts/demo.sh         (make demo)   set up and run
#   scripts/demo.sh stop    (make stop)   stop the sidecar and the Elasticsearch node
# Environment: ICICLE_MODEL_DIR [none: no reader; a reader's directory, e.g. models/reader135, has its model.onnx
# built once by scripts/model.sh, and its seen_docids.txt marks the seen documents and splits the queries],
# ICICLE_PROFILE [none: a reader profile of config/profiles, read by every command; set ICICLE_MODEL_DIR to its
# reader too, so that the reader is built], ICICLE_SERVER_ADDR [127.0.0.1:8080],
# ICICLE_FIRST_STAGE_PARAMS_FILE [data/nq_qed/first_stage.json: the fusion fitted on nq_qed's training queries],
# ICICLE_ES_PORT [9200], DEMO_QUERIES [100] (dev queries per seen/new group), DEMO_SWEEP [none] and
# DEMO_PAPER_SHOTS [none] (e.g. 3,10,20,50,100: the N-shot sweep and the paper protocol, slower),
# DEMO_CONCURRENCY [1] (requests in flight). One at a time: on 2 cores a causal reader (reader135: 0.7 s a query)
# serves one query at a time; at 4 in flight every answer fell back to the first stage (model timeouts opened the
# breaker), which is the sidecar protecting latency, not a comparison of rankings. `bin/icicle load` measures
# behaviour under load.
# DEMO_CONFIG [none]: a YAML config for ingest, serve and eval (the environment overrides its keys).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
run=${ICICLE_RUN_DIR:-$PWD/.run}
mkdir -p "$run"
pidfile=$run/sidecar.pid

stop_sidecar() {
  if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    kill -TERM "$(cat "$pidfile")"
    for _ in $(seq 50); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.2; done
    echo "demo: sidecar stopped" >&2
  fi
  rm -f "$pidfile"
}

if [[ "${1:-}" == "stop" ]]; then
  stop_sidecar
  scripts/es.sh stop
  exit 0
fi

scripts/bootstrap.sh --no-python
scripts/build.sh
eval "$(scripts/env.sh)"
cfg=()
if [[ -n ${DEMO_CONFIG:-} ]]; then
  [[ -f $DEMO_CONFIG ]] || { echo "demo: DEMO_CONFIG=$DEMO_CONFIG: no such file" >&2; exit 1; }
  cfg=(-config "$DEMO_CONFIG")
fi
export ICICLE_MODEL_DIR=${ICICLE_MODEL_DIR:-}
if [[ -n $ICICLE_MODEL_DIR ]]; then
  scripts/model.sh "$ICICLE_MODEL_DIR" # a reader shipped as a delta gets its model.onnx built once
fi
export ICICLE_SERVER_ADDR=${ICICLE_SERVER_ADDR:-127.0.0.1:8080}
# The first stage's fusion as `icicle calibrate -first-stage` fitted it on nq_qed's training queries (a team
# fits its own the same way; docs/evaluation.md, "The first stage").
export ICICLE_FIRST_STAGE_PARAMS_FILE=${ICICLE_FIRST_STAGE_PARAMS_FILE:-data/nq_qed/first_stage.json}
export ICICLE_ELASTICSEARCH_ADDRESSES=$(scripts/es.sh url)
url=http://$ICICLE_SERVER_ADDR

printf '\n== Elasticsearch\n' >&2
scripts/es.sh start

printf '\n== Ingest the demo corpus with the first stage'"'"'s vectors (documents in %s/seen_docids.txt are marked seen; a rerun keeps the stored vectors)\n' "$ICICLE_MODEL_DIR" >&2
bin/icicle ingest "${cfg[@]}" -corpus data/nq_qed/corpus.jsonl.gz

printf '\n== Sidecar\n' >&2
stop_sidecar
nohup bin/icicle serve "${cfg[@]}" >"$run/sidecar.log" 2>&1 &
echo $! >"$pidfile"
for _ in $(seq 120); do
  curl -fsS "$url/readyz" >/dev/null 2>&1 && break
  kill -0 "$(cat "$pidfile")" 2>/dev/null || { echo "demo: sidecar exited; log:" >&2; tail -n 30 "$run/sidecar.log" >&2; exit 1; }
  sleep 0.5
done
curl -fsS "$url/readyz" >/dev/null || { echo "demo: sidecar not ready after 60 s; log: $run/sidecar.log" >&2; exit 1; }

printf '\n== Side by side: BM25, the first stage alone and the sidecar on nq_qed dev queries (%s seen-document + %s new-document)\n\n' \
  "${DEMO_QUERIES:-100}" "${DEMO_QUERIES:-100}" >&2
bin/icicle eval "${cfg[@]}" -sidecar "$url" -n "${DEMO_QUERIES:-100}" -sweep "${DEMO_SWEEP:-}" -paper-shots "${DEMO_PAPER_SHOTS:-}" \
  -concurrency "${DEMO_CONCURRENCY:-1}" -out "$run/eval"
echo "demo: full report in $run/eval/report.md (JSON and PNG plots beside it)" >&2

cat <<TXT

The sidecar is running at $url (pid $(cat "$pidfile"), log $run/sidecar.log), next to Elasticsearch at $ICICLE_ELASTICSEARCH_ADDRESSES.
Try:
  curl -s $url/v1/search -d '{"query": "who sang the theme song for the office", "size": 3}'
  curl -s $url/v1/model
  curl -s $url/metrics | grep ^icicle_
Stop both with: make stop
TXT
