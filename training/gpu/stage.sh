#!/usr/bin/env bash
# Here, before the GPU queue's device calls (training/gpu/README.md): builds .gpu/ (git-ignored) with what travels,
# in pieces that fit the device tool's 64 MiB per call beside the working tree, and takes the tracked files that the
# device does not need out of the working tree (moved to .run/gpu-aside with their ignored build outputs, the default
# model's graph and the encoders among them: `stage.sh restore` moves them back).
#
#   training/gpu/stage.sh [--set FILE] [--parts 2] [--init DELTA]   # then the device calls the README lists
#     (--init: a shipped model's delta for the jobs that continue it, r24d: .gpu/init/delta.safetensors)
#   training/gpu/stage.sh restore                    # after the last call (moves them back)
#   training/gpu/stage.sh --dir D --keep-tree        # the dry run: stage into D, touch nothing tracked
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
# what the device does not read: model directories, data (the reader set carries what training needs), results
aside=(models data training/results docs integration inference adapter plugin cmd internal retrieve)

held=.run/gpu-aside
if [[ ${1:-} == restore ]]; then
  for p in "${aside[@]}"; do
    if [[ -e $held/$p ]]; then rm -rf "$p" && mv "$held/$p" "$p"; fi
  done
  rm -rf "$held"
  git checkout -- "${aside[@]}"  # a tree staged by an older stage.sh (which removed them)
  echo "stage.sh: restored ${aside[*]}"
  exit 0
fi

set_file=${ICICLE_READERSET:-$HOME/.cache/icicle/readerset/readerset.json.gz}
parts=2 dir=.gpu keep=0 init=
while [[ $# -gt 0 ]]; do
  case $1 in
    --set) set_file=$2; shift 2 ;;
    --parts) parts=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --init) init=$2; shift 2 ;;
    --keep-tree) keep=1; shift ;;
    *) echo "stage.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -f $set_file ]] || { echo "stage.sh: no reader set at $set_file (python -m icicle.readerdata build --out DIR)" >&2; exit 1; }
venv=${ICICLE_VENV:-$(scripts/pyenv.sh)}
# a set of another format would fail on the card, after the loan's first minutes
"$venv/bin/python" -c 'import sys; sys.path.insert(0, "training"); from icicle import readerdata; readerdata.load(sys.argv[1])' \
  "$set_file" || { echo "stage.sh: $set_file: not a set this code reads (above)" >&2; exit 1; }
gguf=$("$venv/bin/python" -c 'import sys; sys.path.insert(0, "training"); from icicle.tokenizer import gguf_path; print(gguf_path())')

rm -rf "$dir" && mkdir -p "$dir/set" "$dir/whl"
cp "$set_file" "$dir/set/readerset.json.gz"
# pure-Python packages the device image lacks, the versions this venv runs (gguf reads the backbone; bm25s is
# imported by the evaluation's modules)
for p in gguf bm25s; do
  v=$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('$p'))")
  "$venv/bin/python" -m pip download -q --no-deps --only-binary=:all: -d "$dir/whl" "$p==$v"
done
sha=$(sha256sum "$gguf" | cut -d' ' -f1)
size=$(stat -c %s "$gguf")
chunk=$(( (size + parts - 1) / parts ))
for ((i = 0; i < parts; i++)); do
  mkdir -p "$dir/p$i"
  dd if="$gguf" of="$dir/p$i/backbone.part" bs=1M iflag=skip_bytes,count_bytes skip=$((i * chunk)) count=$chunk status=none
done
printf '%s  backbone.gguf\n' "$sha" >"$dir/set/backbone.sha256"
if [[ -n $init ]]; then
  [[ -f $init ]] || { echo "stage.sh: --init $init: no such file (a model directory's delta.safetensors)" >&2; exit 1; }
  mkdir -p "$dir/init" && cp "$init" "$dir/init/delta.safetensors"
fi
echo "$parts" >"$dir/set/parts"
if [[ $keep == 0 ]]; then
  if [[ -n $(git status --porcelain -- "${aside[@]}" | grep -v "^ D ") ]]; then  # removed by an earlier stage.sh: fine
    echo "stage.sh: uncommitted changes under ${aside[*]}; commit or stash them first (the tree is cut by moving those paths aside)" >&2
    exit 1
  fi
  [[ -e $held ]] && { echo "stage.sh: $held exists: run stage.sh restore first" >&2; exit 1; }
  for p in "${aside[@]}"; do
    if [[ -e $p ]]; then mkdir -p "$held/$(dirname "$p")" && mv "$p" "$held/$p"; fi
  done
fi
# the tree that travels: the tracked files but those moved aside (also with --keep-tree, which moves nothing)
tree=$(git ls-files -z -- . "${aside[@]/#/:!}" | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1 || true)  # removed files: du fails on them
echo "stage.sh: $dir ready: set $(du -b "$dir/set/readerset.json.gz" | cut -f1) B, backbone $size B in $parts parts of $chunk B, tree $tree B"
# the calls: what travels packed first-fit, largest first, into the device tool's 64 MiB a call less the tree and
# 1 MiB of room (a 100-deep set, 43 MB, does not fit beside a piece of the backbone)
room=$(( 64 * 1024 * 1024 - tree - 1024 * 1024 ))
pieces=("$dir/set $dir/whl")
for ((i = 0; i < parts; i++)); do pieces+=("$dir/p$i"); done
[[ -n $init ]] && pieces+=("$dir/init")
for piece in "${pieces[@]}"; do
  # shellcheck disable=SC2086 # a piece is one or two paths
  echo "$(du -cb $piece | tail -1 | cut -f1) $piece"
done | sort -rn | awk -v room="$room" '
  { placed = 0
    for (c = 1; c <= n; c++) if (used[c] + $1 <= room) { used[c] += $1; what[c] = what[c] " " substr($0, index($0, " ") + 1); placed = 1; break }
    if (!placed) { if ($1 > room) { print "stage.sh: " $2 " alone is over a call (" $1 " B): use more --parts" > "/dev/stderr"; bad = 1 }
                   n++; used[n] = $1; what[n] = " " substr($0, index($0, " ") + 1) } }
  END { for (c = 1; c <= n; c++) printf "  call %d carries%s (%.1f MB)\n", c, what[c], used[c] / 1e6; exit bad }'
