#!/usr/bin/env bash
# The fault matrix: runs each fault test (most in tests/suite/faults.rs) on its own and prints
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

# test target (`suite`, the integration tests, or `lib`, the unit tests) | test path | fault
faults=(
  "suite|faults::apiserver_killed_mid_rollout_converges_without_double_patches|kube-apiserver SIGKILLed mid-rollout and restarted"
  "suite|faults::expired_resource_version_relists_and_converges|watch resumed with an expired resourceVersion (410 Gone)"
  "suite|faults::flaky_network_converges_without_busy_looping|latency and connection resets (TCP proxy)"
  "suite|faults::conflicting_writers_lose_nothing|another writer between our read and our write"
  "suite|faults::malformed_machine_sets_are_errors_with_a_reason_and_watches_keep_running|malformed objects from the cluster"
  "suite|faults::standby_takes_over_from_a_killed_leader|leader SIGKILLed, standby takes over"
  "suite|patch_failures::a_patch_the_api_server_rejects_as_invalid_is_reported_and_backed_off|422 storm: a patch the API server rejects as invalid"
  "suite|patch_failures::a_status_the_api_server_refuses_is_retried_with_backoff_then_written|status writes refused by the API server: retried with backoff"
  "suite|holds::a_cluster_version_without_status_holds_writes_until_it_can_be_read|unreadable ClusterVersion (no status): writes held"
  "lib|server::tests::a_client_that_never_finishes_its_headers_is_disconnected|slowloris: headers never finished"
  "lib|server::tests::connections_beyond_the_limit_are_closed_and_slots_come_back|connection flood beyond the listener's cap"
  "suite|leader_election_bounds::a_leader_whose_renewals_hang_steps_down_by_its_renew_deadline|hung API calls: a leader whose renewals never return"
  "suite|leader_election_bounds::a_leader_that_sees_another_holder_steps_down_at_once|another candidate takes the Lease from a leader"
  "suite|watch_backoff::an_unreachable_api_server_is_retried_with_backoff_and_logged_once|API server unreachable: watches back off, one warning per failure spell"
  "suite|hot_loop_whole_object_writer::a_writer_that_replaces_whole_objects_is_fought_only_up_to_the_threshold|a writer that replaces whole objects after each patch"
  "suite|faults::soak_apiserver_killed_repeatedly_during_a_large_rollout|soak: kube-apiserver killed 3 times during a 300-MachineSet rollout"
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
  rest="${entry#*|}"
  name="${rest%%|*}"
  [[ $quick == 1 && "${name##*::}" == soak_* ]] && continue
  if ((${#filters[@]})); then
    match=0
    for f in "${filters[@]}"; do [[ "$name" == *"$f"* ]] && match=1; done
    ((match)) || continue
  fi
  selected+=("$entry")
done
((${#selected[@]})) || { log "no fault matches ${filters[*]}"; exit 2; }

log "building the tests"
cargo test --locked --lib --tests --no-run >&2

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
  target="${entry%%|*}"
  rest="${entry#*|}"
  name="${rest%%|*}"
  fault="${rest#*|}"
  out="target/test-logs/faults-${name##*::}.out"
  if [[ "$target" == lib ]]; then which=(--lib); else which=(--test "$target"); fi
  log "running $name"
  started=$SECONDS
  # A renamed test matches nothing and cargo still exits 0: only a run of exactly one passes.
  if cargo test --locked "${which[@]}" -- --exact "$name" --include-ignored --nocapture >"$out" 2>&1 &&
    grep -q '^test result: ok\. 1 passed' "$out"; then
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
