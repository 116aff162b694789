#!/usr/bin/env bash
# Gateway benchmark: requests/s and p50/p99 latency of one upstream route, measured in one run
#   1. direct to the service (orchestrator-registry, GET /v1/kinds),
#   2. through the Berth gateway (bearer token checked, scopes, metrics, internal credential added),
#   3. through nginx as a reverse proxy with upstream keepalive (Debian's nginx-light).
# Load comes from wrk (Debian's package) in its own process. Everything listens on 127.0.0.1 and every
# run is bounded (DURATION seconds each); nothing is left running afterwards.
#
#   bench/gateway.sh                  # defaults: 64 connections, 10 s per target
#   CONNECTIONS=16 DURATION=5 bench/gateway.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CONNECTIONS=${CONNECTIONS:-64}
DURATION=${DURATION:-10}
THREADS=${THREADS:-2}
BASE=${BASE:-18180}

need() { command -v "$1" >/dev/null 2>&1; }
if ! need wrk || ! need nginx; then
  echo "== installing wrk and nginx-light (Debian packages)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk nginx-light >/dev/null
fi

echo "== building release binaries"
cargo build --release -q -p gateway -p orchestrator-registry -p berth

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

REG=$((BASE + 2)); GW=$BASE; NGX=$((BASE + 9))
token="bench-$(date +%s%N)"
./target/release/berth token create --scopes admin --name bench -o json >"$work/token.json"
token=$(sed -n 's/.*"token": "\(.*\)".*/\1/p' "$work/token.json")
sed -n 's/.*"tokensFileLine": "\(.*\)".*/\1/p' "$work/token.json" >"$work/tokens"

BERTH_LOG=warn BERTH_LISTEN=127.0.0.1:$REG BERTH_DATA_DIR=$work/registry DOCKER_HOST=tcp://127.0.0.1:1 \
  ./target/release/orchestrator-registry & pids+=($!)
BERTH_LOG=warn BERTH_LISTEN=127.0.0.1:$GW BERTH_DATA_DIR=$work BERTH_TOKENS_FILE=$work/tokens \
  BERTH_REGISTRY_URL=http://127.0.0.1:$REG BERTH_RATE_LIMIT_RPS=0 \
  ./target/release/gateway & pids+=($!)

cat >"$work/nginx.conf" <<NGINX
worker_processes auto;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
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
nginx -c "$work/nginx.conf"

for port in $REG $GW $NGX; do
  for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
done
curl -fsS -H "Authorization: Bearer $token" "http://127.0.0.1:$GW/v1/kinds" >/dev/null

run() { # name url [header]
  local out
  if [ -n "${3:-}" ]; then
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency -H "$3" "$2" >"$work/wrk.txt"
  else
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency "$2" >"$work/wrk.txt"
  fi
  out=$work/wrk.txt
  local rps p50 p99 errors
  rps=$(awk '/Requests\/sec/ {print $2}' "$out")
  p50=$(awk '$1=="50%" {print $2}' "$out")
  p99=$(awk '$1=="99%" {print $2}' "$out")
  errors=$(awk '/Non-2xx/ {print $5} /Socket errors/ {print $0}' "$out" | tr '\n' ' ')
  printf '%-28s %12s %10s %10s   %s\n' "$1" "$rps" "$p50" "$p99" "${errors:-}"
}

echo "== GET /v1/kinds, $CONNECTIONS connections, $THREADS wrk threads, ${DURATION}s each, on $(nproc) cores"
printf '%-28s %12s %10s %10s\n' "path" "requests/s" "p50" "p99"
run "direct (registry)" "http://127.0.0.1:$REG/v1/kinds"
run "berth gateway (auth on)" "http://127.0.0.1:$GW/v1/kinds" "Authorization: Bearer $token"
run "nginx (keepalive)" "http://127.0.0.1:$NGX/v1/kinds"
