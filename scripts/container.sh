#!/usr/bin/env bash
# The compose stack (docker-compose.yml: Elasticsearch, a one-shot ingest job, the sidecar) built and run with
# podman, on a machine without a Docker engine and without access to the public image registries.
#
#   scripts/container.sh install   podman, runc, netavark, aardvark-dns, iptables and debootstrap (apt), and
#                                  podman-compose (PyPI, pinned by hash) in a venv under the cache; idempotent
#   scripts/container.sh base      the local base images, each rebuilt only when its inputs change:
#                                    localhost/icicle-base/debian:bookworm       debootstrap (minbase) of Debian 12
#                                    localhost/icicle-base/golang:<go>-bookworm  the Go builder (golang.Containerfile)
#                                    localhost/icicle-base/elasticsearch:<v>     scripts/es.sh's node (es.Containerfile)
#                                    localhost/icicle-base/rust:<v>-slim-bookworm  cargo, for ICICLE_CONTAINER_NATIVE=fetch
#                                  (rust.Containerfile); the Debian base trusts the CA certificates this machine
#                                  adds (/usr/local/share/ca-certificates), so builds reach the registries as it does
#   scripts/container.sh build     the sidecar image from the Dockerfile, on those bases
#   scripts/container.sh up        base, build, then the stack in the order of docker-compose.yml's depends_on
#   scripts/container.sh down      remove the stack's containers, network and volumes
#   scripts/container.sh test      install, then integration/container_test.go (which runs up and down); the
#                                  stack is removed on the way out whatever happens
#   scripts/container.sh compose ARGS...   podman-compose on the stack (project, files and variables set)
#
# Environment (defaults in brackets):
#   ICICLE_CONTAINER_ES_PORT   Elasticsearch's port on 127.0.0.1 [19200]
#   ICICLE_CONTAINER_PORT      the sidecar's port on 127.0.0.1 [18080]
#   ICICLE_CONTAINER_PROJECT   the compose project name [icicle-test]
#   ICICLE_CONTAINER_IMAGE     the sidecar image built and run [localhost/icicle-sidecar:test]
#   ICICLE_CONTAINER_NATIVE    how the image gets libonnxruntime, libtokenizers.a and the encoder's files:
#                              prebuilt (copies of what scripts/ort.sh, tokenizers.sh and encoder.sh put in
#                              $ICICLE_CACHE, given to the build as the context "prebuilt") or fetch (the
#                              Dockerfile's own path: npm, crates.io, Maven Central; cargo comes from
#                              ICICLE_CONTAINER_RUST_IMAGE, else from a local stand-in for the rust image
#                              made of this machine's toolchain, rust.Containerfile) [prebuilt]
#   CORPUS_DIR, CORPUS, ICICLE_SERVER_WRITE_TOKEN   passed to docker-compose.yml (see there)
#   ICICLE_CACHE               cache root [$HOME/.cache/icicle]: the venv and debootstrap's tarball under container/
#   ICICLE_RUN_DIR             run root [<repo>/.run]: container/ holds containers.conf and the prebuilt context
#
# What differs from Docker here, and why:
#   - runc, not crun (crun fails on this kernel's cgroups), and containers get the host's hard nofile/nproc
#     limits (podman's defaults are above them, which runc refuses): both in a containers.conf of our own
#     (CONTAINERS_CONF), so the system's podman configuration is left alone.
#   - Healthchecks: podman runs them from systemd timers; without systemd nothing runs them, so `up` runs
#     each service's own healthcheck (podman healthcheck run) while it waits for the service.
#   - depends_on conditions: podman-compose 1.6 ignores service_healthy before podman 4.6 and treats
#     service_completed_successfully as "stopped", so `up` starts the services one at a time, as the
#     conditions in docker-compose.yml say: Elasticsearch healthy, then the ingest job exited 0, then the
#     sidecar healthy.
#   - scripts/container/compose.test.yml drops the Elasticsearch service's ulimits (above the host's hard
#     limits) and its memory lock.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CDIR=$HERE/container
CACHE=${ICICLE_CACHE:-$HOME/.cache/icicle}/container
RUN=${ICICLE_RUN_DIR:-$REPO/.run}/container

