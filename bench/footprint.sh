#!/usr/bin/env bash
# Resident memory of each service binary (release build) and of `berth up` as a whole: idle, read
# from /proc after start-up settles, and peak (VmHWM, the high-water mark) after LOAD_SECONDS of wrk
# load at 64 connections on a read route of the service (the gateway's forwarded to a registry);
# also the idle thread count and the load's requests/s, so a memory setting that costs throughput
# shows. The idle figure is split into its file-backed part (the binary's own pages and the shared
# libraries: page cache, shared by every process that maps it) and its anonymous part (the heap, one
# mimalloc arena, see service_kit::memory; thread stacks); run as root, the script also shows which
# crates storage-ops' resident binary pages belong to (bench/resident.py).
#   bench/footprint.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# Where cargo puts release binaries (CARGO_TARGET_DIR, as cargo reads it).
bin=${CARGO_TARGET_DIR:-target}/release
LOAD_SECONDS=${LOAD_SECONDS:-5}
command -v wrk >/dev/null 2>&1 || {
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
}
cargo build --release -q -p gateway -p machine-driver -p orchestrator-registry -p storage-ops -p ecs-emulator -p berth
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
port=18380
kb() { awk -v k="$2" '$1 == k ":" {printf "%.1f MB", $2 / 1024}' "/proc/$1/status"; }
ready() { for _ in $(seq 200); do curl -fsS "http://127.0.0.1:$1/healthz" >/dev/null 2>&1 && return; sleep 0.05; done; }

# The gateway binary mints its own tokens: the benchmark needs no release build of the CLI.
token=$(BERTH_TOKENS_FILE=$work/tokens "$bin"/gateway token create --admin --name bench)
# The gateway's upstream, started once and left out of the table.
registry_port=18379
BERTH_LOG=warn BERTH_LISTEN=127.0.0.1:$registry_port BERTH_DATA_DIR=$work/upstream DOCKER_HOST=tcp://127.0.0.1:1 \
  "$bin"/orchestrator-registry >/dev/null 2>&1 & pids+=($!)
ready $registry_port

printf '%-24s %10s %20s %10s %8s   %s\n' "service" "idle RSS" "of which file / anon" "peak RSS" "threads" "load"
for svc in gateway machine-driver orchestrator-registry storage-ops ecs-emulator; do
  port=$((port + 1))
  route=/healthz header=
  case $svc in
    ecs-emulator) "$bin"/ecs-emulator --port "$port" >"$work/$svc.log" 2>&1 & ;;
    *)
      # Each service is given only the variables it reads: any other BERTH_* name stops it (exit 2).
      extra=()
      case $svc in
        gateway) extra=(BERTH_TOKENS_FILE=$work/tokens BERTH_REGISTRY_URL=http://127.0.0.1:$registry_port
                        BERTH_RATE_LIMIT_RPS=1000000 BERTH_TOKEN_MAX_IN_FLIGHT=0) ;;
        storage-ops) extra=(BERTH_REGISTRY_URL=http://127.0.0.1:$registry_port) ;;
      esac
      env BERTH_LOG=warn BERTH_LISTEN=127.0.0.1:$port BERTH_DATA_DIR=$work/$svc DOCKER_HOST=tcp://127.0.0.1:1 \
        "${extra[@]}" "$bin"/$svc >"$work/$svc.log" 2>&1 &
      ;;
  esac
  pid=$!
  pids+=("$pid")
  case $svc in
    gateway) route=/v1/kinds header="Authorization: Bearer $token" ;;
    machine-driver) route=/v1/providers ;;
    orchestrator-registry) route=/v1/kinds ;;
    storage-ops) route=/v1/volumes ;;
  esac
  ready "$port"
  kill -0 "$pid" 2>/dev/null || { echo "$svc did not start:" >&2; cat "$work/$svc.log" >&2; exit 1; }
  sleep 1
  idle=$(kb "$pid" VmRSS) threads=$(ls "/proc/$pid/task" | wc -l)
  split="$(kb "$pid" RssFile) / $(kb "$pid" RssAnon)"
  # The file-backed part is the binary's page cache; where in the binary it comes from, by crate.
  if [ "$svc" = storage-ops ] && [ -r "/proc/$pid/pagemap" ] && [ "$(id -u)" = 0 ]; then
    resident=$(bench/resident.py "$pid" 2>&1 | head -12) || true
  fi
  if [ -n "$header" ]; then
    rps=$(wrk -t2 -c64 -d"${LOAD_SECONDS}s" -H "$header" "http://127.0.0.1:$port$route" | awk '/^Requests\/sec/ {print $2}')
  else
    rps=$(wrk -t2 -c64 -d"${LOAD_SECONDS}s" "http://127.0.0.1:$port$route" | awk '/^Requests\/sec/ {print $2}')
  fi
  printf '%-24s %10s %20s %10s %8s   %s\n' "$svc" "$idle" "$split" "$(kb "$pid" VmHWM)" "$threads" \
    "GET $route, 64 connections, ${LOAD_SECONDS}s: $rps requests/s"
  kill "$pid"; wait "$pid" 2>/dev/null || true
done

# The whole stack in one process, as `berth up` runs it.
base=18400
BERTH_RATE_LIMIT_RPS=1000000 BERTH_TOKEN_MAX_IN_FLIGHT=0 "$bin"/berth up --port-base $base --data-dir "$work/up" >"$work/up.out" 2>/dev/null &
pid=$!
pids+=("$pid")
for _ in $(seq 200); do grep -q '^admin token: ' "$work/up.out" 2>/dev/null && break; sleep 0.05; done
up_token=$(sed -n 's/^admin token: //p' "$work/up.out" | head -1)
for p in $base $((base + 1)) $((base + 2)) $((base + 3)); do
  until curl -fsS -o /dev/null "http://127.0.0.1:$p/readyz" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { echo "berth up stopped before it was ready" >&2; exit 1; }
    sleep 0.05
  done
done
sleep 1
idle=$(kb "$pid" VmRSS) threads=$(ls "/proc/$pid/task" | wc -l)
split="$(kb "$pid" RssFile) / $(kb "$pid" RssAnon)"
rps() { awk '/^Requests\/sec/ {print $2}'; }
kinds=$(wrk -t2 -c64 -d"${LOAD_SECONDS}s" -H "Authorization: Bearer $up_token" "http://127.0.0.1:$base/v1/kinds" | rps)
volumes=$(wrk -t2 -c64 -d"${LOAD_SECONDS}s" -H "Authorization: Bearer $up_token" "http://127.0.0.1:$base/v1/volumes" | rps)
printf '%-24s %10s %20s %10s %8s   %s\n' "berth up (all five)" "$idle" "$split" "$(kb "$pid" VmHWM)" "$threads" \
  "GET /v1/kinds then /v1/volumes through the gateway, 64 connections, ${LOAD_SECONDS}s each: $kinds, $volumes requests/s"
if [ -n "${resident:-}" ]; then
  echo
  echo "storage-ops idle: its own binary's resident pages by crate (bench/resident.py):"
  echo "$resident"
fi
