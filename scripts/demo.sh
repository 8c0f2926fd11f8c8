#!/usr/bin/env bash
# The main job on the embedded default: a real Elasticsearch node on loopback, the demo corpus (nq_qed) with the
# first stage's vectors, the sidecar serving its default (the first stage alone, no reader), and one table of
# BM25, the first stage, the default and an ICICLE reader's own ranking on the same questions. Leaves the
# default sidecar running.
#   scripts/demo.sh         (make demo)   set up and run
#   scripts/demo.sh stop    (make stop)   stop the sidecar and the Elasticsearch node
#
# The reader's arm runs in a second sidecar on a reader profile (config/profiles), in model mode, on the first
# DEMO_READER_QUERIES questions of each group, and is stopped after the table: the default never loads it.
# Its model.onnx is built from the committed delta in the background while the rest starts.
#
# Environment: ICICLE_SERVER_ADDR [127.0.0.1:8080], ICICLE_ES_PORT [9200], DEMO_QUERIES [100] (dev questions per
# seen/new group), DEMO_READER [r24e] (a profile; "none" skips the reader's arm), DEMO_READER_QUERIES [6] (per
# group), DEMO_READER_ADDR [127.0.0.1:8081], DEMO_KEEP_READER [0] (1 leaves the reader sidecar running),
# DEMO_CONFIG [none] (a YAML config for ingest, serve and eval; the environment overrides its keys).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
run=${ICICLE_RUN_DIR:-$PWD/.run}
mkdir -p "$run"
pidfile=$run/sidecar.pid
readerpid=$run/reader.pid
began=$(date +%s)

