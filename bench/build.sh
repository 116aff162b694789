#!/usr/bin/env bash
# What fat LTO costs and buys: a clean release build of every binary, timed, with the release profile
# as it is (fat LTO, one codegen unit) and with thin LTO over 16 codegen units, each in a target
# directory of its own (so neither reuses the other's work, nor the everyday target/); then the sizes
# of the binaries, and the gateway of each build side by side in bench/gateway.sh (the proxy's CPU per
# call is what LTO is for: see `[profile.release]` in Cargo.toml).
#
#   bench/build.sh                    # two clean builds (about 8 minutes each on 2 cores), then the gateway
#   GATEWAY_ROUNDS=0 bench/build.sh   # the builds and sizes only
#
# Tests and everyday `cargo run` use the dev profile, which has no LTO: only `--release` pays for it.
# The directories are removed afterwards unless KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
root=${BUILD_BENCH_DIR:-target/bench-build}
rounds=${GATEWAY_ROUNDS:-3}
bins=(gateway machine-driver orchestrator-registry storage-ops ecs-emulator berth)

build() { # name, then extra cargo arguments
  local name=$1
  shift
  rm -rf "${root:?}/$name"
  local started=$SECONDS
  CARGO_TARGET_DIR="$root/$name" cargo build -q --release --workspace --bins "$@"
  echo $((SECONDS - started))
}

echo "== clean release builds of the workspace's binaries, on $(nproc) cores"
fat=$(build fat)
thin=$(build thin --config 'profile.release.lto="thin"' --config 'profile.release.codegen-units=16')
printf '%-40s %10s\n' profile "wall time"
printf '%-40s %8d s\n' "release: fat LTO, 1 codegen unit" "$fat"
printf '%-40s %8d s\n' "thin LTO, 16 codegen units" "$thin"
echo
printf '%-24s %14s %14s\n' binary "fat (bytes)" "thin (bytes)"
for bin in "${bins[@]}"; do
  printf '%-24s %14d %14d\n' "$bin" "$(stat -c %s "$root/fat/release/$bin")" "$(stat -c %s "$root/thin/release/$bin")"
done

if [ "$rounds" != 0 ]; then
  echo
  echo "== the gateway of each build, side by side (\"berth gateway\" is the fat build, \"compared\" the thin one)"
  BERTH_BENCH_BIN_DIR="$root/fat/release" BERTH_BENCH_SKIP_BUILD=1 COMPARE_GATEWAY="$root/thin/release/gateway" \
    ROUNDS=$rounds DURATION=${DURATION:-5} MANY_CONNECTIONS=0 bench/gateway.sh
fi

if [ "${KEEP:-}" != 1 ]; then
  rm -rf "${root:?}/fat" "${root:?}/thin"
fi
