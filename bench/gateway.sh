#!/usr/bin/env bash
# Gateway benchmark: requests/s and p50/p99 latency of one upstream route, measured in one run
#   1. direct to the service (orchestrator-registry, GET /v1/kinds),
#   2. through the Berth gateway (bearer token checked, scopes, metrics, internal credential added),
#   3. through nginx as a reverse proxy with upstream keepalive (Debian's nginx-light).
# Load comes from wrk (Debian's package) in its own process. Everything listens on 127.0.0.1 and every
# run is bounded (DURATION seconds each); nothing is left running afterwards.
#
# The targets take turns, ROUNDS times, so drift on a shared machine hits all three alike; the last
# table gives each target's median round. "proxy CPU/req" is the CPU time the proxy process itself
# spent per request (from /proc, user + system), the cost a proxy adds whatever the machine.
#
#   bench/gateway.sh                  # defaults: 64 connections, 3 rounds of 10 s per target
#   CONNECTIONS=16 DURATION=5 ROUNDS=5 bench/gateway.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CONNECTIONS=${CONNECTIONS:-64}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
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
./target/release/berth token create --scopes admin --name bench -o json >"$work/token.json"
token=$(sed -n 's/.*"token": "\(.*\)".*/\1/p' "$work/token.json")
sed -n 's/.*"tokensFileLine": "\(.*\)".*/\1/p' "$work/token.json" >"$work/tokens"

BERTH_LOG=warn BERTH_LISTEN=127.0.0.1:$REG BERTH_DATA_DIR=$work/registry DOCKER_HOST=tcp://127.0.0.1:1 \
  ./target/release/orchestrator-registry & pids+=($!)
# The rate limit is on, as in production, with a limit far above the offered load: what it costs is
# part of the figure.
BERTH_LOG=warn BERTH_LISTEN=127.0.0.1:$GW BERTH_DATA_DIR=$work BERTH_TOKENS_FILE=$work/tokens \
  BERTH_REGISTRY_URL=http://127.0.0.1:$REG BERTH_RATE_LIMIT_RPS=1000000 \
  ./target/release/gateway & pids+=($!)
gateway_pid=$!

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

# CPU ticks (user + system) of some processes, from /proc.
ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $t; }
hz=$(getconf CLK_TCK)

run() { # name url proxy-pids [header]
  local name=$1 url=$2 pids_of_proxy=$3 header=${4:-} before after
  before=$( [ -n "$pids_of_proxy" ] && ticks $pids_of_proxy || echo 0)
  if [ -n "$header" ]; then
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency -H "$header" "$url" >"$work/wrk.txt"
  else
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency "$url" >"$work/wrk.txt"
  fi
  after=$( [ -n "$pids_of_proxy" ] && ticks $pids_of_proxy || echo 0)
  local rps p50 p99 errors cpu
  rps=$(awk '/Requests\/sec/ {print $2}' "$work/wrk.txt")
  p50=$(awk '$1=="50%" {print $2}' "$work/wrk.txt")
  p99=$(awk '$1=="99%" {print $2}' "$work/wrk.txt")
  errors=$(awk '/Non-2xx/ {print $5} /Socket errors/ {print $0}' "$work/wrk.txt" | tr '\n' ' ')
  cpu=-
  if [ -n "$pids_of_proxy" ]; then
    cpu=$(awk -v t=$((after - before)) -v hz="$hz" -v r="$rps" -v d="$DURATION" 'BEGIN {printf "%.1f us", t / hz * 1e6 / (r * d)}')
  fi
  printf '%-28s %12s %10s %10s %14s   %s\n' "$name" "$rps" "$p50" "$p99" "$cpu" "${errors:-}"
  echo "$name|$rps|$p50|$p99|$cpu" >>"$work/results"
}

# This run's workers only (children of its master), not any other nginx on the machine.
nginx_pids=$(pgrep -d' ' -P "$(cat "$work/nginx.pid")" || true)
echo "== GET /v1/kinds, $CONNECTIONS connections, $THREADS wrk threads, ${DURATION}s each, $ROUNDS rounds, on $(nproc) cores"
printf '%-28s %12s %10s %10s %14s\n' "path" "requests/s" "p50" "p99" "proxy CPU/req"
for round in $(seq "$ROUNDS"); do
  run "direct (registry)" "http://127.0.0.1:$REG/v1/kinds" ""
  run "berth gateway (auth on)" "http://127.0.0.1:$GW/v1/kinds" "$gateway_pid" "Authorization: Bearer $token"
  run "nginx (keepalive)" "http://127.0.0.1:$NGX/v1/kinds" "$nginx_pids"
done

echo
echo "== median round of each path (by requests/s)"
printf '%-28s %12s %10s %10s %14s\n' "path" "requests/s" "p50" "p99" "proxy CPU/req"
for name in "direct (registry)" "berth gateway (auth on)" "nginx (keepalive)"; do
  grep -F "$name|" "$work/results" | sort -t'|' -k2 -n | awk -F'|' -v n="$ROUNDS" 'NR == int((n + 1) / 2) {printf "%-28s %12s %10s %10s %14s\n", $1, $2, $3, $4, $5}'
done
