#!/usr/bin/env bash
# A three-node Elasticsearch cluster on loopback (three of scripts/es.sh's nodes, one JVM each), and the run
# that loses one of its nodes under load (docs/evaluation.md, "A node lost under load").
#
#   scripts/cluster.sh start      start es1, es2, es3 (HTTP 9281-9283, transport 9481-9483); wait until formed
#   scripts/cluster.sh stop       stop the three
#   scripts/cluster.sh urls       print their HTTP URLs, comma-separated (ICICLE_ELASTICSEARCH_ADDRESSES)
#   scripts/cluster.sh node-loss  the whole run, then stops what it started (5-6 minutes on two idle cores: the
#       nodes formed in 23-39 s and the ingest took 36-54 s; on a loaded machine each took 3-4 minutes):
#       the demo corpus with its vectors in an index of 3 shards and 1 replica; the sidecar serving the default
#       with all three addresses; the answers to 100 queries; 16 clients on /v1/search for 60 s, one node
#       killed (SIGKILL) at 20 s and started again at 35 s; the cluster's health each second; once green, the
#       same 100 queries again. It prints the load table (status codes, fallback reasons, latency), the health
#       timeline and how many answers changed (asked twice before the load, and after recovery), and exits 1
#       if any did.
#   scripts/cluster.sh sidecar-loss  two sidecars on the cluster behind nginx (the proxy a team puts in front:
#       passive health checks, a failed attempt tried on the other sidecar); 16 clients for 60 s through the
#       proxy, one sidecar killed (SIGKILL) at 20 s and started again at 35 s; prints the load table as the
#       client saw it and what the proxy did (needs nginx: apt-get install nginx-light)
#
# Environment (defaults in brackets):
#   ICICLE_ES_VERSION        as scripts/es.sh [8.14.3]
#   ICICLE_ES_START_TIMEOUT  seconds each node may take to join the others [600]
#   ICICLE_CLUSTER_HEAP      each node's heap [512m]
#   ICICLE_CLUSTER_DIR       the nodes' data and the run's files [<repo>/.run/cluster]
#   ICICLE_CLUSTER_KILL      the node killed [es2]
#   ICICLE_CLUSTER_CLIENTS, ICICLE_CLUSTER_SECONDS, ICICLE_CLUSTER_KILL_AT, ICICLE_CLUSTER_BACK_AT  [16, 60, 20, 35]
#   ICICLE_CLUSTER_PORT      the sidecar's port [8090]; sidecar-loss: the second sidecar on the next, the proxy
#                            on the one after
# The sidecars read their own ICICLE_* variables as usual (a longer ICICLE_SERVER_REQUEST_TIMEOUT on a small machine).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
DIR=${ICICLE_CLUSTER_DIR:-$REPO/.run/cluster}
NODES=(es1 es2 es3)
HEAP=${ICICLE_CLUSTER_HEAP:-512m}
KILL=${ICICLE_CLUSTER_KILL:-es2}
CLIENTS=${ICICLE_CLUSTER_CLIENTS:-16}
SECONDS_RUN=${ICICLE_CLUSTER_SECONDS:-60}
KILL_AT=${ICICLE_CLUSTER_KILL_AT:-20}
BACK_AT=${ICICLE_CLUSTER_BACK_AT:-35}
PORT=${ICICLE_CLUSTER_PORT:-8090}
SIDECAR=127.0.0.1:$PORT
INDEX=icicle-cluster

die() { echo "cluster.sh: $*" >&2; exit 1; }
say() { printf '\n== %s\n' "$*" >&2; }

node_index() { # es2 -> 1
  local i
  for i in "${!NODES[@]}"; do [[ ${NODES[$i]} == "$1" ]] && { echo "$i"; return; }; done
  die "no node named $1 (nodes: ${NODES[*]})"
}

# es NODE ARGS...: scripts/es.sh for one node of the cluster.
es() {
  local i
  i=$(node_index "$1")
  shift
  ICICLE_RUN_DIR=$DIR/${NODES[$i]} ICICLE_ES_PORT=$((9281 + i)) ICICLE_ES_TRANSPORT_PORT=$((9481 + i)) \
    ICICLE_ES_HEAP=$HEAP ICICLE_ES_NODE_NAME=${NODES[$i]} ICICLE_ES_START_TIMEOUT=${ICICLE_ES_START_TIMEOUT:-600} \
    ICICLE_ES_SEED_HOSTS=127.0.0.1:9481,127.0.0.1:9482,127.0.0.1:9483 ICICLE_ES_INITIAL_MASTERS=es1,es2,es3 \
    scripts/es.sh "$@"
}

