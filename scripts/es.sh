#!/usr/bin/env bash
# A real single-node Elasticsearch on loopback, for development and the integration tests. No Docker: the
# node runs in a plain JVM from the official server jars that Elastic publishes on Maven Central, started
# by a small launcher (scripts/es/src) that this script compiles with javac.
#
#   scripts/es.sh install   fetch the pinned jars into the cache, verify them, compile the launcher
#   scripts/es.sh lock      resolve the jars with Maven and write scripts/es/jars-<version>.sha256 (a new pin)
#   scripts/es.sh start     install if needed, start one node in the background, wait until it is healthy
#   scripts/es.sh stop      SIGTERM (clean close), then SIGKILL after ICICLE_ES_STOP_TIMEOUT seconds
#   scripts/es.sh status    exit 0 if the node answers _cluster/health with yellow or green
#   scripts/es.sh url       print http://127.0.0.1:PORT
#   scripts/es.sh version   print the Elasticsearch version this environment selects
#   scripts/es.sh versions  print the versions this script has pins for, the default first
#   scripts/es.sh classes   install if needed, print the folder of the launcher's compiled classes
#
# Use with:  scripts/es.sh start && ICICLE_ES_URL=$(scripts/es.sh url) go test -tags integration ./adapter
#
# Environment (defaults in brackets):
#   ICICLE_ES_VERSION          which pinned release runs [8.14.3]; see VERSIONS below
#   ICICLE_ES_JAVA_HOME        the JDK to use; otherwise the first JDK new enough for the version among
#                              JAVA_HOME, java on PATH and /usr/lib/jvm/* (8.x: 17+, 9.x: 21+)
#   ICICLE_CACHE               cache root [$HOME/.cache/icicle]; jars under es/<version>/
#   ICICLE_RUN_DIR             run root [<repo>/.run]; data, logs, pid under es/<version>/
#   ICICLE_ES_PORT             HTTP port on 127.0.0.1 [9200]
#   ICICLE_ES_TRANSPORT_PORT   node-to-node port or range on 127.0.0.1 [9300-9399]
#   ICICLE_ES_HEAP             JVM heap, -Xms and -Xmx [1g]
#   ICICLE_ES_NODE_NAME        node.name [icicle-es]
#   ICICLE_ES_SEED_HOSTS       empty [default]: a single-node cluster. Else the comma-separated transport
#                              addresses (127.0.0.1:9381,...) of the cluster's nodes: the node joins them, and
#                              start waits until the cluster has formed (scripts/cluster.sh runs three)
#   ICICLE_ES_INITIAL_MASTERS  with ICICLE_ES_SEED_HOSTS: the node names that bootstrap the cluster on its
#                              first start (cluster.initial_master_nodes)
#   ICICLE_ES_START_TIMEOUT    seconds to wait for health on start [300]; a node on two slow cores
#                              busy compiling can take 100 s to start
#   ICICLE_MAVEN_URL           the Maven repository the jars come from [https://repo.maven.apache.org/maven2]
#   ICICLE_ES_STOP_TIMEOUT     seconds to wait after SIGTERM before SIGKILL [30]
#
# What runs: org.elasticsearch:elasticsearch (the server) and org.elasticsearch.plugin:transport-netty4 (its
# HTTP/transport layer), version ES_VERSION, unmodified. Elastic does not publish the distribution's other
# modules to Maven Central, so this node has no painless/reindex (no _update_by_query), no analysis-common
# (only the standard/simple/whitespace/keyword analyzers), no x-pack (no security, licensing, ILM). The
# launcher adds GET / and HEAD / (the rest-root module, also unpublished), which clients use for version
# and ping. Plain http, no authentication: it binds to 127.0.0.1 only. Nor are the distribution's native
# libraries (lib/platform: libvec, libzstd) published: 9.x then runs with its native methods off, so it has
# no best_compression codec (an index that sets it never gets its shard started) and no memory locking;
# the default codec, vectors and everything the sidecar uses work. The warning 9.x logs about it at every
# start is silenced in the node's log4j configuration (write_config).
#
# Each major has its own launcher twins (scripts/es/src/es8, src/es9: node construction, plugin loading and
# REST registration changed in 9.x) beside the shared src/common. 9.x runs without the distribution's
# launcher, so its entitlement agent is not loaded, as 8.x runs without its security manager.
#
# Why not org.codelibs:elasticsearch-cluster-runner: its 8.x releases are published only to
# maven.codelibs.org; Maven Central stops at 7.10.2.0, and 7.10 lacks the X-Elastic-Product header that
# go-elasticsearch v8 requires. transport-netty4 8.14.1 is also missing from Central, hence 8.14.3. Nor
# does Central have transport-netty4 for every 9.x release (its index lists 9.0.0, 9.0.1, 9.0.4, 9.0.8,
# 9.1.0, 9.1.7, 9.2.0, 9.2.2, 9.5.2 and 9.5.3); 9.5.3 is the newest with both jars and their checksums.
#
# The jars of each pinned release are listed with their sha256 in scripts/es/jars-<version>.sha256 and
# fetched from Maven Central in parallel with curl (seconds); every jar is checked against its line. A
# version without such a file is resolved with Maven from scripts/es/pom.xml (minutes: Maven first fetches
# its own plugins); `scripts/es.sh lock` writes the file from that resolution.
#
# Needs: a JDK (java and javac) new enough for the version, curl, sha256sum (mvn only for `lock` or a
# version without a jar list); network to Maven Central on the first install of each version only.
set -euo pipefail