ES_PORT_HOST=${ICICLE_CONTAINER_ES_PORT:-19200}
PORT_HOST=${ICICLE_CONTAINER_PORT:-18080}
PROJECT=${ICICLE_CONTAINER_PROJECT:-icicle-test}
IMAGE=${ICICLE_CONTAINER_IMAGE:-localhost/icicle-sidecar:test}
NATIVE=${ICICLE_CONTAINER_NATIVE:-prebuilt}

APT_PACKAGES=(podman runc netavark aardvark-dns iptables debootstrap)
DEBIAN_MIRROR=${ICICLE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE_DEBIAN=localhost/icicle-base/debian:bookworm
# The Go version of the builder is the one of the Dockerfile's GOLANG_IMAGE (golang:<version>-bookworm).
GO_VERSION=$(sed -n 's/^ARG GOLANG_IMAGE=golang:\([0-9.]*\)-bookworm.*/\1/p' "$REPO/Dockerfile")
BASE_GOLANG=localhost/icicle-base/golang:$GO_VERSION-bookworm
# The local Elasticsearch image stands in for docker-compose.yml's default one, at its version.
ES_VERSION=$(sed -n 's|.*ES_IMAGE:-docker.elastic.co/elasticsearch/elasticsearch:\([0-9.]*\)}.*|\1|p' "$REPO/docker-compose.yml")
BASE_ES=localhost/icicle-base/elasticsearch:$ES_VERSION
ENCODER=models/bge-small-en-v15-q
LABEL=org.icicle.inputs
# Seconds `up` waits for each step.
ES_TIMEOUT=${ICICLE_CONTAINER_ES_TIMEOUT:-180}
INGEST_TIMEOUT=${ICICLE_CONTAINER_INGEST_TIMEOUT:-600}
SIDECAR_TIMEOUT=${ICICLE_CONTAINER_SIDECAR_TIMEOUT:-120}

die() { echo "container.sh: $*" >&2; exit 1; }
say() { echo "container.sh: $*" >&2; }
sha() { sha256sum | cut -c1-16; }

[[ -n $ES_VERSION ]] || die "docker-compose.yml: no \${ES_IMAGE:-docker.elastic.co/elasticsearch/elasticsearch:<version>} to take the Elasticsearch version from"
[[ -n $GO_VERSION ]] || die "Dockerfile: no 'ARG GOLANG_IMAGE=golang:<version>-bookworm...' line to take the Go version from"
for p in "$ES_PORT_HOST" "$PORT_HOST"; do [[ $p =~ ^[0-9]+$ ]] || die "port '$p' is not a number (ICICLE_CONTAINER_ES_PORT, ICICLE_CONTAINER_PORT)"; done
case $NATIVE in prebuilt | fetch) ;; *) die "ICICLE_CONTAINER_NATIVE=$NATIVE: want prebuilt or fetch" ;; esac

VENV=$CACHE/venv-$(sha <"$CDIR/requirements.txt")
COMPOSE=$VENV/bin/podman-compose

# podman's configuration for this script alone: runc, and limits the host allows.
podman_conf() {
  mkdir -p "$RUN"
  local nofile nproc
  nofile=$(ulimit -Hn) nproc=$(ulimit -Hu)
  [[ $nofile == unlimited ]] && nofile=1048576
  # conmon, which podman starts each container under, has an nproc hard limit of 32768 at most (podman 4.3
  # caps its own), and runc cannot set a container's above its parent's.
  [[ $nproc == unlimited ]] && nproc=32768
  ((nproc <= 32768)) || nproc=32768
  cat >"$RUN/containers.conf.tmp" <<EOF
# Written by scripts/container.sh: runc (crun fails on some kernels' cgroups) and the host's hard limits.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
runtime = "runc"
EOF
  mv "$RUN/containers.conf.tmp" "$RUN/containers.conf"
  export CONTAINERS_CONF=$RUN/containers.conf
  # podman build does not apply default_ulimits to its RUN steps: the same limits, given to each build.
  BUILD_LIMITS=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
}

need_podman() {
  command -v podman >/dev/null 2>&1 || die "podman not found: run scripts/container.sh install (Debian: apt-get install ${APT_PACKAGES[*]})"
  [[ -x $COMPOSE ]] || die "podman-compose not found in $VENV: run scripts/container.sh install"
  podman_conf
}

install() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and no apt-get: install podman 4.3+, runc, netavark, aardvark-dns, iptables and debootstrap yourself"
    [[ $(id -u) == 0 ]] || die "missing ${missing[*]}: run as root (apt-get install), or install them yourself"
    say "installing ${missing[*]} (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
      die "apt-get install ${missing[*]} failed"
  fi
  podman_conf
  podman --version >/dev/null || die "podman does not run"
  if [[ ! -x $COMPOSE ]]; then
    local py=${ICICLE_PYTHON:-python3}
    command -v "$py" >/dev/null 2>&1 || die "$py not found (set ICICLE_PYTHON to a Python 3.10+ interpreter)"
    say "installing podman-compose into $VENV (PyPI, hashes pinned in scripts/container/requirements.txt)"
    rm -rf "$VENV"
    { "$py" -m venv "$VENV" &&
      "$VENV/bin/pip" install -q --disable-pip-version-check --require-hashes --only-binary :all: \
        -r "$CDIR/requirements.txt"; } || { rm -rf "$VENV"; die "installing podman-compose into $VENV failed (Debian: apt-get install python3-venv)"; }
  fi
  say "podman $(podman --version | awk '{print $3}'), $("$COMPOSE" --version 2>/dev/null | grep -m1 -i 'podman-compose' | awk '{print $NF}') podman-compose"
}

# image_inputs IMAGE: the inputs label of a local image, empty when the image is missing.
image_inputs() {
  podman image inspect --format "{{index .Labels \"$LABEL\"}}" "$1" 2>/dev/null || true
}

# The CA certificates this machine adds to Debian's (/usr/local/share/ca-certificates): the base carries them,
# so that builds reach the registries through whatever this machine's trust needs (a TLS-inspecting proxy).
local_cas() { find /usr/local/share/ca-certificates -name '*.crt' -type f 2>/dev/null | sort; }