urls() { echo "http://127.0.0.1:9281,http://127.0.0.1:9282,http://127.0.0.1:9283"; }

# Each node waits for the others to form the cluster, so the three start at once.
start() {
  scripts/es.sh install >&2
  local n pids=() failed=0
  for n in "${NODES[@]}"; do
    es "$n" start &
    pids+=($!)
  done
  for n in "${pids[@]}"; do wait "$n" || failed=1; done
  ((failed == 0)) || { stop; die "a node did not start (its log is under $DIR/<node>/es)"; }
  curl -fsS "http://127.0.0.1:9281/_cat/nodes?h=name,master,heap.max" >&2
}

stop() {
  local n
  for n in "${NODES[@]}"; do es "$n" stop || true; done
}

# health prints one line: milliseconds since $1 (as seconds), status, nodes, unassigned, relocating and
# initializing shards, master; the first of the URLs $2 that answers is asked.
health() {
  local t0=$1 u h m f l out
  for u in ${2//,/ }; do
    if h=$(curl -fsS -m 1 "$u/_cluster/health" 2>/dev/null); then
      m=$(curl -fsS -m 1 "$u/_cat/master?h=node" 2>/dev/null) || m=?
      out="$(($(date +%s%N) / 1000000 - t0))e-3 via ${u##*:}"
      for f in status number_of_nodes unassigned_shards relocating_shards initializing_shards; do
        l=${f#number_of_}
        out+="  ${l%_shards} $(sed -n "s/.*\"$f\":\"\{0,1\}\([a-z0-9]*\).*/\1/p" <<<"$h")"
      done
      echo "$out  master ${m:-?}"
      return
    fi
  done
  echo "$(($(date +%s%N) / 1000000 - t0))e-3  no node answers"
}

# answers FILE: the sidecar's top 10 for the first 100 nq_qed dev queries, one line per query.
answers() {
  python3 - "$SIDECAR" "$1" <<'EOF'
import gzip, json, sys, time, urllib.error, urllib.request
url, out = sys.argv[1], sys.argv[2]
queries = [q for q in map(json.loads, gzip.open("data/nq_qed/queries.jsonl.gz", "rt")) if q["split"] == "dev"][:100]
lines = []
for q in queries:
    req = urllib.request.Request(f"http://{url}/v1/search", json.dumps({"query": q["query"], "size": 10}).encode(),
                                 {"Content-Type": "application/json"})
    for attempt in range(10):  # a cold or busy cluster may answer 503/504 (the sidecar's budget); ask again
        try:
            body = json.load(urllib.request.urlopen(req, timeout=30))
            break
        except urllib.error.HTTPError as e:
            if e.code < 500 or attempt == 9:
                raise
            time.sleep(1)
    lines.append(q["qid"] + "\t" + body.get("mode", "") + "\t" + "|".join(r["docid"] for r in body["results"]))
open(out, "w").write("\n".join(lines) + "\n")
EOF
}

now() { echo "$(($(date +%s%N) / 1000000 - T0))e-3"; }

# prepare: the native parts and bin/icicle, the three nodes, and the demo corpus with its vectors in an index of
# three shards and one replica. It sets RUN (this run's files); the nodes stop when the script exits.
prepare() {
  RUN=$DIR/run
  rm -rf "$RUN" && mkdir -p "$RUN"
  trap cleanup EXIT
  say "Native libraries, the node build, the encoder; bin/icicle"
  scripts/bootstrap.sh --demo
  scripts/build.sh
  eval "$(scripts/env.sh)"
  export ICICLE_ELASTICSEARCH_ADDRESSES ICICLE_FIRST_STAGE_PARAMS_FILE=data/nq_qed/first_stage.json
  ICICLE_ELASTICSEARCH_ADDRESSES=$(urls)
  export ICICLE_ELASTICSEARCH_INDEX=$INDEX

  say "Three new nodes"
  stop
  rm -rf "${NODES[@]/#/$DIR/}"
  start
  local u=http://127.0.0.1:9281
  say "The demo corpus in $INDEX: 3 shards, 1 replica"
  curl -fsS -X DELETE "$u/$INDEX,$INDEX-src?ignore_unavailable=true" >/dev/null
  ICICLE_ELASTICSEARCH_INDEX=$INDEX-src bin/icicle ingest -corpus data/nq_qed/corpus.jsonl.gz \
    -vectors data/nq_qed/vectors.bge-small-en-v1.5-q.gz
  # The sidecar creates one-shard indices; a team's index has its own shards, made here by a split. A split
  # shard holds the other shards' documents as deleted until it merges, and each copy merges on its own, so
  # the copies of a shard would score BM25 differently; the primaries are merged before the replicas are
  # copied from them, so that every copy answers alike and the run compares the sidecar, not the merges.
  curl -fsS -X PUT "$u/$INDEX-src/_settings" -H 'Content-Type: application/json' -d '{"index.blocks.write": true}' >/dev/null
  curl -fsS -X POST "$u/$INDEX-src/_split/$INDEX" -H 'Content-Type: application/json' \
    -d '{"settings": {"index.number_of_shards": 3, "index.number_of_replicas": 0, "index.blocks.write": null}}' >/dev/null
  curl -fsS "$u/_cluster/health/$INDEX?wait_for_status=green&timeout=300s" >/dev/null
  curl -fsS -X DELETE "$u/$INDEX-src" >/dev/null
  curl -fsS -X POST "$u/$INDEX/_forcemerge?max_num_segments=1" >/dev/null
  curl -fsS -X PUT "$u/$INDEX/_settings" -H 'Content-Type: application/json' -d '{"index.number_of_replicas": 1}' >/dev/null
  curl -fsS "$u/_cluster/health/$INDEX?wait_for_status=green&timeout=300s" >/dev/null
  curl -fsS "$u/_cluster/health/$INDEX?wait_for_status=green&wait_for_no_relocating_shards=true&timeout=300s" >/dev/null
  curl -fsS "$u/_cat/shards/$INDEX?h=shard,prirep,state,docs,node&s=shard,prirep" >&2
}

PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  if [[ -f $RUN/nginx.pid ]]; then kill -QUIT "$(cat "$RUN/nginx.pid")" 2>/dev/null || true; fi
  stop
}

