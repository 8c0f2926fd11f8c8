#!/usr/bin/env bash
# A real single-node Elasticsearch on loopback, for development and the integration tests. No Docker: the
# node runs in a plain JVM from the official server jars that Elastic publishes on Maven Central, started
# by a small launcher (scripts/es/src) that this script compiles with javac.
#
#   scripts/es.sh install   fetch the pinned jars with Maven into the cache, verify them, compile the launcher
#   scripts/es.sh start     install if needed, start one node in the background, wait until it is healthy
#   scripts/es.sh stop      SIGTERM (clean close), then SIGKILL after ICICLE_ES_STOP_TIMEOUT seconds
#   scripts/es.sh status    exit 0 if the node answers _cluster/health with yellow or green
#   scripts/es.sh url       print http://127.0.0.1:PORT
#
# Use with:  scripts/es.sh start && ICICLE_ES_URL=$(scripts/es.sh url) go test -tags integration ./adapter
#
# Environment (defaults in brackets):
#   ICICLE_CACHE               cache root [$HOME/.cache/icicle]; jars under es/<version>/
#   ICICLE_RUN_DIR             run root [<repo>/.run]; data, logs, pid under es/
#   ICICLE_ES_PORT             HTTP port on 127.0.0.1 [9200]
#   ICICLE_ES_TRANSPORT_PORT   node-to-node port or range on 127.0.0.1 [9300-9399]
#   ICICLE_ES_HEAP             JVM heap, -Xms and -Xmx [1g]
#   ICICLE_ES_START_TIMEOUT    seconds to wait for health on start [120]
#   ICICLE_ES_STOP_TIMEOUT     seconds to wait after SIGTERM before SIGKILL [30]
#
# What runs: org.elasticsearch:elasticsearch (the server) and org.elasticsearch.plugin:transport-netty4 (its
# HTTP/transport layer), version ES_VERSION, unmodified. Elastic does not publish the distribution's other
# modules to Maven Central, so this node has no painless/reindex (no _update_by_query), no analysis-common
# (only the standard/simple/whitespace/keyword analyzers), no x-pack (no security, licensing, ILM). The
# launcher adds GET / and HEAD / (the rest-root module, also unpublished), which clients use for version
# and ping. Plain http, no authentication: it binds to 127.0.0.1 only.
#
# Why not org.codelibs:elasticsearch-cluster-runner: its 8.x releases are published only to
# maven.codelibs.org; Maven Central stops at 7.10.2.0, and 7.10 lacks the X-Elastic-Product header that
# go-elasticsearch v8 requires. transport-netty4 8.14.1 is also missing from Central, hence 8.14.3.
#
# Needs: java and javac 17+, mvn, curl, sha256sum; network to Maven Central on the first install only.
set -euo pipefail

ES_VERSION=8.14.3
# sha256 of the two jars that are Elasticsearch (sha1 cross-checked against Maven Central's .sha1 files).
ES_JAR_SHA256=80d33bfd4667f657f6bb6112db8f33ab955a1b12dd9d40a0a99d5eef8c799973
NETTY_JAR_SHA256=832364618097e47031ab7f2e100dd1752cb77dec5efe17f044cb7f3db1f40586
MAIN_CLASS=org.icicle.esnode.Main

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
SRC=$HERE/es

CACHE=${ICICLE_CACHE:-$HOME/.cache/icicle}/es/$ES_VERSION
RUN=${ICICLE_RUN_DIR:-$REPO/.run}/es
PORT=${ICICLE_ES_PORT:-9200}
TRANSPORT_PORT=${ICICLE_ES_TRANSPORT_PORT:-9300-9399}
HEAP=${ICICLE_ES_HEAP:-1g}
START_TIMEOUT=${ICICLE_ES_START_TIMEOUT:-120}
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

# The stamp names everything the install depends on, so an edited launcher or pom is rebuilt.
stamp_want() {
  {
    echo "$ES_VERSION $ES_JAR_SHA256 $NETTY_JAR_SHA256"
    cat "$SRC/pom.xml"
    find "$SRC/src" -name '*.java' -print0 | sort -z | xargs -0 cat
  } | sha256sum | cut -d' ' -f1
}

# installed also re-hashes the two pinned jars (~50 ms), so a jar altered after install is noticed on start.
installed() {
  [[ -f $CACHE/.installed && $(cat "$CACHE/.installed") == "$(stamp_want)" ]] || return 1
  [[ $(sha256sum "$CACHE/lib/elasticsearch-$ES_VERSION.jar" 2>/dev/null | cut -d' ' -f1) == "$ES_JAR_SHA256" ]] &&
    [[ $(sha256sum "$CACHE/lib/transport-netty4-$ES_VERSION.jar" 2>/dev/null | cut -d' ' -f1) == "$NETTY_JAR_SHA256" ]]
}

