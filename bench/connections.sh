#!/usr/bin/env bash
# Connection memory: what one held connection costs the gateway, beside nginx as a reverse proxy in
# front of the same upstream (the orchestrator registry), in resident memory:
#   - IDLE connections that each made one keep-alive call (GET /v1/kinds, proxied) and sit idle;
#   - LORIS connections that each sent the start of a request head and never finish it.
# Each (proxy, kind) pair gets a fresh proxy process, so one measurement's freed memory is not the
# next one's; bench/connection_memory.py opens the connections and prints the RSS delta per
# connection (for nginx, summed over its workers). Both proxies are told to wait far longer than the
# run for an idle caller or a head, so nothing is closed while it is measured.
#
#   bench/connections.sh                       # 3,000 idle, 5,000 slow-loris
#   IDLE=1000 LORIS=1000 bench/connections.sh
#   BERTH_BENCH_SKIP_BUILD=1 bench/connections.sh   # the binaries in target/release as they are
set -euo pipefail
cd "$(dirname "$0")/.."
IDLE=${IDLE:-3000}
LORIS=${LORIS:-5000}
BASE=${BASE:-18280}

if ! command -v nginx >/dev/null 2>&1; then
  echo "== installing nginx-light (Debian package)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

if [ "${BERTH_BENCH_SKIP_BUILD:-}" != 1 ]; then
  echo "== building release binaries"
  cargo build --release -q -p gateway -p orchestrator-registry
fi
bin=${BERTH_BENCH_BIN_DIR:-${CARGO_TARGET_DIR:-target}/release}

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

REG=$((BASE + 2)); GW=$BASE; NGX=$((BASE + 9))
token=$(BERTH_TOKENS_FILE=$work/tokens "$bin/gateway" token create --admin --name bench)
BERTH_LOG=warn BERTH_LISTEN=127.0.0.1:$REG BERTH_DATA_DIR=$work/registry DOCKER_HOST=tcp://127.0.0.1:1 \
  "$bin/orchestrator-registry" & pids+=($!)

wait_for() { # port
  for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$1/healthz" >/dev/null 2>&1 && return; sleep 0.1; done
  echo "nothing answers on $1" >&2; exit 1
}
wait_for "$REG"

cat >"$work/nginx.conf" <<NGINX
worker_processes auto;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
worker_rlimit_nofile 65536;
events { worker_connections 16384; }
http {
  access_log off;
  keepalive_timeout 600s;
  keepalive_requests 100000;
  client_header_timeout 600s;
  client_body_temp_path $work/nginx-body;
  proxy_temp_path $work/nginx-proxy;
  upstream registry { server 127.0.0.1:$REG; keepalive 128; }
  server {
    listen 127.0.0.1:$NGX;
    location / {
      proxy_pass http://registry;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
NGINX

measure() { # proxy kind count
  local proxy=$1 kind=$2 count=$3 port proxy_pids header=
  if [ "$proxy" = gateway ]; then
    BERTH_LOG=warn BERTH_LISTEN=127.0.0.1:$GW BERTH_DATA_DIR=$work BERTH_TOKENS_FILE=$work/tokens \
      BERTH_REGISTRY_URL=http://127.0.0.1:$REG BERTH_RATE_LIMIT_RPS=1000000 BERTH_TOKEN_MAX_IN_FLIGHT=0 BERTH_IDLE_TIMEOUT=600s \
      "$bin/gateway" &
    local gateway_pid=$!
    pids+=("$gateway_pid")
    port=$GW
    wait_for "$port"
    proxy_pids=$gateway_pid
    header="Authorization: Bearer $token"
  else
    nginx -c "$work/nginx.conf"
    port=$NGX
    wait_for "$port"
    proxy_pids=$(pgrep -P "$(cat "$work/nginx.pid")" | paste -sd, -)
  fi
  printf '%-8s ' "$proxy"
  python3 bench/connection_memory.py "127.0.0.1:$port" "$count" "$kind" "$proxy_pids" "$header"
  if [ "$proxy" = gateway ]; then
    kill "$gateway_pid"; wait "$gateway_pid" 2>/dev/null || true
  else
    kill "$(cat "$work/nginx.pid")"
    for _ in $(seq 100); do [ -f "$work/nginx.pid" ] || break; sleep 0.1; done
  fi
}

echo "== resident memory per held connection ($(nproc) cores; nginx summed over its workers)"
measure gateway idle "$IDLE"
measure nginx idle "$IDLE"
measure gateway loris "$LORIS"
measure nginx loris "$LORIS"