# VERSIONS: each release es.sh can run, with the sha256 of the two jars that are Elasticsearch (sha1
# cross-checked against Maven Central's .sha1 files), the oldest Java it runs on, its major, and its
# launcher twins (src/es8 compiles against 8.14, src/es9 against 9.5; 9.0 to 9.2 differ from both in how
# REST handlers are registered and plugins described, and would need twins of their own).
VERSIONS="8.14.3 9.5.3"
ES_VERSION=${ICICLE_ES_VERSION:-8.14.3}
case $ES_VERSION in
  8.14.3)
    ES_JAR_SHA256=80d33bfd4667f657f6bb6112db8f33ab955a1b12dd9d40a0a99d5eef8c799973
    NETTY_JAR_SHA256=832364618097e47031ab7f2e100dd1752cb77dec5efe17f044cb7f3db1f40586
    JAVA_MIN=17 MAJOR=8 TWINS=es8
    ;;
  9.5.3)
    ES_JAR_SHA256=d64564a4575fa1dfcb1bd95162d608005d82d3ee7dc18836d3f8c37025671f2d
    NETTY_JAR_SHA256=97bcc314d74f57a4dd071ee4f95bea10fc1eeca0de99394d625b947e4b0928ce
    JAVA_MIN=21 MAJOR=9 TWINS=es9
    ;;
  *)
    echo "es.sh: ICICLE_ES_VERSION=$ES_VERSION has no pins here; pick one of: $VERSIONS (adding a release means pinning its jars' sha256 in scripts/es.sh)" >&2
    exit 1
    ;;
esac
MAIN_CLASS=org.icicle.esnode.Main

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
SRC=$HERE/es
SRC_DIRS=("$SRC/src/common" "$SRC/src/$TWINS")

CACHE=${ICICLE_CACHE:-$HOME/.cache/icicle}/es/$ES_VERSION
RUN=${ICICLE_RUN_DIR:-$REPO/.run}/es/$ES_VERSION
PORT=${ICICLE_ES_PORT:-9200}
TRANSPORT_PORT=${ICICLE_ES_TRANSPORT_PORT:-9300-9399}
HEAP=${ICICLE_ES_HEAP:-1g}
NODE_NAME=${ICICLE_ES_NODE_NAME:-icicle-es}
SEED_HOSTS=${ICICLE_ES_SEED_HOSTS:-}
START_TIMEOUT=${ICICLE_ES_START_TIMEOUT:-300}
STOP_TIMEOUT=${ICICLE_ES_STOP_TIMEOUT:-30}

URL=http://127.0.0.1:$PORT
PIDFILE=$RUN/es.pid
LOG=$RUN/es.log

die() { echo "es.sh: $*" >&2; exit 1; }
say() { echo "es.sh: $*" >&2; }
need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found on PATH: $2"; }

[[ $PORT =~ ^[0-9]+$ ]] || die "ICICLE_ES_PORT=$PORT is not a port number"

