#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 10) and says how each fared.
#
#   fuzz/run.sh [--build-only] [SECONDS]
#
# CI's short form runs `FUZZ_PROFILE=dev fuzz/run.sh 5`; the long suite runs it for minutes, optimised
# (RELIABILITY.md, "Hostile input: fuzzing", has the figures). It needs rustup's nightly toolchain
# (libFuzzer's instrumentation). The targets are built by cargo itself with the instrumentation
# cargo-fuzz gives them (SanitizerCoverage's inline 8-bit counters, PC table and compare tracing,
# `--cfg fuzzing`, debug assertions and overflow checks), so no cargo-fuzz has to be installed first
# (its cold install was 136 s of CI's time), in fuzz/target (a workspace of its own: the main
# workspace never builds libFuzzer), without a sanitizer (the code under test is safe Rust; set
# FUZZ_SANITIZER=address to add ASan).
#
# FUZZ_PROFILE: `release` (default: optimised, as `cargo fuzz run -O`) or `dev` (unoptimised: its cold
# build took 225 s where the optimised one took 624 s; slower runs, which a few seconds a target do
# not miss).
#
# Each target runs on a copy of its committed corpus (fuzz/corpus/<target>), so a run never rewrites
# it, with fuzz/dict/<target>.dict where there is one. The copies are kept in
# fuzz/target/run-corpus/<target>: after a long run, merge what it found into the committed corpus,
# keeping only inputs that add coverage, with cargo-fuzz (`cargo install cargo-fuzz`)
#
#   cd fuzz && cargo +nightly fuzz cmin -O -a -s none <target> corpus/<target> target/run-corpus/<target>
#
# (cmin minimises into its first directory), then review and commit the new files.
#
# A crash (a panic, a failed property, a timeout, running out of memory) fails the run: the input
# is kept under fuzz/artifacts/<target>/ and the script prints its path and how to replay it (the
# target's binary with the input as its argument). The last line is `N passed, N failed`, one count
# per target.
set -euo pipefail
cd "$(dirname "$0")"

# --build-only: build the targets and stop (.ci/run builds them early, in the background, so the
# reliability suite's run finds them built).
build_only=0
if [ "${1:-}" = --build-only ]; then
  build_only=1
  shift
fi
seconds="${1:-10}"
case "$seconds" in
  '' | *[!0-9]*) echo "usage: fuzz/run.sh [--build-only] [SECONDS]" >&2; exit 2 ;;
esac
sanitizer="${FUZZ_SANITIZER:-none}"
profile="${FUZZ_PROFILE:-release}"
case "$profile" in
  release) profile_flag=(--release) ;;
  dev) profile_flag=() ; ;;
  *) echo "fuzz/run.sh: FUZZ_PROFILE must be release or dev" >&2; exit 2 ;;
esac
started=$(date +%s)

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz/run.sh: needs the nightly toolchain (rustup toolchain install nightly)" >&2
  exit 2
fi

# cargo-fuzz's instrumentation, given to cargo directly. An explicit --target keeps these flags off
# build scripts and proc macros, as cargo-fuzz does.
host=$(rustc +nightly -vV | sed -n 's/^host: //p')
rustflags="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
rustflags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table"
rustflags+=" -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
if [ "$sanitizer" != none ]; then
  rustflags+=" -Zsanitizer=$sanitizer"
fi
# Its own target directory (FUZZ_TARGET_DIR, default fuzz/target), whatever CARGO_TARGET_DIR says:
# these flags must not meet the main workspace's builds.
target_dir="${FUZZ_TARGET_DIR:-$PWD/target}"
echo "== cargo +nightly build --target $host ${profile_flag[*]} (the fuzz targets, $profile, instrumented)"
RUSTFLAGS="$rustflags" CARGO_TARGET_DIR="$target_dir" \
  cargo +nightly build --target "$host" "${profile_flag[@]}" --bins
built=$(date +%s)
echo "   built in $((built - started))s"
if [ "$build_only" = 1 ]; then
  exit 0
fi
case "$profile" in
  release) bin_dir="$target_dir/$host/release" ;;
  dev) bin_dir="$target_dir/$host/debug" ;;
esac

targets=$(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^berth-fuzz$')
passed=0
failed=0
summary=()
for target in $targets; do
  work="target/run-corpus/$target"
  rm -rf "$work"
  mkdir -p "$work" "artifacts/$target"
  if [ -d "corpus/$target" ]; then
    cp -R "corpus/$target/." "$work/"
  fi
  options=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
  if [ -f "dict/$target.dict" ]; then
    options+=(-dict="dict/$target.dict")
  fi
  log="target/run-$target.log"
  echo "== $target: ${seconds}s on a copy of corpus/$target ($(find "$work" -type f | wc -l) inputs)"
  if "$bin_dir/$target" "${options[@]}" -artifact_prefix="artifacts/$target/" "$work" >"$log" 2>&1; then
    passed=$((passed + 1))
    stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    line="$target: passed, $(stat number_of_executed_units) runs, $(stat average_exec_per_sec) exec/s, coverage ${cov:-?}, corpus $(find "$work" -type f | wc -l) inputs, peak RSS $(stat peak_rss_mb) MB"
  else
    failed=$((failed + 1))
    artifact=$(grep -o "artifacts/$target/[^ ]*" "$log" | tail -1 || true)
    line="$target: FAILED"
    tail -n 40 "$log"
    if [ -n "$artifact" ]; then
      echo "   crashing input: fuzz/$artifact"
      echo "   replay it:  $bin_dir/$target fuzz/$artifact"
      echo "   see it:     (cd fuzz && cargo +nightly fuzz fmt -a -s none $target $artifact), with cargo-fuzz installed"
    fi
    echo "   full log: fuzz/$log"
  fi
  echo "   $line"
  summary+=("$line")
done

echo "== fuzzing summary ($((($(date +%s) - started)))s in all, ${seconds}s a target)"
for line in "${summary[@]}"; do
  echo "   $line"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