# serve PORT: start a sidecar serving the default on the cluster at 127.0.0.1:PORT, wait until it is ready,
# and set SERVED to its pid.
serve() {
  ICICLE_SERVER_ADDR=127.0.0.1:$1 bin/icicle serve >>"$RUN/sidecar-$1.log" 2>&1 &
  SERVED=$!
  PIDS+=("$SERVED")
  local i
  for ((i = 0; i < 240; i++)); do
    curl -fsS "http://127.0.0.1:$1/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$SERVED" 2>/dev/null || { tail -n 30 "$RUN/sidecar-$1.log" >&2; die "the sidecar on port $1 exited"; }
    sleep 0.5
  done
  die "the sidecar on port $1 was not ready after 120 s (log $RUN/sidecar-$1.log)"
}

# load URL: the closed-loop load run in the background (LOADED: its pid), its table in $RUN/load.md.
load() {
  bin/icicle load -url "$1" -clients "$CLIENTS" -duration "${SECONDS_RUN}s" -json "$RUN/load.json" >"$RUN/load.md" &
  LOADED=$!
}

node_loss() {
  prepare
  say "The sidecar on all three addresses ($SIDECAR)"
  serve "$PORT"
  answers "$RUN/before.tsv"
  answers "$RUN/again.tsv"

  say "$CLIENTS clients for ${SECONDS_RUN}s; $KILL killed at ${KILL_AT}s, started again at ${BACK_AT}s"
  T0=$(($(date +%s%N) / 1000000))
  (while :; do health "$T0" "$(urls)"; sleep 1; done) >"$RUN/health.txt" 2>&1 &
  PIDS+=($!)
  load "http://$SIDECAR"
  sleep "$KILL_AT"
  local victim
  victim=$(tr -dc 0-9 <"$DIR/$KILL/es/${ICICLE_ES_VERSION:-8.14.3}/es.pid")
  echo "$(now) kill -9 $KILL (pid $victim)" >>"$RUN/events.txt"
  kill -KILL "$victim"
  sleep $((BACK_AT - KILL_AT))
  echo "$(now) start $KILL" >>"$RUN/events.txt"
  es "$KILL" start >>"$RUN/events.txt" 2>&1
  echo "$(now) $KILL healthy (joined)" >>"$RUN/events.txt"
  wait "$LOADED"
  curl -fsS "http://127.0.0.1:9281/_cluster/health/$INDEX?wait_for_status=green&timeout=300s" >/dev/null
  echo "$(now) green" >>"$RUN/events.txt"
  sleep 1
  answers "$RUN/after.tsv"

  say "Load (files in $RUN)"
  cat "$RUN/load.md"
  say "Events (seconds from the start of the load)"
  cat "$RUN/events.txt"
  say "Cluster health, each change"
  awk '{k=$0; sub(/^ *[0-9.e-]+ +/, "", k)} k != last {print; last = k}' "$RUN/health.txt"
  say "Answers (100 queries, top 10): asked twice before the load, and after recovery"
  local again changed
  again=$(paste "$RUN/before.tsv" "$RUN/again.tsv" | awk -F'\t' '$3 != $6' | wc -l)
  changed=$(paste "$RUN/before.tsv" "$RUN/after.tsv" | awk -F'\t' '$3 != $6' | wc -l)
  echo "changed when asked again: $again of $(wc -l <"$RUN/before.tsv"); after recovery: $changed"
  ((again + changed == 0)) || { paste "$RUN/before.tsv" "$RUN/again.tsv" "$RUN/after.tsv" | awk -F'\t' '$3 != $6 || $3 != $9' | head -n 5; exit 1; }
}