check_sha() { # file expected
  local got
  got=$(sha256sum "$1" | cut -d' ' -f1)
  [[ $got == "$2" ]] || die "$1 has sha256 $got, expected $2: the download is corrupt or not the pinned release; run 'rm -rf $CACHE' and install again, or update the pin in scripts/es.sh deliberately"
}

# The stamp names everything the compiled launcher depends on, so an edited launcher or pom is rebuilt.
stamp_want() {
  {
    echo "$ES_VERSION $ES_JAR_SHA256 $NETTY_JAR_SHA256 $JAVA_MIN"
    cat "$SRC/pom.xml"
    cat "$LOCK" 2>/dev/null || true
    find "${SRC_DIRS[@]}" -name '*.java' -print0 | sort -z | xargs -0 cat
  } | sha256sum | cut -c1-16
}
# The launcher's classes live in a folder named by the stamp: checkouts with different launcher sources
# (branches, worktrees) share the cache without recompiling over the classes of a node another one runs.
LOCK=$SRC/jars-$ES_VERSION.sha256
CLASSES=$CACHE/launcher/$(stamp_want)

# installed also re-hashes the two pinned jars (~50 ms), so a jar altered after install is noticed on start.
installed() {
  [[ -f $CLASSES/.complete ]] || return 1
  [[ $(sha256sum "$CACHE/lib/elasticsearch-$ES_VERSION.jar" 2>/dev/null | cut -d' ' -f1) == "$ES_JAR_SHA256" ]] &&
    [[ $(sha256sum "$CACHE/lib/transport-netty4-$ES_VERSION.jar" 2>/dev/null | cut -d' ' -f1) == "$NETTY_JAR_SHA256" ]]
}

# java_version prints the feature version (17, 21, 25) of the java binary $1, or nothing.
java_version() {
  local v
  v=$("$1" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p' | head -n 1)
  [[ $v =~ ^[0-9]+ ]] && echo "${BASH_REMATCH[0]}"
}

# find_jdk sets JDK to a JDK home (java and javac) of Java JAVA_MIN or newer: ICICLE_ES_JAVA_HOME if set
# (it must qualify), else the first that qualifies of JAVA_HOME, the java on PATH and /usr/lib/jvm/*.
find_jdk() {
  [[ -z ${JDK:-} ]] || return 0
  local cands=() c v tried=()
  local -A seen=()
  if [[ -n ${ICICLE_ES_JAVA_HOME:-} ]]; then
    c=${ICICLE_ES_JAVA_HOME%/}
    [[ -x $c/bin/java && -x $c/bin/javac ]] ||
      die "ICICLE_ES_JAVA_HOME=$c has no bin/java and bin/javac: point it at a JDK (not a JRE) of Java $JAVA_MIN or newer"
    v=$(java_version "$c/bin/java")
    [[ -n $v ]] && ((v >= JAVA_MIN)) ||
      die "ICICLE_ES_JAVA_HOME=$c is Java ${v:-of unknown version}; Elasticsearch $ES_VERSION needs Java $JAVA_MIN or newer"
    JDK=$c
    return 0
  fi
  [[ -n ${JAVA_HOME:-} ]] && cands+=("${JAVA_HOME%/}")
  if c=$(command -v java 2>/dev/null); then cands+=("$(dirname "$(dirname "$(readlink -f "$c")")")"); fi
  for c in /usr/lib/jvm/*; do [[ -d $c && ! -L $c ]] && cands+=("$c"); done
  for c in "${cands[@]}"; do
    [[ -x $c/bin/java && -x $c/bin/javac && -z ${seen[$c]:-} ]] || continue
    seen[$c]=1
    v=$(java_version "$c/bin/java")
    tried+=("$c (Java ${v:-?})")
    if [[ -n $v ]] && ((v >= JAVA_MIN)); then
      JDK=$c
      return 0
    fi
  done
  die "no JDK of Java $JAVA_MIN or newer found for Elasticsearch $ES_VERSION (looked at JAVA_HOME, java on PATH and /usr/lib/jvm/*: ${tried[*]:-none with java and javac}); install one (apt-get install openjdk-$JAVA_MIN-jdk-headless where Debian has it) or set ICICLE_ES_JAVA_HOME to its home"
}

install() {
  if installed; then
    say "Elasticsearch $ES_VERSION already installed in $CACHE"
    return
  fi
  need sha256sum "install coreutils"
  need curl "install curl (apt-get install curl)"
  find_jdk

  mkdir -p "$CACHE"
  # Two installs at once (make -j, parallel CI steps) would race on the Maven repo and the class files.
  # The lock's fd is scoped to this call so the node started afterwards does not inherit it.
  install_locked 9>"$CACHE/.lock"
}

# MAVEN is where the jars come from; fetch_locked takes the paths below it from $LOCK.
MAVEN=${ICICLE_MAVEN_URL:-https://repo.maven.apache.org/maven2}

# fetch_locked downloads every jar $LOCK lists ("sha256  group/path/artifact-version.jar") into $1, in
# parallel, and checks each against its sha256; $1 only appears once all are there and verified.
fetch_locked() {
  local out=$1 tmp=$1.tmp sha path
  rm -rf "$tmp"
  mkdir -p "$tmp"
  : >"$tmp/.curl" && : >"$tmp/.sums"
  while read -r sha path; do
    [[ -z $sha || $sha == \#* ]] && continue
    printf 'url = "%s/%s"\noutput = "%s/%s"\n' "$MAVEN" "$path" "$tmp" "${path##*/}" >>"$tmp/.curl"
    printf '%s  %s\n' "$sha" "${path##*/}" >>"$tmp/.sums"
  done <"$LOCK"
  curl -fsS --no-progress-meter --retry 3 --parallel --parallel-max 8 -K "$tmp/.curl" ||
    die "downloading the jars $LOCK lists from $MAVEN failed (curl's message above); check network access to repo.maven.apache.org and retry"
  (cd "$tmp" && sha256sum --quiet -c .sums) >&2 ||
    die "a jar from $MAVEN does not match its sha256 in $LOCK (listed above): the download is corrupt or not the pinned release"
  rm -f "$tmp/.curl" "$tmp/.sums"
  rm -rf "$out"
  mv "$tmp" "$out"
}