install() {
  if installed; then
    say "Elasticsearch $ES_VERSION already installed in $CACHE"
    return
  fi
  need java "install a JDK 17+ (apt-get install openjdk-17-jdk-headless)"
  need javac "install a JDK 17+, not only a JRE (apt-get install openjdk-17-jdk-headless)"
  need mvn "install Maven 3 (apt-get install maven)"
  need sha256sum "install coreutils"
  local jv
  jv=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
  [[ ${jv%%.*} -ge 17 ]] 2>/dev/null || die "java is version '$jv'; Elasticsearch $ES_VERSION needs 17 or newer"

  mkdir -p "$CACHE"
  # Two installs at once (make -j, parallel CI steps) would race on the Maven repo and the class files.
  # The lock's fd is scoped to this call so the node started afterwards does not inherit it.
  install_locked 9>"$CACHE/.lock"
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
    rm -rf "$lib"
    if ! mvn -B -q -C -f "$SRC/pom.xml" \
      -Dmaven.repo.local="$CACHE/m2" -Des.version="$ES_VERSION" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$lib" >"$CACHE/mvn.log" 2>&1; then
      tail -n 20 "$CACHE/mvn.log" >&2
      die "mvn dependency:copy-dependencies failed for org.elasticsearch:elasticsearch:$ES_VERSION (full log: $CACHE/mvn.log); check network access to https://repo.maven.apache.org and retry"
    fi
  fi
  check_sha "$lib/elasticsearch-$ES_VERSION.jar" "$ES_JAR_SHA256"
  check_sha "$lib/transport-netty4-$ES_VERSION.jar" "$NETTY_JAR_SHA256"

  say "compiling the launcher ($SRC/src)"
  rm -rf "$CACHE/classes"
  mkdir -p "$CACHE/classes"
  local srcs=()
  mapfile -d '' srcs < <(find "$SRC/src" -name '*.java' -print0)
  javac --release 17 -nowarn -d "$CACHE/classes" -cp "$lib/*" "${srcs[@]}" >"$CACHE/javac.log" 2>&1 ||
    { cat "$CACHE/javac.log" >&2; die "javac failed on $SRC/src against Elasticsearch $ES_VERSION"; }

  stamp_want >"$CACHE/.installed"
  say "installed Elasticsearch $ES_VERSION in $CACHE"
}

# pid of our node if the pid file names a live launcher JVM; a stale file (crash, reboot, reused pid) is removed.
live_pid() {
  [[ -f $PIDFILE ]] || return 1
  local pid
  pid=$(tr -dc 0-9 <"$PIDFILE")
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$MAIN_CLASS"; then
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
      die "something else already answers on $URL; stop it or pick another port with ICICLE_ES_PORT"
    fi
    install
    write_config
    [[ -f $LOG ]] && mv -f "$LOG" "$LOG.1"
    say "starting Elasticsearch $ES_VERSION on $URL (data $RUN/data, log $LOG)"
    # setsid: the node must outlive the shell (and make job) that started it.
    # The -D/-X flags follow the distribution's jvm.options where they matter for a small node.
    setsid nohup java \
      -Xms"$HEAP" -Xmx"$HEAP" -XX:+UseG1GC \
      -Djava.io.tmpdir="$RUN/tmp" -Djava.awt.headless=true -Dfile.encoding=UTF-8 \
      -Djava.locale.providers=SPI,COMPAT -Djna.nosys=true \
      -Dlog4j2.formatMsgNoLookups=true -Dlog4j2.disable.jmx=true -Dlog4j.shutdownHookEnabled=false \
      -Dio.netty.noUnsafe=true -Dio.netty.noKeySetOptimization=true -Dio.netty.recycler.maxCapacityPerThread=0 \
      -Dicicle.pidfile="$PIDFILE" \
      -cp "$CACHE/classes:$CACHE/lib/*" "$MAIN_CLASS" \
      path.home="$RUN/home" path.data="$RUN/data" path.logs="$RUN/logs" \
      cluster.name=icicle node.name=icicle-es discovery.type=single-node \
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
  start) start ;;
  stop) stop ;;
  status) status ;;
  url) echo "$URL" ;;
  *) die "usage: scripts/es.sh {install|start|stop|status|url}" ;;
esac
