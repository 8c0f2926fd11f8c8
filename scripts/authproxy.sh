#!/usr/bin/env bash
# A real authenticating reverse proxy (nginx from Debian) in front of the local Elasticsearch node, for the
# security integration tests. The local node has no x-pack security (scripts/es.sh: the Maven Central jars
# do not include it), so this proxy answers as a secured cluster does:
#   - "Authorization: Basic" with a generated user and password (htpasswd, apr1)   -> proxied to the node
#     (two users: icicle-reader for callers, icicle-service for the sidecar's own credentials)
#   - "Authorization: ApiKey <base64 id:key>" with the generated key                 -> proxied to the node
#   - anything else -> 401, WWW-Authenticate Basic/Bearer/ApiKey as Elasticsearch 8 sends them, and its
#     security_exception JSON body; nothing of the node's answer
#
#   scripts/authproxy.sh install   apt-get install nginx-light if nginx is missing (idempotent)
#   scripts/authproxy.sh start     install if needed, write config and credentials, start; prints
#                                  `export ICICLE_AUTHPROXY_...` lines for eval
#   scripts/authproxy.sh stop      stop the proxy this script started (by its pid file)
#   scripts/authproxy.sh env       print the export lines again
#   scripts/authproxy.sh url       print http://127.0.0.1:PORT
#
# Environment (defaults in brackets):
#   ICICLE_AUTHPROXY_PORT      port on 127.0.0.1 [9280]
#   ICICLE_ES_PORT             the node's HTTP port on 127.0.0.1, the upstream [9200]
#   ICICLE_RUN_DIR             run root [<repo>/.run]; config, logs, pid, credentials under authproxy/
#
# Credentials are generated once per run dir (random) and kept in authproxy/credentials.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
RUN=${ICICLE_RUN_DIR:-$REPO/.run}/authproxy
PORT=${ICICLE_AUTHPROXY_PORT:-9280}
UPSTREAM_PORT=${ICICLE_ES_PORT:-9200}
URL=http://127.0.0.1:$PORT
PIDFILE=$RUN/nginx.pid
CREDS=$RUN/credentials

die() { echo "authproxy.sh: $*" >&2; exit 1; }
say() { echo "authproxy.sh: $*" >&2; }

install() {
  command -v nginx >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 || die "nginx is missing and there is no apt-get: install nginx"
  [[ $(id -u) == 0 ]] || die "nginx is missing: run 'apt-get install -y nginx-light' as root"
  say "installing nginx-light (Debian)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx-light >&2 ||
    { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx-light >&2; }
  command -v nginx >/dev/null 2>&1 || die "nginx still missing after apt-get"
}