# mvn_resolve copies the runtime dependencies of scripts/es/pom.xml at $ES_VERSION into $1 with Maven; the
# local repository it fills ($CACHE/m2) is what `lock` reads the jars' paths from.
mvn_resolve() {
  need mvn "install Maven 3 (apt-get install maven), or add scripts/es/jars-$ES_VERSION.sha256"
  rm -rf "$1"
  if ! mvn -B -q -C -f "$SRC/pom.xml" \
    -Dmaven.repo.local="$CACHE/m2" -Des.version="$ES_VERSION" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$1" >"$CACHE/mvn.log" 2>&1; then
    tail -n 20 "$CACHE/mvn.log" >&2
    die "mvn dependency:copy-dependencies failed for org.elasticsearch:elasticsearch:$ES_VERSION (full log: $CACHE/mvn.log); check network access to https://repo.maven.apache.org and retry"
  fi
}

# lock resolves the version's jars with Maven and writes $LOCK: each jar's sha256 and its path on Central.
lock() {
  mkdir -p "$CACHE"
  local lib=$CACHE/lock-lib jar path
  mvn_resolve "$lib"
  check_sha "$lib/elasticsearch-$ES_VERSION.jar" "$ES_JAR_SHA256"
  check_sha "$lib/transport-netty4-$ES_VERSION.jar" "$NETTY_JAR_SHA256"
  {
    echo "# Elasticsearch $ES_VERSION's runtime jars on Maven Central (scripts/es.sh lock; es.sh install fetches these)"
    for jar in "$lib"/*.jar; do
      path=$(cd "$CACHE/m2" && find . -name "${jar##*/}" -print -quit)
      [[ -n $path ]] || die "${jar##*/} is not in $CACHE/m2"
      echo "$(sha256sum "$jar" | cut -d' ' -f1)  ${path#./}"
    done
  } >"$LOCK.tmp"
  mv "$LOCK.tmp" "$LOCK"
  rm -rf "$lib"
  say "wrote $LOCK ($(grep -vc '^#' "$LOCK") jars)"
}

