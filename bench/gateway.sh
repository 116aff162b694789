#!/usr/bin/env bash
# Gateway benchmark: requests/s and p50/p99 latency of one upstream route, measured in one run
#   1. direct to the service (orchestrator-registry, GET /v1/kinds),
#   2. through the Berth gateway (bearer token checked, scopes, metrics, rate limit on, internal
#      credential added),
#   3. through nginx as a reverse proxy with upstream keepalive (Debian's nginx-light),
#   4. through HAProxy with upstream connection reuse (Debian's haproxy),
#   5. optionally, through a second Berth gateway binary (COMPARE_GATEWAY=path), so a change can be
#      measured against the binary of an earlier commit in the same run.
# Load comes from wrk (Debian's package) in its own process. Everything listens on 127.0.0.1 and every
# run is bounded (DURATION seconds each); nothing is left running afterwards.
#
# The targets take turns, ROUNDS times, so drift on a shared machine hits all alike; the last tables
# give each target's median round and its ratio to nginx and HAProxy (ratios measured in one run hold
# across machines; absolute figures do not). "proxy CPU/req" is the CPU time the proxy process itself
# spent per request (from /proc, user + system), the cost a proxy adds whatever the machine. A second
# pass holds MANY_CONNECTIONS connections open at once (0 skips it).
#
#   bench/gateway.sh                  # defaults: 64 connections, 3 rounds of 10 s per target
#   CONNECTIONS=16 DURATION=5 ROUNDS=5 MANY_CONNECTIONS=0 bench/gateway.sh
#   COMPARE_GATEWAY=/work/old/target/release/gateway bench/gateway.sh
#   BERTH_BENCH_SKIP_BUILD=1 bench/gateway.sh   # the binaries in target/release as they are
#   BERTH_BENCH_SKIP_BUILD=1 BERTH_BENCH_BIN_DIR=dir bench/gateway.sh   # ... or in another directory
set -euo pipefail
cd "$(dirname "$0")/.."
CONNECTIONS=${CONNECTIONS:-64}
MANY_CONNECTIONS=${MANY_CONNECTIONS:-1000}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
BASE=${BASE:-18180}
COMPARE_GATEWAY=${COMPARE_GATEWAY:-}

need() { command -v "$1" >/dev/null 2>&1; }
if ! need wrk || ! need nginx || ! need haproxy; then
  echo "== installing wrk, nginx-light and haproxy (Debian packages)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk nginx-light haproxy >/dev/null
fi
# wrk, nginx and HAProxy each need a descriptor per connection, and the many-connections pass holds
# a thousand on each side of every proxy.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# BERTH_BENCH_SKIP_BUILD=1 measures the release binaries already built (of another commit, say).
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
  [ -f "$work/haproxy.pid" ] && kill "$(cat "$work/haproxy.pid")" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

REG=$((BASE + 2)); GW=$BASE; GW2=$((BASE + 5)); HAP=$((BASE + 8)); NGX=$((BASE + 9))
# The gateway binary mints its own tokens: the benchmark needs no release build of the CLI.
token=$(BERTH_TOKENS_FILE=$work/tokens "$bin/gateway" token create --admin --name bench)
# The services' internal credential, as in production: the registry refuses a call without it, the
# gateway puts it in place of the caller's token, and nginx and HAProxy add it too, so every path
# does the same work (the direct path sends it itself).
internal=bench-internal-credential

BERTH_LOG=warn BERTH_LISTEN=127.0.0.1:$REG BERTH_DATA_DIR=$work/registry DOCKER_HOST=tcp://127.0.0.1:1 \
  BERTH_INTERNAL_TOKEN=$internal "$bin/orchestrator-registry" & pids+=($!)
# The rate limit is on, as in production, with a limit far above the offered load: what it costs is
# part of the figure.
start_gateway() { # binary port
  BERTH_LOG=warn BERTH_LISTEN=127.0.0.1:$2 BERTH_DATA_DIR=$work BERTH_TOKENS_FILE=$work/tokens \
    BERTH_REGISTRY_URL=http://127.0.0.1:$REG BERTH_RATE_LIMIT_RPS=1000000 BERTH_TOKEN_MAX_IN_FLIGHT=0 \
    BERTH_INTERNAL_TOKEN=$internal "$1" &
  pids+=($!)
}
start_gateway "$bin/gateway" "$GW"
gateway_pid=$!
compare_pid=
if [ -n "$COMPARE_GATEWAY" ]; then
  start_gateway "$COMPARE_GATEWAY" "$GW2"
  compare_pid=$!
fi

cat >"$work/nginx.conf" <<NGINX
worker_processes auto;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
worker_rlimit_nofile 65536;
events { worker_connections 8192; }
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
      proxy_set_header Authorization "Bearer $internal";
    }
  }
}
NGINX
nginx -c "$work/nginx.conf"

# HAProxy as commonly deployed in front of an HTTP service: one process, a thread per core, keep-alive
# on both sides and server connections reused across callers.
cat >"$work/haproxy.cfg" <<HAPROXY
global
  pidfile $work/haproxy.pid
  maxconn 8000
  nbthread $(nproc)
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
  http-reuse always
frontend front
  bind 127.0.0.1:$HAP
  default_backend registry
