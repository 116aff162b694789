#!/usr/bin/env bash
# How long `berth up` (release build) takes from exec until all four services answer /readyz 200, and
# from Ctrl-C (SIGINT) until it has exited. Runs RUNS times on a fresh data directory each.
#   bench/startup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# Where cargo puts release binaries (CARGO_TARGET_DIR, as cargo reads it).
bin=${CARGO_TARGET_DIR:-target}/release
RUNS=${RUNS:-5}
BASE=${BASE:-18480}
cargo build --release -q -p berth
ms() { date +%s%3N; }
printf '%-5s %18s %16s %6s\n' run "ready after (ms)" "stopped in (ms)" exit
for run in $(seq "$RUNS"); do
  data=$(mktemp -d)
  start=$(ms)
  "$bin"/berth up --port-base "$BASE" --data-dir "$data" >/dev/null 2>"$data.err" &
  pid=$!
  for port in $BASE $((BASE + 1)) $((BASE + 2)) $((BASE + 3)); do
    until curl -fsS -o /dev/null "http://127.0.0.1:$port/readyz" 2>/dev/null; do
      # Stopped, or not ready within a minute: say why rather than wait for ever.
      if ! kill -0 "$pid" 2>/dev/null || [ $(( $(ms) - start )) -gt 60000 ]; then
        echo "berth up did not become ready on port $port; its stderr:" >&2
        cat "$data.err" >&2
        kill "$pid" 2>/dev/null || true
        exit 1
      fi
      sleep 0.005
    done
  done
  ready=$(( $(ms) - start ))
  stop_at=$(ms)
  kill -INT "$pid"
  code=0; wait "$pid" || code=$?
  printf '%-5s %18s %16s %6s\n' "$run" "$ready" "$(( $(ms) - stop_at ))" "$code"
  rm -rf "$data" "$data.err"
done
