#!/usr/bin/env bash
# Runs each cargo-fuzz target (fuzz/fuzz_targets/) for a while and prints, per target, the
# executions, the time and the result (a crash fails the script).
#
# Usage: hack/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  default 60
#   TARGET              default: every target (`cargo fuzz list`)
#
# Needs the nightly toolchain (rustup toolchain install nightly) and cargo-fuzz, which is
# installed from crates.io when missing. Targets are built with debug assertions (overflow
# checks included). The corpus grows in fuzz/corpus/<target>/ across runs and crash inputs land
# in fuzz/artifacts/<target>/ (both gitignored); reproduce one with
#   cd fuzz && cargo +nightly fuzz run -a <target> artifacts/<target>/<file>
# The stream target also reads the real streams in ../shared/fixtures/streams as seeds, in
# place, when they are there.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { echo "fuzz.sh: $*" >&2; }

seconds="${1:-60}"
[[ "$seconds" =~ ^[0-9]+$ ]] || { log "usage: $0 [SECONDS_PER_TARGET] [TARGET...]"; exit 2; }
shift || true

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  log "installing the nightly toolchain"
  rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  log "installing cargo-fuzz"
  cargo install cargo-fuzz
fi

cd "$repo/fuzz"
targets=("$@")
if ((${#targets[@]} == 0)); then
  mapfile -t targets < <(cargo +nightly fuzz list)
fi

log "building ${targets[*]}"
for target in "${targets[@]}"; do
  cargo +nightly fuzz build --debug-assertions "$target" >&2
done

shared_streams="$repo/../shared/fixtures/streams"
logs="$repo/fuzz/logs"
mkdir -p "$logs"
rows=()
failed=0
for target in "${targets[@]}"; do
  corpus=("corpus/$target")
  mkdir -p "corpus/$target"
  if [[ "$target" == stream && -d "$shared_streams" ]]; then
    corpus+=("$shared_streams")
  fi
  log "running $target for ${seconds}s"
  started=$SECONDS
  result=ok
  if ! cargo +nightly fuzz run --debug-assertions "$target" "${corpus[@]}" -- \
    -max_total_time="$seconds" -timeout=10 -print_final_stats=1 >"$logs/$target.log" 2>&1; then
    result="CRASH (see fuzz/logs/$target.log, fuzz/artifacts/$target/)"
    failed=1
  fi
  elapsed=$((SECONDS - started))
  stat() { sed -n "s/^stat::$1: *//p" "$logs/$target.log" | tail -n1; }
  executions="$(stat number_of_executed_units)"
  rows+=("$(printf '%-16s %14s %9s %10s %8s  %s' "$target" "${executions:-?}" "${elapsed}s" \
    "$(stat average_exec_per_sec)" "$(find "corpus/$target" -type f | wc -l)" "$result")")
done

printf '%-16s %14s %9s %10s %8s  %s\n' TARGET EXECUTIONS TIME EXEC/S CORPUS RESULT
printf '%s\n' "${rows[@]}"
exit "$failed"