backend registry
  http-request set-header Authorization "Bearer $internal"
  server registry 127.0.0.1:$REG maxconn 128
HAPROXY
haproxy -D -f "$work/haproxy.cfg"

ports="$REG $GW $NGX $HAP"
[ -n "$COMPARE_GATEWAY" ] && ports="$ports $GW2"
for port in $ports; do
  for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
done
curl -fsS -H "Authorization: Bearer $token" "http://127.0.0.1:$GW/v1/kinds" >/dev/null
# Every path answers 200 before anything is measured: a proxy whose calls were refused would
# otherwise be timed answering 401s.
curl -fsS -H "Authorization: Bearer $internal" "http://127.0.0.1:$REG/v1/kinds" >/dev/null
curl -fsS "http://127.0.0.1:$NGX/v1/kinds" >/dev/null
curl -fsS "http://127.0.0.1:$HAP/v1/kinds" >/dev/null

# CPU ticks (user + system) of some processes, from /proc.
ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $t; }
hz=$(getconf CLK_TCK)

run() { # pass name url proxy-pids [header]
  local pass=$1 name=$2 url=$3 pids_of_proxy=$4 header=${5:-} before after
  local connections=$CONNECTIONS
  [ "$pass" = many ] && connections=$MANY_CONNECTIONS
  before=$( [ -n "$pids_of_proxy" ] && ticks $pids_of_proxy || echo 0)
  if [ -n "$header" ]; then
    wrk -t"$THREADS" -c"$connections" -d"${DURATION}s" --latency -H "$header" "$url" >"$work/wrk.txt"
  else
    wrk -t"$THREADS" -c"$connections" -d"${DURATION}s" --latency "$url" >"$work/wrk.txt"
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
  printf '%-30s %12s %10s %10s %14s   %s\n' "$name" "$rps" "$p50" "$p99" "$cpu" "${errors:-}"
  echo "$pass|$name|$rps|$p50|$p99|$cpu" >>"$work/results"
}

# This run's workers only (children of its master), not any other nginx on the machine.
nginx_pids=$(pgrep -d' ' -P "$(cat "$work/nginx.pid")" || true)
haproxy_pids=$(cat "$work/haproxy.pid")
names=("direct (registry)" "berth gateway (auth on)" "nginx (keepalive)" "haproxy (keepalive)")
[ -n "$COMPARE_GATEWAY" ] && names+=("compared gateway (auth on)")
passes=(base)
[ "$MANY_CONNECTIONS" -gt 0 ] && passes+=(many)

for pass in "${passes[@]}"; do
  c=$CONNECTIONS
  [ "$pass" = many ] && c=$MANY_CONNECTIONS
  echo "== GET /v1/kinds, $c connections, $THREADS wrk threads, ${DURATION}s each, $ROUNDS rounds, on $(nproc) cores"
  printf '%-30s %12s %10s %10s %14s\n' "path" "requests/s" "p50" "p99" "proxy CPU/req"
  for round in $(seq "$ROUNDS"); do
    run "$pass" "direct (registry)" "http://127.0.0.1:$REG/v1/kinds" "" "Authorization: Bearer $internal"
    run "$pass" "berth gateway (auth on)" "http://127.0.0.1:$GW/v1/kinds" "$gateway_pid" "Authorization: Bearer $token"
    run "$pass" "nginx (keepalive)" "http://127.0.0.1:$NGX/v1/kinds" "$nginx_pids"
    run "$pass" "haproxy (keepalive)" "http://127.0.0.1:$HAP/v1/kinds" "$haproxy_pids"
    if [ -n "$COMPARE_GATEWAY" ]; then
      run "$pass" "compared gateway (auth on)" "http://127.0.0.1:$GW2/v1/kinds" "$compare_pid" "Authorization: Bearer $token"
    fi
  done
  echo
done

median() { # pass name → "rps|p50|p99|cpu" of the median round by requests/s
  grep -F "$1|$2|" "$work/results" | sort -t'|' -k3 -n |
    awk -F'|' -v n="$ROUNDS" 'NR == int((n + 1) / 2) {print $3 "|" $4 "|" $5 "|" $6}'
}
for pass in "${passes[@]}"; do
  c=$CONNECTIONS
  [ "$pass" = many ] && c=$MANY_CONNECTIONS
  echo "== median round of each path, $c connections (by requests/s)"
  printf '%-30s %12s %10s %10s %14s %10s %10s\n' "path" "requests/s" "p50" "p99" "proxy CPU/req" "vs nginx" "vs haproxy"
  nginx_rps=$(median "$pass" "nginx (keepalive)" | cut -d'|' -f1)
  haproxy_rps=$(median "$pass" "haproxy (keepalive)" | cut -d'|' -f1)
  for name in "${names[@]}"; do
    IFS='|' read -r rps p50 p99 cpu <<<"$(median "$pass" "$name")"
    awk -v n="$name" -v r="$rps" -v a="$p50" -v b="$p99" -v c="$cpu" -v g="$nginx_rps" -v h="$haproxy_rps" \
      'BEGIN {printf "%-30s %12s %10s %10s %14s %9.2fx %9.2fx\n", n, r, a, b, c, r / g, r / h}'
  done
  echo
done