install_locked() {
  if command -v flock >/dev/null 2>&1; then flock 9; fi
  if installed; then
    say "Elasticsearch $ES_VERSION already installed in $CACHE"
    return
  fi

  local lib=$CACHE/lib
  if [[ ! -f $lib/elasticsearch-$ES_VERSION.jar || ! -f $lib/transport-netty4-$ES_VERSION.jar ]]; then
    say "fetching Elasticsearch $ES_VERSION jars from Maven Central (~50 MB, once)"
    if [[ -f $LOCK ]]; then
      fetch_locked "$lib"
    else
      mvn_resolve "$lib"
    fi
  fi
  check_sha "$lib/elasticsearch-$ES_VERSION.jar" "$ES_JAR_SHA256"
  check_sha "$lib/transport-netty4-$ES_VERSION.jar" "$NETTY_JAR_SHA256"

  say "compiling the launcher (${SRC_DIRS[*]#"$REPO/"}) with $JDK"
  local tmp=$CLASSES.tmp
  rm -rf "$tmp"
  mkdir -p "$tmp"
  local srcs=()
  mapfile -d '' srcs < <(find "${SRC_DIRS[@]}" -name '*.java' -print0)
  "$JDK/bin/javac" --release "$JAVA_MIN" -nowarn -d "$tmp" -cp "$lib/*" "${srcs[@]}" >"$CACHE/javac.log" 2>&1 ||
    { cat "$CACHE/javac.log" >&2; die "javac failed on ${SRC_DIRS[*]} against Elasticsearch $ES_VERSION"; }
  touch "$tmp/.complete"
  rm -rf "$CLASSES"
  mv "$tmp" "$CLASSES"
  say "installed Elasticsearch $ES_VERSION in $CACHE"
}

# pid of our node if the pid file names a live launcher JVM; a stale file (crash, reboot, reused pid) is removed.
# An empty file is left alone: the JVM is writing it (its write truncates, then writes), and removing it then
# would lose the only record of a node that goes on running.
live_pid() {
  [[ -f $PIDFILE ]] || return 1
  local pid cmd=
  pid=$(tr -dc 0-9 <"$PIDFILE")
  [[ -n $pid ]] || return 1
  if kill -0 "$pid" 2>/dev/null; then
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || cmd=
  fi
  if [[ $cmd == *"$MAIN_CLASS"* ]]; then
    echo "$pid"
    return 0
  fi
  rm -f "$PIDFILE"
  return 1
}

# show_failure prints the end of the log and, since that is often a stack trace, the first error line too.
show_failure() {
  tail -n 40 "$LOG" >&2 || true
  local first
  first=$(grep -m1 -E 'Exception|ERROR|Error:' "$LOG" 2>/dev/null | cut -c1-400) || true
  [[ -z $first ]] || say "first error in the log: $first"
}

healthy() {
  curl -fsS -m 5 -o /dev/null "$URL/_cluster/health?wait_for_status=yellow&timeout=2s" 2>/dev/null
}

write_config() {
  mkdir -p "$RUN/home/config" "$RUN/data" "$RUN/tmp"
  # %node_name is spelled out: without it ES rewrites the pattern and warns on every start.
  cat >"$RUN/home/config/log4j2.properties" <<'EOF'
status = error
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d{ISO8601}][%-5p][%-25c{1.}] [%node_name]%marker %m%n
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
logger.deprecation.name = org.elasticsearch.deprecation
logger.deprecation.level = error
logger.nativeaccess.name = org.elasticsearch.nativeaccess.NativeAccess
logger.nativeaccess.level = error
EOF
  # Settings are passed on the command line (see start); this file only exists because ES reads it.
  : >"$RUN/home/config/elasticsearch.yml"
}