# proxy: nginx on 127.0.0.1:PORT+2 in front of the sidecars on PORT and PORT+1, as a team would put one: a
# sidecar that refuses a connection or fails before answering is marked down for 10 s, and the request is
# tried on the other (POST /v1/search changes nothing, so it is safe to send twice: non_idempotent).
proxy() {
  command -v nginx >/dev/null 2>&1 || die "nginx is missing: apt-get install nginx-light"
  mkdir -p "$RUN/nginx-tmp"
  local user=""
  [[ $(id -u) == 0 ]] && user="user root;"
  cat >"$RUN/nginx.conf" <<CONF
$user
daemon on;
worker_processes 1;
pid $RUN/nginx.pid;
error_log $RUN/nginx-error.log warn;
events { worker_connections 1024; }
http {
  log_format icicle '\$msec|\$status|\$upstream_addr|\$upstream_status|\$request_time';
  access_log $RUN/nginx-access.log icicle;
  client_body_temp_path $RUN/nginx-tmp/body;
  proxy_temp_path $RUN/nginx-tmp/proxy;
  fastcgi_temp_path $RUN/nginx-tmp/fastcgi;
  uwsgi_temp_path $RUN/nginx-tmp/uwsgi;
  scgi_temp_path $RUN/nginx-tmp/scgi;
  upstream sidecars {
    server 127.0.0.1:$PORT max_fails=1 fail_timeout=10s;
    server 127.0.0.1:$((PORT + 1)) max_fails=1 fail_timeout=10s;
    keepalive 32;
  }
  server {
    listen 127.0.0.1:$((PORT + 2));
    location / {
      proxy_pass http://sidecars;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_next_upstream error timeout non_idempotent;
      proxy_next_upstream_tries 2;
    }
  }
}
CONF
  nginx -t -q -c "$RUN/nginx.conf" -p "$RUN" -g "error_log $RUN/nginx-error.log warn;" >&2
  nginx -c "$RUN/nginx.conf" -p "$RUN" -g "error_log $RUN/nginx-error.log warn;" >&2
}

sidecar_loss() {
  prepare
  say "Two sidecars (ports $PORT, $((PORT + 1))) behind nginx (port $((PORT + 2)))"
  serve "$PORT"
  serve $((PORT + 1))
  local second=$SERVED
  proxy
  say "$CLIENTS clients for ${SECONDS_RUN}s through the proxy; the sidecar on $((PORT + 1)) killed at ${KILL_AT}s, started again at ${BACK_AT}s"
  T0=$(($(date +%s%N) / 1000000))
  load "http://127.0.0.1:$((PORT + 2))"
  sleep "$KILL_AT"
  echo "$(now) kill -9 the sidecar on $((PORT + 1)) (pid $second)" >>"$RUN/events.txt"
  kill -KILL "$second"
  sleep $((BACK_AT - KILL_AT))
  echo "$(now) start it again" >>"$RUN/events.txt"
  serve $((PORT + 1))
  echo "$(now) ready" >>"$RUN/events.txt"
  wait "$LOADED"

  say "Load through the proxy (files in $RUN)"
  cat "$RUN/load.md"
  say "Events (seconds from the start of the load)"
  cat "$RUN/events.txt"
  say "What the proxy did: answers by status, upstreams tried and their statuses"
  awk -F'|' '{n[$2 " via " $3 " (" $4 ")"]++} END {for (k in n) print n[k], k}' "$RUN/nginx-access.log" | sort -rn | head -n 12
  say "The proxy's error log, by message"
  if [[ -s $RUN/nginx-error.log ]]; then
    sed -E 's/^[0-9\/: ]+\[[a-z]+\] [0-9#]+: \*[0-9]+ //; s/, client:.*//' "$RUN/nginx-error.log" | sort | uniq -c | sort -rn | head -n 5
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  urls) urls ;;
  node-loss) node_loss ;;
  sidecar-loss) sidecar_loss ;;
  *) die "usage: scripts/cluster.sh {start|stop|urls|node-loss|sidecar-loss}" ;;
esac
