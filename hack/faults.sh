#!/usr/bin/env bash
# The fault matrix (issue 6): runs each fault test of tests/faults.rs on its own and prints
# PASS or FAIL per fault, with its duration. CI runs the same tests inside `cargo test`; this
# script is for running them one at a time, reading their logs, and for the slow soak variants
# (ignored in CI, included here).
#
# Usage: hack/faults.sh [--quick] [FILTER...]
#   --quick  leave out the soak variants
#   FILTER   run only faults whose test name contains one of these words
#
# Faults that kill or restart kube-apiserver start private control planes themselves
# (.local-cluster-faults-*). The others need a cluster: the one KUBECONFIG names, else a private
# one this script starts in .local-cluster-faults-shared and stops at the end. Per-fault output:
# target/test-logs/faults-<test>.out; controller logs: target/test-logs/faults-*.log.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
log() { echo "faults.sh: $*" >&2; }

# test name | fault
faults=(
  "apiserver_killed_mid_rollout_converges_without_double_patches|kube-apiserver SIGKILLed mid-rollout and restarted"
  "expired_resource_version_relists_and_converges|watch resumed with an expired resourceVersion (410 Gone)"
  "flaky_network_converges_without_busy_looping|latency and connection resets (TCP proxy)"
  "conflicting_writers_lose_nothing|another writer between our read and our write"
  "malformed_objects_are_reported_and_watches_keep_running|malformed objects from the cluster"
  "standby_takes_over_from_a_killed_leader|leader SIGKILLed, standby takes over"
  "soak_apiserver_killed_repeatedly_during_a_large_rollout|soak: kube-apiserver killed 3 times during a 300-MachineSet rollout"
)

quick=0
filters=()
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -h | --help) sed -n '2,16p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) filters+=("$arg") ;;
  esac
done

selected=()
for entry in "${faults[@]}"; do
  name="${entry%%|*}"
  [[ $quick == 1 && "$name" == soak_* ]] && continue
  if ((${#filters[@]})); then
    match=0
    for f in "${filters[@]}"; do [[ "$name" == *"$f"* ]] && match=1; done
    ((match)) || continue
  fi
  selected+=("$entry")
done
((${#selected[@]})) || { log "no fault matches ${filters[*]}"; exit 2; }

log "building the tests"
cargo test --locked --test faults --no-run >&2

if [[ -z "${KUBECONFIG:-}" ]]; then
  # Named on every call, never exported: a `down` that fell back to the default directory
  # would stop the developer's own cluster.
  own_cluster="$repo/.local-cluster-faults-shared"
  cargo build --locked --bin boot-image-controller >&2
  trap 'BIC_CLUSTER_DIR="$own_cluster" hack/local-cluster.sh down >&2 || true' EXIT
  KUBECONFIG="$(BIC_CLUSTER_DIR="$own_cluster" BIC_BINARY="$repo/target/debug/boot-image-controller" \
    hack/local-cluster.sh up | tail -n 1)"
  export KUBECONFIG
fi

mkdir -p target/test-logs
results=()
failed=0
for entry in "${selected[@]}"; do
  name="${entry%%|*}"
  fault="${entry#*|}"
  out="target/test-logs/faults-$name.out"
  log "running $name"
  started=$SECONDS
  if cargo test --locked --test faults -- --exact "$name" --include-ignored --nocapture >"$out" 2>&1; then
    verdict=PASS
  else
    verdict=FAIL
    failed=1
  fi
  results+=("$(printf '%-4s %4ss  %s  (%s)' "$verdict" "$((SECONDS - started))" "$fault" "$out")")
done

echo
printf '%s\n' "${results[@]}"
exit "$failed"
