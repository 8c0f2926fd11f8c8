#!/usr/bin/env bash
# On the device machine (or, with --dry-run, here): the GPU queue's steps (training/gpu/README.md).
#
#   bash training/gpu/job.sh setup                 # join the backbone, check it, install the carried wheels
#   bash training/gpu/job.sh start NAME            # start queue job NAME in the background (setsid), log in /tmp/gpu
#   bash training/gpu/job.sh wait NAME SECONDS     # until NAME ends or SECONDS pass; prints the log's tail
#   bash training/gpu/job.sh collect NAME          # pack NAME's delta and copy what comes back into $OUT
#   bash training/gpu/job.sh evaldelta NAME [RANK] # the held-out views of NAME's packed delta (recut to RANK), into $OUT
#   bash training/gpu/job.sh --dry-run all         # every step on the CPU with the tiny job (CI: tests/test_gpu_queue.py)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
G=${ICICLE_GPU_DIR:-$root/.gpu}
GR=$(realpath -m --relative-to="$root/training" "$G")  # G from training/, where the jobs run: the run's records
# (run.json, the landed model's train_report.json) then name no machine's path
RUN=${ICICLE_GPU_RUN:-/tmp/gpu}
OUT=${OUT:-$RUN/out}
PY=${ICICLE_GPU_PYTHON:-python3}
dry=0
if [[ ${1:-} == --dry-run ]]; then dry=1; shift; fi

# The queue, in priority order: NAME -> arguments of `python -m icicle.reader train` (minutes are training time;
# loading, the evaluation and the pack add about 3). Each is under 25 minutes on one H100. ICICLE_GPU_MINUTES
# replaces the 15 training minutes (a session lent 15 minutes of device time in all trains 6.5).
job_args() {
  local m=${ICICLE_GPU_MINUTES:-15}
  case $1 in
    # r26e again, from r24e's shipped delta (stage.sh --init models/r24e/delta.safetensors) and packed at rank 128
    # (job_rank): r26e's rank-64 delta reads its run's own held-out view 0.61 / copy pick 0.63 on a CPU, where
    # the run's weights read 0.72 / 0.84 (session 28); evaldelta says what rank 128 keeps, recut what 64 would
    r26f) echo "$(job_args r24e) --blocks shared" ;;
    # session 26's next: r24e continued from its shipped delta (stage.sh --init models/r24e/delta.safetensors) at
    # twice the memory's share: r24e reads better than r24a, but r24e and r24d lost memory in their own runs (seen
    # 0.39 -> 0.27-0.29 at --seen 0.15 --index 0.05, before the delta's cut)
    r24g) echo "$(job_args r24e) --seen 0.3 --index 0.1" ;;
    # issue 26's 100 candidates: r26e's reading falls with the list (served with experimental.copy_rank_prior 4, dev new
    # 0.92 at 10, 0.84 at about 52, 0.73 at 100; its top copied score -4.2 nats at 10, -19.6 at 100: session 29),
    # trained on lists of at most 20. Lists to 100 (stage.sh --set a set of readerdata build --depth 100), the
    # prompt room for them, micro-batches of 8 (the mask is [B, t, t]), held out at 10 and at 100 candidates
    r26g) echo "$(job_args r26f) --n 10 20 50 100 --budget 8192 --micro 8 --eval-cands 10 100" ;;
    # r24d reading summaries of 64 tokens instead of 24 (the dense encoder on the sidecar's candidates: 0.776 right
    # from 24 tokens, 0.864 from 64; r24a zero-shot at 64 through the sidecar: nq_qed new 0.860 -> 0.890)
    r24e) echo "$(job_args r24d) --summary-tokens 64 --budget 1024" ;;
    # r24a continued from its shipped delta (stage.sh --init models/r24a/delta.safetensors), lr decaying to 0
    r24d) echo "--init $GR/init/delta.safetensors --minutes $m --batch 32 --lr 3e-5 --warmup 50 --decay linear --n 5 10 15 20 --shuffle 0.5 --swap-titles 0.25 --seen 0.15 --index 0.05 --kd 0.5 --eval-n 200 --save-every 500" ;;
    r24a) echo "--init backbone --minutes $m --batch 32 --lr 5e-5 --warmup 100 --n 5 10 15 20 --shuffle 0.5 --swap-titles 0.25 --seen 0.15 --index 0.05 --kd 0.5 --eval-n 200 --save-every 500" ;;
    r24b) echo "--init backbone --minutes $m --batch 32 --lr 5e-5 --warmup 100 --n 5 10 15 20 --shuffle 0.5 --swap-titles 0.25 --seen 0.15 --index 0.05 --kd 0 --eval-n 200 --save-every 500" ;;
    r24c) echo "--init backbone --minutes $m --batch 32 --lr 5e-5 --warmup 100 --n 5 10 15 20 --shuffle 0.5 --swap-titles 0 --seen 0.15 --index 0.05 --kd 0.5 --eval-n 200 --save-every 500" ;;
    # issue 26: r24d read by blocks (r24a's delta continued, the same data and steps; decode.block_attention's mask
    # and positions): the reader's best model fine-tuned to block reading
    r26a) echo "$(job_args r24d) --blocks shared --budget 1024" ;;
    r26b) echo "$(job_args r24d) --blocks contiguous --budget 1024" ;;
    # the sidecar's 100 candidates with experimental.summary_candidates 10: the first stage's top 10 with summaries
    r26c) echo "$(job_args r26a) --summary-candidates 10" ;;
    # r24e read by blocks, shared positions: whether block reading keeps what 64-token summaries give, where a
    # causal prefill of them costs 1.2 s a query on 2 cores (docs/research/2026-11-readers.md); runs beside r24e
    r26e) echo "$(job_args r24e) --blocks shared" ;;
    # issue 24: r24d reading each candidate's query snippet (the sidecar's experimental.snippet_chars 150) instead of its
    # summary; needs the set with snippets (python -m icicle.readerdata snippets; stage.sh --set it --parts 4).
    # r24a zero-shot on snippets: held-out new +4.2 points, seen -8 (the router copies); s1, 163 CPU steps of 8 on
    # them, got seen back (0.35) and lost new (0.769): the router leant to memory. s2, the same at r24a's share (seen
    # 0.15, 329 CPU steps of 8), kept new (0.808) and got seen to 0.30: this job has that share. A full run decides.
    r24f) echo "$(job_args r24d) --snippets true" ;;
    dry) echo "--init backbone --steps 2 --batch 2 --n 3 5 --eval-n 2 --eval-cands 10 4 --save-every 1 --device cpu --bf16 false" ;;
    *) echo "job.sh: unknown job $1 (r26f r24g r26g r24e r26e r24f r24d r24a r24b r24c r26a r26b r26c dry)" >&2; return 2 ;;
  esac
}