base_debian() {
  local inputs tarball
  inputs=$({
    echo "bookworm minbase $DEBIAN_MIRROR v2"
    local f
    while IFS= read -r f; do sha256sum "$f"; done < <(local_cas)
  } | sha)
  if [[ $(image_inputs "$BASE_DEBIAN") == "$inputs" ]]; then return; fi
  tarball=$CACHE/debian-bookworm-$inputs.tar
  if [[ ! -f $tarball ]]; then
    command -v debootstrap >/dev/null 2>&1 || die "debootstrap not found: run scripts/container.sh install"
    local root=$CACHE/rootfs.tmp t0=$SECONDS
    rm -rf "$root" && mkdir -p "$root"
    say "debootstrap bookworm (minbase) from $DEBIAN_MIRROR into $root (once; about 2 minutes)"
    debootstrap --variant=minbase bookworm "$root" "$DEBIAN_MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
      { tail -n 20 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log $CACHE/debootstrap.log)"; }
    # The sources of the official image (main, updates, security), and no package caches.
    rm -f "$root/etc/apt/sources.list"
    cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $DEBIAN_MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${DEBIAN_MIRROR%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    local f
    # apt as the official images configure it: no package caches or downloaded .debs left in a layer, no
    # translations.
    cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    echo 'Acquire::Languages "none";' >"$root/etc/apt/apt.conf.d/docker-no-languages"
    mkdir -p "$root/usr/local/share/ca-certificates"
    while IFS= read -r f; do cp "$f" "$root/usr/local/share/ca-certificates/"; done < <(local_cas)
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* \
      "$root"/var/log/*.log
    tar -C "$root" --numeric-owner -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
    say "debootstrap done in $((SECONDS - t0))s: $tarball"
  fi
  podman import --quiet \
    --change "LABEL $LABEL=$inputs" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' \
    "$tarball" "$BASE_DEBIAN" >/dev/null
  say "imported $BASE_DEBIAN"
}

base_golang() {
  command -v go >/dev/null 2>&1 || die "go not found: the builder image takes this machine's Go $GO_VERSION"
  local goroot version inputs
  goroot=$(go env GOROOT) version=$(go env GOVERSION)
  [[ $version == "go$GO_VERSION" ]] ||
    die "the Dockerfile builds with golang:$GO_VERSION-bookworm, but this machine's Go is $version: its stand-in needs the same Go (or update GOLANG_IMAGE)"
  inputs=$({ image_inputs "$BASE_DEBIAN"; cat "$CDIR/golang.Containerfile"; echo "$version $goroot"; } | sha)
  if [[ $(image_inputs "$BASE_GOLANG") == "$inputs" ]]; then return; fi
  say "building $BASE_GOLANG (this machine's Go $version from $goroot)"
  podman build "${BUILD_LIMITS[@]}" --quiet --layers --label "$LABEL=$inputs" \
    --build-arg BASE="$BASE_DEBIAN" --build-arg GOLANG_VERSION="$GO_VERSION" \
    --build-context goroot="$goroot" \
    -f "$CDIR/golang.Containerfile" -t "$BASE_GOLANG" "$CDIR" >"$RUN/base.log" 2>&1 ||
    { tail -n 40 "$RUN/base.log" >&2; die "building $BASE_GOLANG failed (log $RUN/base.log)"; }
}

# base_rust: the stand-in for the rust image, for ICICLE_CONTAINER_NATIVE=fetch (prints its name).
base_rust() {
  command -v rustc >/dev/null 2>&1 || die "rustc not found: the Rust image's stand-in takes this machine's toolchain (or set ICICLE_CONTAINER_RUST_IMAGE)"
  local sysroot version name inputs
  sysroot=$(rustc --print sysroot) version=$(rustc --version | awk '{print $2}')
  name=localhost/icicle-base/rust:$version-slim-bookworm
  inputs=$({ image_inputs "$BASE_DEBIAN"; cat "$CDIR/rust.Containerfile"; echo "$version $sysroot"; } | sha)
  if [[ $(image_inputs "$name") != "$inputs" ]]; then
    say "building $name (this machine's Rust $version from $sysroot)"
    podman build "${BUILD_LIMITS[@]}" --quiet --layers --label "$LABEL=$inputs" \
      --build-arg BASE="$BASE_DEBIAN" --build-context rust="$sysroot" \
      -f "$CDIR/rust.Containerfile" -t "$name" "$CDIR" >"$RUN/base-rust.log" 2>&1 ||
      { tail -n 40 "$RUN/base-rust.log" >&2; die "building $name failed (log $RUN/base-rust.log)"; }
  fi
  echo "$name"
}

base_es() {
  local esdir=${ICICLE_CACHE:-$HOME/.cache/icicle}/es/$ES_VERSION classes inputs
  classes=$(ICICLE_ES_VERSION=$ES_VERSION "$HERE/es.sh" classes 2>/dev/null) ||
    die "ICICLE_ES_VERSION=$ES_VERSION scripts/es.sh classes failed (run it to see why)"
  [[ -d $esdir/lib && -d $classes ]] || die "scripts/es.sh install left no $esdir/lib and $classes"
  inputs=$({ image_inputs "$BASE_DEBIAN"; cat "$CDIR/es.Containerfile" "$CDIR/es-entrypoint.sh"; echo "$classes"; } | sha)
  if [[ $(image_inputs "$BASE_ES") == "$inputs" ]]; then return; fi
  say "building $BASE_ES (scripts/es.sh's node: $esdir/lib, $classes)"
  podman build "${BUILD_LIMITS[@]}" --quiet --layers --label "$LABEL=$inputs" \
    --build-arg BASE="$BASE_DEBIAN" --build-context eslib="$esdir/lib" --build-context eslauncher="$classes" \
    -f "$CDIR/es.Containerfile" -t "$BASE_ES" "$CDIR" >"$RUN/base-es.log" 2>&1 ||
    { tail -n 40 "$RUN/base-es.log" >&2; die "building $BASE_ES failed (log $RUN/base-es.log)"; }
}

base() {
  need_podman
  mkdir -p "$CACHE"
  base_debian
  base_golang
  base_es
}

build() {
  base
  build_image
}

# base_and_build: the sidecar's build (CPU-bound) beside the Elasticsearch image's (mostly downloads).
base_and_build() {
  need_podman
  mkdir -p "$CACHE"
  base_debian
  local es_log=$RUN/base-es.out es_pid
  (base_es) >"$es_log" 2>&1 &
  es_pid=$!
  base_golang
  # In a subshell, so that a failed build still waits for the other one before the script exits.
  if ! (build_image); then
    wait "$es_pid" || true
    exit 1
  fi
  wait "$es_pid" || { cat "$es_log" >&2; die "the Elasticsearch image failed (above)"; }
  cat "$es_log" >&2
}

# copy_if_changed SRC DST: keep DST's inode (and the build's cached layers) when the bytes are the same.
copy_if_changed() {
  mkdir -p "$(dirname "$2")"
  cmp -s "$1" "$2" 2>/dev/null || cp -L "$1" "$2"
}

# stage_prebuilt: the build context "prebuilt" the Dockerfile takes instead of fetching (see its header).
stage_prebuilt() {
  local dir=$RUN/prebuilt ort tok
  ort=$("$HERE/ort.sh") || die "scripts/ort.sh failed"
  tok=$("$HERE/tokenizers.sh") || die "scripts/tokenizers.sh failed"
  "$HERE/encoder.sh" "$ENCODER" || die "scripts/encoder.sh $ENCODER failed"
  copy_if_changed "$ort" "$dir/lib/libonnxruntime.so.1"
  copy_if_changed "$tok/libtokenizers.a" "$dir/tokenizers/libtokenizers.a"
  copy_if_changed "$REPO/$ENCODER/model.onnx" "$dir/$ENCODER/model.onnx"
  copy_if_changed "$REPO/$ENCODER/tokenizer.json" "$dir/$ENCODER/tokenizer.json"
  echo "$dir"
}

# build_image: the sidecar's image, on base images already there.
build_image() {
  local args=("${BUILD_LIMITS[@]}" --layers --format docker -f "$REPO/Dockerfile" -t "$IMAGE"
    --build-arg GOLANG_IMAGE="$BASE_GOLANG" --build-arg RUNTIME_IMAGE="$BASE_DEBIAN")
  if [[ $NATIVE == prebuilt ]]; then
    # The tokenizers stage only copies the prebuilt library: any Debian image with /usr/local/go serves.
    local pre
    pre=$(stage_prebuilt) || die "could not stage the prebuilt native inputs"
    args+=(--build-arg RUST_IMAGE="$BASE_GOLANG" --build-context prebuilt="$pre")
  else
    local rust=${ICICLE_CONTAINER_RUST_IMAGE:-}
    [[ -n $rust ]] || rust=$(base_rust) || die "no Rust image for the tokenizers stage"
    args+=(--build-arg RUST_IMAGE="$rust")
  fi
  local t0=$SECONDS log=$RUN/build.log
  say "building $IMAGE from the Dockerfile (native inputs: $NATIVE; log $log)"
  if ! podman build "${args[@]}" "$REPO" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    die "podman build failed (log $log)"
  fi
  say "built $IMAGE in $((SECONDS - t0))s"
}

# compose ARGS...: podman-compose on docker-compose.yml and this machine's override, with the stack's variables.
compose() {
  ES_IMAGE=$BASE_ES ES_PORT=$ES_PORT_HOST SIDECAR_PORT=$PORT_HOST ICICLE_IMAGE=$IMAGE \
    "$COMPOSE" --in-pod false --project-name "$PROJECT" \
    -f "$REPO/docker-compose.yml" -f "$CDIR/compose.test.yml" "$@"
}

# container SERVICE: the name of the service's container in the project (empty when there is none).
container() {
  podman ps -a --filter "label=com.docker.compose.project=$PROJECT" \
    --filter "label=com.docker.compose.service=$1" --format '{{.Names}}' | head -n 1
}

# wait_healthy SERVICE TIMEOUT: run the service's own healthcheck until it passes (podman has no timer to run
# it without systemd); fail when the container stops or the time is up.
wait_healthy() {
  local svc=$1 timeout=$2 name state t0=$SECONDS
  name=$(container "$svc")
  [[ -n $name ]] || die "no container for service $svc in project $PROJECT"
  while :; do
    state=$(podman inspect --format '{{.State.Status}}' "$name" 2>/dev/null || echo missing)
    if [[ $state != running ]]; then
      podman logs --tail 60 "$name" >&2 || true
      die "$svc ($name) is $state while waiting for it to be healthy (its log above)"
    fi
    if podman healthcheck run "$name" >/dev/null 2>&1; then
      say "$svc healthy after $((SECONDS - t0))s"
      return
    fi
    if ((SECONDS - t0 >= timeout)); then
      podman logs --tail 60 "$name" >&2 || true
      die "$svc ($name) not healthy after ${timeout}s (its log above)"
    fi
    sleep 2
  done
}

up() {
  base_and_build
  say "stack $PROJECT: Elasticsearch on 127.0.0.1:$ES_PORT_HOST, the sidecar on 127.0.0.1:$PORT_HOST"
  # What depends_on says, one service at a time (see the header).
  compose up -d --no-deps elasticsearch >"$RUN/compose.log" 2>&1 ||
    { cat "$RUN/compose.log" >&2; die "podman-compose up elasticsearch failed"; }
  wait_healthy elasticsearch "$ES_TIMEOUT"

  local t0=$SECONDS name rc
  compose up -d --no-deps ingest >>"$RUN/compose.log" 2>&1 ||
    { cat "$RUN/compose.log" >&2; die "podman-compose up ingest failed"; }
  name=$(container ingest)
  [[ -n $name ]] || die "no container for service ingest in project $PROJECT"
  rc=$(timeout "$INGEST_TIMEOUT" podman wait "$name") || die "the ingest job ($name) did not finish in ${INGEST_TIMEOUT}s"
  podman logs "$name" 2>&1 | tail -n 20 | sed 's/^/  ingest: /' >&2
  [[ $rc == 0 ]] || die "the ingest job ($name) exited $rc (its log above)"
  say "ingest job exited 0 after $((SECONDS - t0))s"

  compose up -d --no-deps icicle >>"$RUN/compose.log" 2>&1 ||
    { cat "$RUN/compose.log" >&2; die "podman-compose up icicle failed"; }
  wait_healthy icicle "$SIDECAR_TIMEOUT"
  say "up: http://127.0.0.1:$PORT_HOST (sidecar), http://127.0.0.1:$ES_PORT_HOST (Elasticsearch)"
}

down() {
  need_podman
  compose down -v --timeout 10 >"$RUN/compose-down.log" 2>&1 || true
  # Whatever podman-compose left (a run that stopped half-way): by the project's labels.
  local ids
  ids=$(podman ps -aq --filter "label=com.docker.compose.project=$PROJECT")
  [[ -z $ids ]] || podman rm -f -t 5 $ids >/dev/null 2>&1 || true
  ids=$(podman volume ls -q --filter "label=com.docker.compose.project=$PROJECT")
  [[ -z $ids ]] || podman volume rm -f $ids >/dev/null 2>&1 || true
  podman network rm -f "${PROJECT}_default" >/dev/null 2>&1 || true
  [[ -z $(podman ps -aq --filter "label=com.docker.compose.project=$PROJECT") ]] ||
    die "containers of project $PROJECT are still there (podman ps -a)"
  say "down: project $PROJECT removed"
}

run_test() {
  install
  need_podman
  trap 'down >/dev/null 2>&1 || true' EXIT
  local t0=$SECONDS log rc=0 pass skip
  log=$(mktemp)
  (cd "$REPO" && go test -v -count=1 -timeout 30m -tags container -run '^TestContainer' ./integration/) 2>&1 |
    tee "$log" || rc=$?
  pass=$(grep -cE '^\s*--- PASS' "$log" || true)
  skip=$(grep -cE '^\s*--- SKIP' "$log" || true)
  rm -f "$log"
  say "container test: $pass passed, $skip skipped, $((SECONDS - t0))s"
  [[ $rc == 0 ]] || die "the container test FAILED"
  [[ $skip == 0 && $pass != 0 ]] || die "the container test skipped tests or ran none; that is a failure here"
}

case "${1:-}" in
  install) install ;;
  base) base ;;
  build) build ;;
  up) need_podman; up ;;
  down) down ;;
  test) run_test ;;
  compose) shift; need_podman; compose "$@" ;;
  *) die "usage: scripts/container.sh {install|base|build|up|down|test|compose ARGS...}" ;;
esac