stop_pid() {
  local f=$1
  if [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null; then
    kill -TERM "$(cat "$f")"
    for _ in $(seq 50); do kill -0 "$(cat "$f")" 2>/dev/null || break; sleep 0.2; done
  fi
  rm -f "$f"
}

if [[ "${1:-}" == "stop" ]]; then
  stop_pid "$readerpid"
  stop_pid "$pidfile"
  echo "demo: sidecar stopped" >&2
  scripts/es.sh stop
  exit 0
fi

step() { printf '\n== %s (%ss)\n' "$*" "$(($(date +%s) - began))" >&2; }
cfg=()
if [[ -n ${DEMO_CONFIG:-} ]]; then
  [[ -f $DEMO_CONFIG ]] || { echo "demo: DEMO_CONFIG=$DEMO_CONFIG: no such file" >&2; exit 1; }
  cfg=(-config "$DEMO_CONFIG")
fi
reader=${DEMO_READER:-r24e}
reader_dir=
if [[ $reader != none ]]; then
  reader_dir=$(sed -n 's/^  dir: *//p' "config/profiles/$reader.yaml" | head -n 1)
  [[ -n $reader_dir && -d $reader_dir ]] || { echo "demo: DEMO_READER=$reader: no config/profiles/$reader.yaml naming a model directory" >&2; exit 1; }
  # The reader's model.onnx, built once from its committed delta (a light venv, no PyTorch), beside the rest.
  step "Building the $reader reader's model in the background ($reader_dir; log $run/reader-build.log)"
  # At a lower priority: the binary (cargo, Go) is what the next steps wait for; the reader is needed last.
  nice -n 10 scripts/model.sh "$reader_dir" >"$run/reader-build.log" 2>&1 &
  build_pid=$!
fi

step "Native libraries, Elasticsearch and the encoder (cached after the first run)"
scripts/bootstrap.sh --demo
# Elasticsearch starts while the binary links (the machine is otherwise busy compiling until here).
scripts/es.sh start >"$run/es-start.log" 2>&1 &
es_pid=$!
scripts/build.sh
eval "$(scripts/env.sh)"
export ICICLE_SERVER_ADDR=${ICICLE_SERVER_ADDR:-127.0.0.1:8080}
# The first stage's fusion as `icicle calibrate -first-stage` fitted it on nq_qed's training questions (a team
# fits its own the same way; docs/evaluation.md, "The first stage").
export ICICLE_FIRST_STAGE_PARAMS_FILE=${ICICLE_FIRST_STAGE_PARAMS_FILE:-data/nq_qed/first_stage.json}
export ICICLE_ELASTICSEARCH_ADDRESSES=$(scripts/es.sh url)
url=http://$ICICLE_SERVER_ADDR

step "Elasticsearch"
wait "$es_pid" || { cat "$run/es-start.log" >&2; exit 1; }
cat "$run/es-start.log" >&2

wait_ready() { # URL PIDFILE LOG
  for _ in $(seq 240); do
    curl -fsS "$1/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$(cat "$2")" 2>/dev/null || { echo "demo: sidecar exited; log:" >&2; tail -n 30 "$3" >&2; return 1; }
    sleep 0.5
  done
  echo "demo: sidecar not ready after 120 s; log: $3" >&2
  return 1
}

# The documents the reader was trained on are marked seen, for the reader's memory route; the first stage
# ranks all documents alike. The vectors were computed by the default encoder (`icicle vectors`); a document
# not in the file, or changed, is embedded here.
step "Ingest the demo corpus with the first stage's vectors"
seen_dir=()
[[ -n $reader_dir ]] && seen_dir=(-model-dir "$reader_dir")
bin/icicle ingest "${cfg[@]}" -corpus data/nq_qed/corpus.jsonl.gz -vectors data/nq_qed/vectors.bge-small-en-v1.5-q.gz "${seen_dir[@]}"

step "The sidecar, serving its default: the first stage, no reader"
stop_pid "$pidfile"
nohup bin/icicle serve "${cfg[@]}" >"$run/sidecar.log" 2>&1 &
echo $! >"$pidfile"
wait_ready "$url" "$pidfile" "$run/sidecar.log"

reader_args=()
if [[ -n $reader_dir ]]; then
  # After the ingest: the reader's sidecar reads which documents are marked seen when it starts.
  step "The $reader reader in a second sidecar (model mode, ${DEMO_READER_ADDR:-127.0.0.1:8081})"
  wait "$build_pid" || { echo "demo: building $reader_dir failed; log:" >&2; tail -n 30 "$run/reader-build.log" >&2; exit 1; }
  stop_pid "$readerpid"
  # A long budget: the table shows the reader's own ranking and what it costs, not its fallbacks on a busy machine.
  ICICLE_SERVER_ADDR=${DEMO_READER_ADDR:-127.0.0.1:8081} ICICLE_POLICY_MODE=model \
    ICICLE_SERVER_REQUEST_TIMEOUT=60s ICICLE_SERVER_WRITE_TIMEOUT=90s ICICLE_CONCURRENCY_QUEUE_TIMEOUT=50s \
    nohup bin/icicle serve "${cfg[@]}" -profile "$reader" >"$run/reader.log" 2>&1 &
  echo $! >"$readerpid"
  wait_ready "http://${DEMO_READER_ADDR:-127.0.0.1:8081}" "$readerpid" "$run/reader.log"
  reader_args=(-reader "http://${DEMO_READER_ADDR:-127.0.0.1:8081}" -reader-n "${DEMO_READER_QUERIES:-6}" -model-dir "$reader_dir")
fi

step "Side by side on nq_qed dev questions: BM25, the first stage, the sidecar's default, and the reader"
bin/icicle eval "${cfg[@]}" -sidecar "$url" -n "${DEMO_QUERIES:-100}" -sweep "" -paper-shots "" -concurrency 2 \
  "${reader_args[@]}" -out "$run/eval"
reader_rss= reader_left=
if [[ -n $reader_dir ]]; then
  reader_rss=$(ps -o rss= -p "$(cat "$readerpid")" | awk '{printf "%.0f", $1/1024}')
  if [[ ${DEMO_KEEP_READER:-0} == 1 ]]; then
    reader_left=" (still running at http://${DEMO_READER_ADDR:-127.0.0.1:8081})"
  else
    stop_pid "$readerpid"
  fi
fi
rss=$(ps -o rss= -p "$(cat "$pidfile")" | awk '{printf "%.0f", $1/1024}')
step "Done"
reader_line=
[[ -n $reader_rss ]] && reader_line="The $reader reader's sidecar held $reader_rss MiB resident after its questions$reader_left.
"
cat <<TXT

Full report: $run/eval/report.md (JSON and plots beside it). The demo took $(($(date +%s) - began)) s.
${reader_line}The sidecar is running at $url (pid $(cat "$pidfile"), ${rss} MiB resident, log $run/sidecar.log), next to
Elasticsearch at $ICICLE_ELASTICSEARCH_ADDRESSES. Try:
  curl -s $url/v1/search -d '{"query": "who sang the theme song for the office", "size": 3}'
  curl -s $url/v1/model
  curl -s $url/metrics | grep ^icicle_
Stop both with: make stop
TXT