# The rank a job's delta is packed at (ICICLE_DELTA_RANK overrides): 64, the shipped readers' cut; 128 for block
# readers, whose reading the rank-64 cut lost (r26e, session 28: training/gpu/README.md). 128 doubles the delta
# (47 MB, four 15 MiB pieces: with the log, run.json, the tail and the checksum, eight files come back, the most a
# call brings).
job_rank() {
  case $1 in
    r26*) echo "${ICICLE_DELTA_RANK:-128}" ;;
    *) echo "${ICICLE_DELTA_RANK:-64}" ;;
  esac
}

setup() {
  mkdir -p "$RUN"
  local parts; parts=$(cat "$G/set/parts")
  : >"$RUN/backbone.gguf"
  for ((i = 0; i < parts; i++)); do
    [[ -f $G/p$i/backbone.part ]] || { echo "job.sh: $G/p$i/backbone.part missing (was call $((i + 1)) made?)" >&2; exit 1; }
    cat "$G/p$i/backbone.part" >>"$RUN/backbone.gguf"
  done
  (cd "$RUN" && sha256sum -c "$G/set/backbone.sha256")
  if [[ $dry == 0 ]]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$RUN/site" "$G"/whl/*.whl
  fi
  echo "job.sh: setup done ($(nproc) cores; $("$PY" -c 'import torch; print("cuda" if torch.cuda.is_available() else "no cuda", torch.__version__)'))"
}

env_for() {
  export PYTHONPATH="$root/training:$RUN/site" ICICLE_GGUF="$RUN/backbone.gguf" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
}

start() {
  local name=$1 args; args=$(job_args "$name")
  env_for
  mkdir -p "$RUN/$name"
  rm -f "$RUN/$name/pid"
  # setsid: the job outlives this call (the device tool ends a call's other processes). The job writes its own pid
  # (a shell that execs Python): on the device setsid forked, so $! named a process that had already exited and
  # `wait` reported a running job as ended (session 23).
  (cd "$root/training" && setsid nohup bash -c 'echo $$ >"$0"; exec "$@"' "$RUN/$name/pid" \
     "$PY" -m icicle.reader train --set "$GR/set/readerset.json.gz" --work "$RUN/$name/work" $args \
     >"$RUN/$name/log" 2>&1 &)
  for _ in $(seq 50); do [[ -s $RUN/$name/pid ]] && break; sleep 0.1; done
  echo "job.sh: started $name (pid $(cat "$RUN/$name/pid")): $args"
}

