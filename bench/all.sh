#!/usr/bin/env bash
# Every benchmark in one run, written to BENCHMARKS.md (or OUT=path) with the machine they ran on.
#
#   bench/all.sh                 # the whole set, about 35 minutes warm on 2 cores (two clean builds)
#   QUICK=1 bench/all.sh         # fewer rounds and shorter runs and no clean builds, to try the script
#   SKIP_BUILD=1 bench/all.sh    # everything but the two clean builds (about 20 minutes fewer): the
#                                # build section of the file being replaced is kept, and says so
#
# Each section is the output of one benchmark, verbatim, under the command that produced it, so a
# figure can be reproduced alone. Each benchmark takes medians of its own rounds and prints ratios
# measured in the same run (gateway vs nginx and HAProxy; AddStorage vs raw SQLite): absolute figures
# drift between machines, ratios measured side by side hold. Nothing here asserts: a benchmark prints
# figures, and the figures are read.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-BENCHMARKS.md}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

if [ "${QUICK:-}" = 1 ]; then
  export ROUNDS=1 DURATION=3 RUNS=2 BENCH_CREATES=60 BERTH_BENCH_ADDS=200
fi

section() { # title command...
  local title=$1
  shift
  echo "== $title: $*" >&2
  {
    echo "## $title"
    echo
    echo '```'
    echo "\$ $*"
    local started=$SECONDS
    "$@" 2>&1 | grep -v -E '^\s*(Compiling|Finished|Running|Downloaded|Downloading|Blocking|Updating|Locking)\b' || true
    echo "(took $((SECONDS - started)) s)"
    echo '```'
    echo
  } >>"$tmp"
}

cpu=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)
{
  echo "# Benchmarks"
  echo
  echo "Made by \`bench/all.sh\` on $(date -u +%Y-%m-%d) at commit $(git rev-parse --short HEAD)."
  echo "Machine: $(nproc) cores ($cpu), $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)" \
    "of memory, Linux $(uname -r), $(rustc --version)."
  echo "Release builds (\`[profile.release]\`: fat LTO, one codegen unit) unless a section says otherwise."
  echo
} >"$tmp"

section "Gateway: direct vs Berth vs nginx vs HAProxy" bench/gateway.sh
section "Storage: AddStorage vs raw SQLite, ListStorage pages" cargo bench -q -p storage-ops --bench storage
section "Machines: ListMachines over 10,000 instances, CreateMachine under an account QPS limit" \
  cargo bench -q -p machine-driver --bench driver
section "Memory: each service idle and at peak, and berth up" bench/footprint.sh
section "Connection memory: idle keep-alive and slow-loris connections, the gateway vs nginx" \
  bench/connections.sh
section "Start-up and shutdown of berth up" bench/startup.sh
section "Instruction counts per request through the gateway (callgrind)" bench/instructions.sh
build_title="Clean release build: what fat LTO costs and buys"
if [ "${SKIP_BUILD:-}" = 1 ] && grep -q "^## $build_title" "$out" 2>/dev/null; then
  echo "== $build_title: kept from the previous $out (SKIP_BUILD=1)" >&2
  {
    echo "## $build_title"
    echo
    echo "Not run again in this run (\`SKIP_BUILD=1\`): the section below is the one of the file this run"
    echo "replaced ($(sed -n 's/^Made by .* on \(.*\)\.$/\1/p' "$out" | head -1))."
    echo
    awk -v t="## $build_title" '$0 == t {on = 1; next} on && /^## / {exit} on' "$out" |
      sed '/^Not run again in this run/,/^$/d'
  } >>"$tmp"
elif [ "${QUICK:-}" != 1 ]; then
  section "$build_title" bench/build.sh
fi

mv "$tmp" "$out"
trap - EXIT
echo "wrote $out" >&2
