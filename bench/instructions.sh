#!/usr/bin/env bash
# Instructions the gateway executes per request, by kind of request, counted by valgrind's callgrind:
# counts, not seconds, so a regression shows without timing noise (the same binary and inputs give the
# same figure whatever else the machine is doing).
#
#   bench/instructions.sh            # REQUESTS=200 of each kind
#
# The upstreams (registry, storage-ops) run natively; only the gateway runs under callgrind, with one
# worker thread. For each kind the counters are zeroed after a warm-up, REQUESTS requests are sent over
# one keep-alive connection, and the counters dumped: the figure is the dump's total over REQUESTS, so
# start-up and warm-up are not in it. Installs Debian's valgrind if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# Where cargo puts release binaries (CARGO_TARGET_DIR, as cargo reads it).
bin=${CARGO_TARGET_DIR:-target}/release
REQUESTS=${REQUESTS:-200}
BASE=${BASE:-18280}

command -v valgrind >/dev/null 2>&1 || {
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
}
cargo build --release -q -p gateway -p orchestrator-registry -p storage-ops

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

GW=$BASE; REG=$((BASE + 2)); STO=$((BASE + 3))
# The gateway binary mints its own tokens: the benchmark needs no release build of the CLI.
token=$(BERTH_TOKENS_FILE=$work/tokens "$bin"/gateway token create --admin --name bench)

BERTH_LOG=warn BERTH_LISTEN=127.0.0.1:$REG BERTH_DATA_DIR=$work/registry DOCKER_HOST=tcp://127.0.0.1:1 \
  "$bin"/orchestrator-registry & pids+=($!)
BERTH_LOG=warn BERTH_LISTEN=127.0.0.1:$STO BERTH_DATA_DIR=$work/storage BERTH_REGISTRY_URL=http://127.0.0.1:$REG \
  BERTH_LOCAL_ROOTS=$work/registry/volumes "$bin"/storage-ops & pids+=($!)
# Generous upstream limits: under callgrind the gateway runs some fifty times slower.
BERTH_LOG=warn BERTH_LISTEN=127.0.0.1:$GW BERTH_DATA_DIR=$work BERTH_TOKENS_FILE=$work/tokens \
  BERTH_REGISTRY_URL=http://127.0.0.1:$REG BERTH_STORAGE_OPS_URL=http://127.0.0.1:$STO \
  BERTH_RATE_LIMIT_RPS=1000000 BERTH_TOKEN_MAX_IN_FLIGHT=0 BERTH_WORKERS=1 BERTH_UPSTREAM_TIMEOUT=120s \
  valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" \
  "$bin"/gateway 2>"$work/valgrind.log" & pids+=($!)
gateway_pid=$!
for port in $REG $STO $GW; do
  for _ in $(seq 600); do curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
done

# A curl config of N requests: curl sends them one after another over one connection.
requests() { # n method url [body]
  local i
  for i in $(seq "$1"); do
    echo "url = \"$3\""
    echo "request = \"$2\""
    echo "output = \"/dev/null\""
    if [ -n "${4:-}" ]; then
      local body=${4//@I@/$i}
      echo "data = \"${body//\"/\\\"}\""
    fi
  done
}

dump=0
measure() { # label method url auth(yes|no) [body]
  local label=$1 method=$2 url=$3 auth=$4 body=${5:-}
  local headers=(-H "Content-Type: application/json")
  [ "$auth" = yes ] && headers+=(-H "Authorization: Bearer $token")
  requests 10 "$method" "$url" "${body//@I@/w@I@}" >"$work/warm.cfg"
  curl -s "${headers[@]}" --config "$work/warm.cfg" >/dev/null || true
  callgrind_control -z "$gateway_pid" >/dev/null 2>&1
  requests "$REQUESTS" "$method" "$url" "$body" >"$work/run.cfg"
  curl -s "${headers[@]}" --config "$work/run.cfg" >/dev/null || true
  callgrind_control -d "$gateway_pid" >/dev/null 2>&1
  dump=$((dump + 1))
  local file total
  file=$(ls -t "$work"/callgrind.out.* | head -1)
  total=$(awk '/^(summary|totals):/ {print $2; exit}' "$file")
  printf '%-52s %14s %12s\n' "$label" "$total" "$((total / REQUESTS))"
}

echo "== gateway instructions (callgrind Ir), $REQUESTS requests of each kind, one keep-alive connection"
printf '%-52s %14s %12s\n' "request" "total" "per request"
measure "GET /v1/kinds (authorised, forwarded)" GET "http://127.0.0.1:$GW/v1/kinds" yes
measure "GET /v1/orchestrators/local (authorised, forwarded)" GET "http://127.0.0.1:$GW/v1/orchestrators/local" yes
measure "POST /v1/volumes (authorised, forwarded, body)" POST "http://127.0.0.1:$GW/v1/volumes" yes \
  '{"name":"v@I@","capacity":"1Mi"}'
measure "GET /v1/kinds without a token (401 at the gateway)" GET "http://127.0.0.1:$GW/v1/kinds" no
measure "GET /v1/nothing (404 at the gateway)" GET "http://127.0.0.1:$GW/v1/nothing" yes
