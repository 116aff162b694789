#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 10) and says how each fared.
#
#   fuzz/run.sh [SECONDS]
#
# CI runs `fuzz/run.sh 5`; the long suite runs it for minutes (RELIABILITY.md, "Hostile input:
# fuzzing", has the figures of a 60-second run). It needs rustup's nightly toolchain (libFuzzer's
# instrumentation) and cargo-fuzz, which it installs from crates.io when missing
# (`cargo install cargo-fuzz --locked`, into the default cargo bin). The targets are built once, in
# fuzz/target (a workspace of its own: the main workspace never builds libFuzzer), optimised, with
# debug assertions and overflow checks, without a sanitizer (the code under test is safe Rust; set
# FUZZ_SANITIZER=address to add ASan).
#
# Each target runs on a copy of its committed corpus (fuzz/corpus/<target>), so a run never rewrites
# it, with fuzz/dict/<target>.dict where there is one. The copies are kept in
# fuzz/target/run-corpus/<target>: after a long run, merge what it found into the committed corpus,
# keeping only inputs that add coverage, with
#
#   cd fuzz && cargo +nightly fuzz cmin -O -a -s none <target> corpus/<target> target/run-corpus/<target>
#
# (cmin minimises into its first directory), then review and commit the new files.
#
# A crash (a panic, a failed property, a timeout, running out of memory) fails the run: the input
# is kept under fuzz/artifacts/<target>/ and the script prints its path and how to see it
# (`cargo fuzz fmt`) and replay it. The last line is `N passed, N failed`, one count per target.
set -euo pipefail
cd "$(dirname "$0")"

seconds="${1:-10}"
case "$seconds" in
  '' | *[!0-9]*) echo "usage: fuzz/run.sh [SECONDS]" >&2; exit 2 ;;
esac
sanitizer="${FUZZ_SANITIZER:-none}"
flags=(-O -a -s "$sanitizer")
started=$(date +%s)

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz/run.sh: needs the nightly toolchain (rustup toolchain install nightly)" >&2
  exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz (cargo install cargo-fuzz --locked)"
  cargo install cargo-fuzz --locked
fi

echo "== cargo +nightly fuzz build ${flags[*]}"
cargo +nightly fuzz build "${flags[@]}"
built=$(date +%s)
echo "   built in $((built - started))s"

targets=$(cargo +nightly fuzz list)
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
  if cargo +nightly fuzz run "${flags[@]}" "$target" "$work" -- "${options[@]}" >"$log" 2>&1; then
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
      echo "   see it:     (cd fuzz && cargo +nightly fuzz fmt ${flags[*]} $target $artifact)"
      echo "   replay it:  (cd fuzz && cargo +nightly fuzz run ${flags[*]} $target $artifact)"
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