running() { [[ -f $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

credentials() {
  mkdir -p "$RUN"
  if [[ ! -s $CREDS ]]; then
    local pw id key
    pw=$(openssl rand -hex 12)
    id=$(openssl rand -hex 6)
    key=$(openssl rand -hex 16)
    umask 077
    cat >"$CREDS" <<EOF
ICICLE_AUTHPROXY_USER=icicle-reader
ICICLE_AUTHPROXY_PASSWORD=$pw
ICICLE_AUTHPROXY_SERVICE_USER=icicle-service
ICICLE_AUTHPROXY_SERVICE_PASSWORD=$(openssl rand -hex 12)
ICICLE_AUTHPROXY_APIKEY=$(printf '%s:%s' "$id" "$key" | base64 -w0)
EOF
  fi
  # shellcheck disable=SC1090
  source "$CREDS"
}

print_env() {
  credentials
  echo "export ICICLE_AUTHPROXY_URL=$URL"
  echo "export ICICLE_AUTHPROXY_USER=$ICICLE_AUTHPROXY_USER"
  echo "export ICICLE_AUTHPROXY_PASSWORD=$ICICLE_AUTHPROXY_PASSWORD"
  echo "export ICICLE_AUTHPROXY_APIKEY=$ICICLE_AUTHPROXY_APIKEY"
  echo "export ICICLE_AUTHPROXY_SERVICE_USER=$ICICLE_AUTHPROXY_SERVICE_USER"
  echo "export ICICLE_AUTHPROXY_SERVICE_PASSWORD=$ICICLE_AUTHPROXY_SERVICE_PASSWORD"
  echo "export ICICLE_AUTHPROXY_LOG=$RUN/access.log"
}

write_config() {
  credentials
  mkdir -p "$RUN/tmp"
  {
    printf '%s:%s\n' "$ICICLE_AUTHPROXY_USER" "$(openssl passwd -apr1 "$ICICLE_AUTHPROXY_PASSWORD")"
    printf '%s:%s\n' "$ICICLE_AUTHPROXY_SERVICE_USER" "$(openssl passwd -apr1 "$ICICLE_AUTHPROXY_SERVICE_PASSWORD")"
  } >"$RUN/htpasswd"
  local user=""
  [[ $(id -u) == 0 ]] && user="user root;" # workers must read the run dir; loopback-only test proxy
  # Elasticsearch 8's answer to a request without valid credentials.
  local reason='missing authentication credentials for REST request'
  local body="{\"error\":{\"root_cause\":[{\"type\":\"security_exception\",\"reason\":\"$reason\"}],\"type\":\"security_exception\",\"reason\":\"$reason\"},\"status\":401}"
  cat >"$RUN/nginx.conf" <<EOF
# Written by scripts/authproxy.sh; rewritten on every start.
$user
daemon on;
worker_processes 1;
pid $PIDFILE;
error_log $RUN/error.log warn;
events { worker_connections 256; }
http {
  # Who each request came as (the tests read it): scheme, basic user, request, status.
  log_format icicle '\$icicle_scheme \$remote_user "\$request" \$status';
  access_log $RUN/access.log icicle;
  client_body_temp_path $RUN/tmp/body;
  proxy_temp_path $RUN/tmp/proxy;
  fastcgi_temp_path $RUN/tmp/fastcgi;
  uwsgi_temp_path $RUN/tmp/uwsgi;
  scgi_temp_path $RUN/tmp/scgi;
  client_max_body_size 100m;
  upstream es { server 127.0.0.1:$UPSTREAM_PORT; keepalive 8; }
  # ApiKey: the one generated key (the scheme is case-insensitive, as in Elasticsearch).
  map \$http_authorization \$icicle_scheme {
    default                       basic;
    "~*^apikey\\s"                apikey;
  }
  map \$http_authorization \$icicle_apikey_ok {
    default                                   0;
    "~*^apikey\\s+$ICICLE_AUTHPROXY_APIKEY\$" 1;
  }
  # The Basic challenge: auth_basic sends it itself when it refuses; a refused ApiKey gets it here.
  map \$icicle_scheme \$icicle_basic_challenge {
    default '';
    apikey  'Basic realm="security", charset="UTF-8"';
  }
  server {
    listen 127.0.0.1:$PORT;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_set_header Authorization "";
    proxy_buffering off;
    recursive_error_pages on;
    error_page 401 = @unauthorized;
    error_page 418 = @apikey;
    location / {
      if (\$icicle_scheme = apikey) { return 418; }
      auth_basic 'security", charset="UTF-8';
      auth_basic_user_file $RUN/htpasswd;
      proxy_pass http://es;
    }
    location @apikey {
      if (\$icicle_apikey_ok = 0) { return 401; }
      proxy_pass http://es;
    }
    location @unauthorized {
      add_header WWW-Authenticate \$icicle_basic_challenge always;
      add_header WWW-Authenticate 'Bearer realm="security"' always;
      add_header WWW-Authenticate 'ApiKey' always;
      add_header X-Elastic-Product Elasticsearch always;
      default_type application/json;
      return 401 '$body';
    }
  }
}
EOF
}

start() {
  install
  write_config
  if running; then
    kill -HUP "$(cat "$PIDFILE")" # reload the rewritten config and credentials
    sleep 0.5
    say "already running on $URL (pid $(cat "$PIDFILE")): reloaded"
    print_env
    return 0
  fi
  nginx -t -q -c "$RUN/nginx.conf" -p "$RUN" -g "error_log $RUN/error.log warn;" >&2 || die "bad config: $RUN/nginx.conf"
  nginx -c "$RUN/nginx.conf" -p "$RUN" -g "error_log $RUN/error.log warn;" >&2
  for _ in $(seq 1 50); do
    if curl -s -o /dev/null "$URL/"; then
      say "started on $URL -> 127.0.0.1:$UPSTREAM_PORT (pid $(cat "$PIDFILE"))"
      print_env
      return 0
    fi
    sleep 0.1
  done
  die "nginx did not answer on $URL; see $RUN/error.log"
}

stop() {
  if ! running; then
    say "not running"
    return 0
  fi
  local pid
  pid=$(cat "$PIDFILE")
  kill -QUIT "$pid"
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || { say "stopped"; return 0; }
    sleep 0.1
  done
  kill -TERM "$pid" 2>/dev/null || true
  say "stopped (TERM)"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  env) print_env ;;
  url) echo "$URL" ;;
  status) running ;;
  *) die "usage: $0 install|start|stop|env|url|status" ;;
esac