start() {
  local pid
  if pid=$(live_pid); then
    if healthy; then
      say "already running (pid $pid) at $URL"
      return
    fi
    say "pid $pid is running but not yet healthy; waiting"
  else
    if curl -s -m 2 -o /dev/null "$URL/" 2>/dev/null; then
      local other
      other=$(curl -s -m 2 "$URL/" 2>/dev/null | sed -n 's/.*"number" *: *"\([^"]*\)".*/ (Elasticsearch \1)/p') || true
      die "something else already answers on $URL${other}; stop it (another version's node: ICICLE_ES_VERSION=... scripts/es.sh stop) or pick another port with ICICLE_ES_PORT"
    fi
    install
    find_jdk
    write_config
    [[ -f $LOG ]] && mv -f "$LOG" "$LOG.1"
    say "starting Elasticsearch $ES_VERSION on $URL with $JDK (data $RUN/data, log $LOG)"
    # The -D/-X flags follow the distribution's jvm.options where they matter for a small node. 8.x's read
    # locale data through COMPAT; 9.x's use CLDR (COMPAT is gone from Java 23), add the vector incubator
    # module Lucene 10 uses, and allow the native access its libraries ask for.
    local jvm_major=()
    if ((MAJOR == 8)); then
      jvm_major=(-Djava.locale.providers=SPI,COMPAT)
    else
      jvm_major=(-Djava.locale.providers=CLDR --add-modules=jdk.incubator.vector --enable-native-access=ALL-UNNAMED)
    fi
    local discovery=(cluster.name=icicle discovery.type=single-node)
    if [[ -n $SEED_HOSTS ]]; then
      [[ -n ${ICICLE_ES_INITIAL_MASTERS:-} ]] || die "ICICLE_ES_SEED_HOSTS is set without ICICLE_ES_INITIAL_MASTERS (the node names that bootstrap the cluster)"
      discovery=(cluster.name=icicle-cluster discovery.seed_hosts="$SEED_HOSTS" cluster.initial_master_nodes="$ICICLE_ES_INITIAL_MASTERS")
    fi
    # setsid: the node must outlive the shell (and make job) that started it.
    setsid nohup "$JDK/bin/java" \
      -Xms"$HEAP" -Xmx"$HEAP" -XX:+UseG1GC \
      -Djava.io.tmpdir="$RUN/tmp" -Djava.awt.headless=true -Dfile.encoding=UTF-8 \
      "${jvm_major[@]}" -Djna.nosys=true \
      -Dlog4j2.formatMsgNoLookups=true -Dlog4j2.disable.jmx=true -Dlog4j.shutdownHookEnabled=false \
      -Dio.netty.noUnsafe=true -Dio.netty.noKeySetOptimization=true -Dio.netty.recycler.maxCapacityPerThread=0 \
      -Dicicle.pidfile="$PIDFILE" \
      -cp "$CLASSES:$CACHE/lib/*" "$MAIN_CLASS" \
      path.home="$RUN/home" path.data="$RUN/data" path.logs="$RUN/logs" \
      node.name="$NODE_NAME" "${discovery[@]}" \
      network.host=127.0.0.1 http.port="$PORT" transport.port="$TRANSPORT_PORT" \
      cluster.routing.allocation.disk.threshold_enabled=false \
      action.destructive_requires_name=true \
      >"$LOG" 2>&1 </dev/null &
    local launched=$!
    # The JVM writes its own pid file; until it does, follow the process we launched.
    local i
    for ((i = 0; i < 50; i++)); do
      pid=$(live_pid) && break
      kill -0 "$launched" 2>/dev/null || break
      sleep 0.2
    done
    pid=${pid:-$launched}
  fi

  local t0=$SECONDS
  until healthy; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PIDFILE"
      show_failure
      die "Elasticsearch exited during start (log above, full log $LOG)"
    fi
    if ((SECONDS - t0 >= START_TIMEOUT)); then
      show_failure
      say "not healthy after ${START_TIMEOUT}s (log above, full log $LOG); stopping it"
      stop
      exit 1
    fi
    sleep 1
  done
  say "healthy after $((SECONDS - t0))s: $URL (pid $pid)"
}

stop() {
  local pid i
  if ! pid=$(live_pid); then
    say "not running"
    return
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < STOP_TIMEOUT * 5; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "pid $pid still running ${STOP_TIMEOUT}s after SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.5
  fi
  rm -f "$PIDFILE"
  say "stopped (pid $pid)"
}

status() {
  local pid
  if healthy; then
    pid=$(live_pid) || pid="not ours: no pid file in $RUN"
    echo "running: $URL (pid $pid)"
    return 0
  fi
  if pid=$(live_pid); then
    echo "pid $pid is running but $URL is not healthy (log $LOG)"
  else
    echo "not running"
  fi
  return 1
}

case "${1:-}" in
  install) install ;;
  lock) lock ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  url) echo "$URL" ;;
  version) echo "$ES_VERSION" ;;
  versions) echo "$VERSIONS" ;;
  classes) install >&2; echo "$CLASSES" ;;
  *) die "usage: scripts/es.sh {install|lock|start|stop|status|url|version|versions|classes}" ;;
esac
