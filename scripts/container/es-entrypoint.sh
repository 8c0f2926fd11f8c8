#!/usr/bin/env bash
# Entry point of the local Elasticsearch image (es.Containerfile): starts one node in the foreground with
# the launcher of scripts/es/src, its settings taken as the official image takes them: every environment
# variable whose name is a lowercase dotted setting (discovery.type, cluster.routing...) is passed to the
# node; ES_JAVA_OPTS is added to the JVM's options (its -Xms/-Xmx win over the defaults here).
set -euo pipefail
home=/usr/share/elasticsearch
settings=(
  path.home="$home" path.data="$home/data" path.logs="$home/logs"
  cluster.name=docker-cluster node.name="${HOSTNAME:-elasticsearch}" network.host=0.0.0.0 http.port=9200
)
while IFS= read -r -d '' kv; do
  name=${kv%%=*} value=${kv#*=}
  [[ $name =~ ^[a-z0-9_]+(\.[a-z0-9_]+)+$ ]] || continue
  case $name in
    xpack.security.enabled | xpack.security.enrollment.enabled)
      # The node has no x-pack: security is off, which is what "false" asks for.
      if [[ $value != false ]]; then
        echo "es-entrypoint: $name=$value: this node has no security (no x-pack); only false is possible" >&2
        exit 1
      fi
      ;;
    xpack.*)
      echo "es-entrypoint: $name=$value: this node has no x-pack; the setting cannot be applied" >&2
      exit 1
      ;;
    bootstrap.memory_lock)
      # The launcher does not lock the heap in memory (the distribution's bootstrap does); say so when asked.
      if [[ $value == true ]]; then
        echo "es-entrypoint: bootstrap.memory_lock=true: this node does not lock its memory; going on without" >&2
      fi
      ;;
    *) settings+=("$name=$value") ;;
  esac
done < <(env -0)
# The JVM options follow scripts/es.sh start (the distribution's jvm.options where they matter for a small node).
# ES_JAVA_OPTS is split on whitespace, as the official image splits it.
# shellcheck disable=SC2086
exec java \
  -Xms1g -Xmx1g -XX:+UseG1GC \
  -Djava.io.tmpdir="$home/tmp" -Djava.awt.headless=true -Dfile.encoding=UTF-8 \
  -Djava.locale.providers=SPI,COMPAT -Djna.nosys=true \
  -Dlog4j2.formatMsgNoLookups=true -Dlog4j2.disable.jmx=true -Dlog4j.shutdownHookEnabled=false \
  -Dio.netty.noUnsafe=true -Dio.netty.noKeySetOptimization=true -Dio.netty.recycler.maxCapacityPerThread=0 \
  ${ES_JAVA_OPTS:-} \
  -cp "$home/classes:$home/lib/*" org.icicle.esnode.Main \
  "${settings[@]}"
