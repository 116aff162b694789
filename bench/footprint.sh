#!/usr/bin/env bash
# Idle resident memory of each service binary (release build), read from /proc after start-up settles.
#   bench/footprint.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p gateway -p machine-driver -p orchestrator-registry -p storage-ops -p ecs-emulator
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
port=18380
printf '%-24s %10s\n' "service" "idle RSS"
for svc in gateway machine-driver orchestrator-registry storage-ops ecs-emulator; do
  port=$((port + 1))
  if [ "$svc" = ecs-emulator ]; then
    ./target/release/ecs-emulator --port "$port" >/dev/null 2>&1 &
  else
    BERTH_LOG=warn BERTH_LISTEN=127.0.0.1:$port BERTH_DATA_DIR=$work/$svc DOCKER_HOST=tcp://127.0.0.1:1 \
      ./target/release/$svc >/dev/null 2>&1 &
  fi
  pid=$!
  for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
  sleep 1
  rss=$(awk '/VmRSS/ {print $2 " " $3}' "/proc/$pid/status")
  printf '%-24s %10s\n' "$svc" "$rss"
  kill "$pid"; wait "$pid" 2>/dev/null || true
done