wait_for() {
  local name=$1 secs=$2 t=0
  while kill -0 "$(cat "$RUN/$name/pid")" 2>/dev/null && ((t < secs)); do sleep 10; t=$((t + 10)); done
  tail -n 5 "$RUN/$name/log"
  if kill -0 "$(cat "$RUN/$name/pid")" 2>/dev/null; then echo "job.sh: $name still running"; else echo "job.sh: $name ended"; fi
}

collect() {
  local name=$1 w="$RUN/$1/work"
  env_for
  [[ -f $w/stage3.pt ]] || { echo "job.sh: $w/stage3.pt missing: the run has not finished (job.sh wait $name)" >&2; exit 1; }
  mkdir -p "$OUT"
  # job_rank: the memory route is rank-hungry (r24a's delta re-cut to 32 and 16: seen 0.30 -> 0.25 -> 0.20), and
  # block reading more so (r26e)
  local rank; rank=$(job_rank "$name"); [[ $dry == 1 ]] && rank=4
  (cd "$root/training" && "$PY" -m icicle.delta pack --work "$w" --config reader135 --rank "$rank" --out "$RUN/$name/delta.safetensors")
  # at most 16 MiB per file comes back: the delta in 15 MiB pieces, joined by land.sh
  split -b 15M -d -a 1 "$RUN/$name/delta.safetensors" "$OUT/$name.delta.part"
  sha256sum "$RUN/$name/delta.safetensors" | sed "s#  .*#  $name.delta.safetensors#" >"$OUT/$name.delta.sha256"
  cp "$w/log.jsonl" "$OUT/$name.log.jsonl"
  cp "$w/run.json" "$OUT/$name.run.json"
  tail -n 50 "$RUN/$name/log" >"$OUT/$name.tail.txt"
  ls -la "$OUT"
}

# What the delta's cut costs against the weights it was packed from (their evaluation is the run's last in
# log.jsonl): the held-out views of the rebuilt model, the job's own reading flags. The memory route is the suspect:
# r24a's run ended at seen 0.39 on the card, its delta gives 0.30 on a CPU (fp32; the two differ in precision too).
# With RANK, the delta recut to that lower rank first (icicle.delta recut: what packing at RANK would have kept),
# into NAME.delta_eval_rRANK.json: what a smaller file would cost, from the one run.
evaldelta() {
  local name=$1 rank=${2:-} args n=100 delta="$RUN/$1/delta.safetensors" tag=""; args=$(job_args "$name")
  env_for
  [[ -f $delta ]] || { echo "job.sh: no $delta (job.sh collect $name first)" >&2; exit 1; }
  [[ $dry == 1 ]] && n=2
  mkdir -p "$OUT"
  if [[ -n $rank ]]; then
    (cd "$root/training" && "$PY" -m icicle.delta recut --delta "$delta" --rank "$rank" --out "$RUN/$name/delta.r$rank.safetensors")
    delta="$RUN/$name/delta.r$rank.safetensors" tag="_r$rank"
  fi
  # shellcheck disable=SC2086  # the job's arguments, word-split as `start` does; the later --init and --eval-n win
  (cd "$root/training" && "$PY" -m icicle.reader eval --set "$GR/set/readerset.json.gz" $args \
     --init "$delta" --eval-n "$n" >"$OUT/$name.delta_eval$tag.json")
  head -c 2000 "$OUT/$name.delta_eval$tag.json"
}

case ${1:-} in
  setup) setup ;;
  start) start "$2" ;;
  wait) wait_for "$2" "${3:-540}" ;;
  collect) collect "$2" ;;
  evaldelta) evaldelta "$2" "${3:-}" ;;
  all)  # the dry run: every step in order with the tiny job, here
    setup; start dry; wait_for dry 1800; collect dry; evaldelta dry; evaldelta dry 2 ;;
  *) echo "usage: job.sh [--dry-run] setup | start NAME | wait NAME SECONDS | collect NAME | evaldelta NAME [RANK] | all" >&2; exit 2 ;;
esac
