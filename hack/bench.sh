#!/usr/bin/env bash
# Benchmarks: prints one table, each row with the command that reproduces it.
#
# Usage: hack/bench.sh [--quick] [--json FILE] [--only WHAT] [--sizes N,N,...] [--repeat N]
#                     [--rounds N] [--keep-cluster]
#   --quick         the same measurements at small sizes, in a few minutes (smoke check)
#   --json FILE     also write the figures as JSON: planner_ns_per_machineset,
#                   planner_instructions_per_machineset (and _with_history),
#                   convergence_seconds, baseline_seconds, convergence_ratio,
#                   convergence_ratio_after_update_answered, rollout_cpu_seconds,
#                   first_patch_seconds, first_patch_server_seconds,
#                   first_patch_after_golden_seen_seconds,
#                   baseline_first_patch_seconds, first_patch_floor_seconds,
#                   config_map_update_seconds,
#                   critical_path_writes, rollout_events, steady_state_writes,
#                   steady_state_requests, rss_bytes, ready_seconds, list_seconds_by_count,
#                   node_flip_ms_by_count (+ details)
#   --only WHAT     one measurement: planner | convergence | steady | memory | nodes | takeover
#   --sizes N,...   MachineSet counts for --only (default: that measurement's usual sizes)
#   --repeat N      convergence runs per size (default 3), each with its own controller
#   --rounds N      rollouts of each side per convergence run (default 4), taken in turn: the
#                   plain client's fleet and the controller's, to the new stream and back, the
#                   plain client first in odd rounds and second in even ones (each turn waits
#                   until the controller has sent the Events of its last rollout, a minute at
#                   1,000). The row and JSON give the median of each figure over every round of
#                   every run, and the row lists every round's ratio and first patch: one
#                   rollout on a small machine says as much about the load of the moment as
#                   about us
#   --keep-cluster  leave the private control plane running (a later run reuses it)
#
# Measurements (full run; --quick sizes in brackets):
#   planner      plan() throughput on synthetic AWS, GCP and Azure clusters of 100, 1,000 and
#                10,000 MachineSets [100, 1,000], single thread, release build
#                (cargo bench --bench planner); with valgrind, also its instructions per
#                MachineSet at 1,000, counted by callgrind (repeatable where time is not), with
#                and without the history 4 earlier upgrades leave on every MachineSet
#   convergence  20, 100, 1,000 [20, 100] outdated MachineSets: seconds from the golden
#                ConfigMap update to all patched and BootImageUpdateProgressing=False, next to a
#                plain client sending the same JSON Patches with the same concurrency (8): the
#                planner's patches for a fleet of its own, in the same state; the first patch
#                timed from the update call, from the benchmark's watch seeing the ConfigMap
#                change, and by the API server's clock (its audit log); writes before
#                Progressing=False (the critical path); CPU of each process per rollout
#   steady       writes and API requests during 5 resync periods (5s [1s]) of a converged
#                cluster of 1,000 (and 10,000) [100] MachineSets; the JSON keys are at 1,000 [100]
#   memory       peak RSS (VmHWM) of the controller over its start and one rollout of all, and
#                time from start to /readyz 200, at 100, 1,000 and 10,000 [100, 1,000]
#                MachineSets, beside the time a plain client takes to list the same MachineSets
#                (500 a page, as the controller's watch lists)
#   nodes        2,000 and 5,000 [1,000] Nodes, each running a Machine of 100 MachineSets (the
#                sizes of the memory goals): time to /readyz 200 and to BootImagesCurrent,
#                peak RSS, and the controller's CPU per Node readiness flip (200 flips, 20 a
#                second, its idle CPU over as long subtracted; resync period 10 min, so that no
#                periodic pass falls in either window)
#   takeover     leader election with short lease timings: how long a standby takes to lead
#                after the leader is killed (lease 15 s, retry 2 s), and how long a leader whose
#                Lease calls hang keeps running (renew deadline 4 s); the figures the tests
#                tests/suite/faults.rs and leader_election_bounds.rs print, never assert
# The cluster measurements run benches/cluster.rs against a private kube-apiserver + etcd
# (BIC_CLUSTER_DIR=<repo>/.local-cluster-bench, started here and torn down on exit), so no
# other cluster is touched. Figures are printed, never asserted: wall-clock numbers depend on the
# machine and its load, which the table's header records.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
log() { echo "bench.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

quick=0 json_out="" only="" sizes_arg="" keep_cluster=0 repeat=3 rounds=4
while (($#)); do
  case "$1" in
    --quick) quick=1 ;;
    --json) json_out="${2:?--json needs a file}"; shift ;;
    --json=*) json_out="${1#--json=}" ;;
    --only) only="${2:?--only needs planner|convergence|steady|memory}"; shift ;;
    --only=*) only="${1#--only=}" ;;
    --sizes) sizes_arg="${2:?--sizes needs N,N,...}"; shift ;;
    --sizes=*) sizes_arg="${1#--sizes=}" ;;
    --repeat) repeat="${2:?--repeat needs a count}"; shift ;;
    --repeat=*) repeat="${1#--repeat=}" ;;
    --rounds) rounds="${2:?--rounds needs a count}"; shift ;;
    --rounds=*) rounds="${1#--rounds=}" ;;
    --keep-cluster) keep_cluster=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done
case "$only" in "" | planner | convergence | steady | memory | nodes | takeover) ;; *) die "--only: planner, convergence, steady, memory, nodes or takeover" ;; esac
[[ -z "$sizes_arg" || -n "$only" ]] || die "--sizes needs --only"
[[ "$repeat" =~ ^[1-9][0-9]*$ ]] || die "--repeat: a count of at least 1"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "--rounds: a count of at least 1"
[[ -z "$json_out" ]] || json_out="$(realpath -m "$json_out")"

if ((quick)); then
  planner_sizes=100,1000 planner_time=0.2
  convergence_sizes=20,100 steady_sizes=100 resync=1s memory_sizes=100,1000 node_sizes=1000
  mode_flag=" --quick"
else
  planner_sizes=100,1000,10000 planner_time=2
  convergence_sizes=20,100,1000 steady_sizes=1000,10000 resync=5s memory_sizes=100,1000,10000
  node_sizes=2000,5000
  mode_flag=""
fi
steady_periods=5 concurrency=8
if [[ -n "$sizes_arg" ]]; then
  case "$only" in
    planner) planner_sizes="$sizes_arg" ;;
    convergence) convergence_sizes="$sizes_arg" ;;
    steady) steady_sizes="$sizes_arg" ;;
    memory) memory_sizes="$sizes_arg" ;;
    nodes) node_sizes="$sizes_arg" ;;
  esac
fi
wants() { [[ -z "$only" || "$only" == "$1" ]]; }
in_list() { [[ ",$2," == *",$1,"* ]]; }

results="$repo/target/bench/results"
rm -rf "$results"
mkdir -p "$results"
rows="$results/rows.md"
: >"$rows"
failed=0
# row <measurement> <size> <figure> <command>
# shellcheck disable=SC2016 # the backquotes are Markdown
row() { printf '| %s | %s | %s | `%s` |\n' "$1" "$2" "$3" "$4" >>"$rows"; }
thousands() { sed -e ':a' -e 's/\B[0-9]\{3\}\>/,&/' -e 'ta' <<<"$1"; }
# jq definitions shared by the rows and the JSON. The median of an array of numbers (the middle
# one, or the mean of the middle two).
# A run's floor for its first patch: the ConfigMap update call, then a patch taking as long to
# be seen as the plain client's first did in the same run. Neither is the controller's doing.
jq_defs='def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def first_patch_floor: if .config_map_update_seconds == null or .baseline_first_patch_seconds == null then null
    else .config_map_update_seconds + .baseline_first_patch_seconds end;'
cmd_for() { # the hack/bench.sh command reproducing one cluster measurement
  echo "hack/bench.sh${mode_flag} --only $1 --sizes $2"
}

machine() {
  local cores mem model
  cores="$(nproc)"
  mem="$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  model="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
  echo "$cores cores (${model:-unknown CPU}), $mem RAM"
}
load_avg() { cut -d' ' -f1-3 /proc/loadavg; }
load_start="$(load_avg)"
started=$(date +%s)

# ---------------------------------------------------------------------------------------------
log "building (release)"
cargo build --release --locked --bin boot-image-controller >&2
wants planner && cargo bench --locked --bench planner --no-run >&2 2>&1
# bench_executable <name>: the path of the benchmark binary cargo built.
bench_executable() {
  cargo bench --locked --bench "$1" --no-run --message-format=json 2>/dev/null |
    jq -r --arg name "$1" 'select(.executable != null and .target.name == $name) | .executable' | tail -n 1
}
wants takeover && cargo test --locked --test suite --no-run >&2 2>&1

# instructions_in <callgrind output> <function>: the instructions a function ran, its callees
# included: its entry named with its binary (`file:function [binary]`). callgrind_annotate also
# lists the parts of the function inlined from other files (`other-file:function`), whose
# instructions that entry already counts: adding them counted the controller-style pass, whose
# planner calls are inlined, twice (20.1k instructions per AWS MachineSet where
# `--toggle-collect=planner::pass_case` counts 10.4k).
instructions_in() {
  callgrind_annotate --inclusive=yes --threshold=100 --auto=no "$1" 2>/dev/null |
    awk -v fn="$2" '$0 ~ (":" fn " \\[") { gsub(",", "", $1); sum += $1 } END { print sum + 0 }'
}

# The planner's instructions per MachineSet, counted by callgrind at 1,000 MachineSets (or the
# smallest size asked for): unlike wall-clock time on a shared machine, which moved by half between
# runs of one binary, runs of one build agree within about 1% (the hash maps' random seeds), so a
# change of a few percent shows. Skipped, with a row that says so, without valgrind.
planner_instructions() {
  local count bin platform out calls plan pass
  count=1000
  in_list "$count" "$planner_sizes" || count="${planner_sizes%%,*}"
  if ! command -v valgrind >/dev/null || ! command -v callgrind_annotate >/dev/null; then
    row "1. planner instructions" "$(thousands "$count")" "skipped: valgrind is not installed" \
      "apt-get install valgrind"
    return
  fi
  bin="$(bench_executable planner)"
  local counted=() history label
  for platform in AWS GCP Azure; do
    # Only the platforms the benchmark had data for (GCP and Azure need ../shared/fixtures).
    jq -e --arg p "$platform" 'any(.results[]; .platform == $p)' "$results/planner.json" \
      >/dev/null 2>&1 || continue
    # Also with the history several upgrades leave on every MachineSet: each decision reads its
    # newest entry, and each update writes the older ones back.
    for history in 0 4; do
      label="1. planner instructions, $platform"
      ((history == 0)) || label+=", $history earlier changes"
      out="$results/callgrind-$platform-$history"
      log "planner: counting instructions on $platform at $count, history of $history (callgrind)"
      if ! valgrind --tool=callgrind --callgrind-out-file="$out.out" "$bin" --platforms "$platform" \
        --sizes "$count" --time 0 --history "$history" --json "$out.calls" >/dev/null 2>"$out.log"; then
        failed=1
        row "$label" "$(thousands "$count")" "FAILED (see $out.log)" \
          "valgrind --tool=callgrind $bin --platforms $platform --sizes $count --time 0 --history $history"
        continue
      fi
      calls="$(jq -r '.results[0] | "\(.plan_calls) \(.pass_calls)"' "$out.calls")"
      plan=$(($(instructions_in "$out.out" planner::plan_case) / ${calls% *} / count))
      pass=$(($(instructions_in "$out.out" planner::pass_case) / ${calls#* } / count))
      row "$label" "$(thousands "$count")" \
        "$(thousands "$plan") instructions per MachineSet, controller-style pass $(thousands "$pass") (callgrind; runs of one build agree within about 1%)" \
        "valgrind --tool=callgrind target/release/deps/planner-* --platforms $platform --sizes $count --time 0 --history $history, then callgrind_annotate --inclusive=yes: planner::plan_case and planner::pass_case per call and MachineSet"
      counted+=("$(jq -n --arg p "$platform" --argjson c "$count" --argjson h "$history" \
        --argjson plan "$plan" --argjson pass "$pass" \
        '{platform: $p, count: $c, history: $h, plan: $plan, pass: $pass}')")
    done
  done
  ((${#counted[@]} == 0)) || printf '%s\n' "${counted[@]}" | jq -s '{instructions: .}' >"$results/planner-instructions.json"
}

# ---------------------------------------------------------------------------------------------
if wants planner; then
  log "planner: sizes $planner_sizes"
  if cargo bench --locked --bench planner -- --sizes "$planner_sizes" --time "$planner_time" \
    --json "$results/planner.json" >&2; then
    while IFS=$'\t' read -r platform count ns per_second pass_ns plan_allocs pass_allocs status_us mix; do
      row "1. planner, $platform" "$(thousands "$count")" \
        "$(thousands "$ns") ns/MachineSet, $(thousands "$per_second") MachineSets/s (controller-style pass: $(thousands "$pass_ns") ns/MachineSet; allocations per MachineSet: $plan_allocs, pass $pass_allocs; status after the rollout: $(thousands "$status_us") µs; $mix)" \
        "cargo bench --bench planner -- --platforms $platform --sizes $count --time $planner_time"
    done < <(jq -r '.results[] | [.platform, .count, .ns_per_machineset, .machinesets_per_second, .pass_ns_per_machineset, (.plan_allocations_per_machineset * 10 | round / 10), (.pass_allocations_per_machineset * 10 | round / 10), .status_us, .mix] | @tsv' "$results/planner.json")
  else
    failed=1
    row "1. planner" "$planner_sizes" "FAILED" "cargo bench --bench planner -- --sizes $planner_sizes"
  fi
  planner_instructions
fi

# ---------------------------------------------------------------------------------------------
cluster_needed=0
for what in convergence steady memory nodes takeover; do wants "$what" && cluster_needed=1; done
if ((cluster_needed)); then
  export BIC_CLUSTER_DIR="$repo/.local-cluster-bench"
  export BIC_BINARY="$repo/target/release/boot-image-controller"
  export BIC_CONTROLLER_BINARY="$BIC_BINARY" # the controller the tests' harness starts
  if ((keep_cluster)); then
    log "keeping the private control plane in $BIC_CLUSTER_DIR (hack/local-cluster.sh down with that BIC_CLUSTER_DIR stops it)"
  else
    trap 'BIC_CLUSTER_DIR="$BIC_CLUSTER_DIR" hack/local-cluster.sh down >&2 || true' EXIT
  fi
  log "starting the private control plane in $BIC_CLUSTER_DIR"
  KUBECONFIG="$(hack/local-cluster.sh up | tail -n 1)"
  export KUBECONFIG
  bin_dir="$(sed -n 's/^BIN_DIR=//p' "$BIC_CLUSTER_DIR/cluster.env")"
  cargo bench --locked --bench cluster --no-run >&2 2>&1
  bench_cluster=("$(bench_executable cluster)" --concurrency "$concurrency"
    --resync-period "$resync")

  # run_cluster <name> <args...>: one bench_cluster run, its JSON in $results/<name>.json.
  run_cluster() {
    local name="$1"
    shift
    log "cluster run $name: bench_cluster $*"
    if ! "${bench_cluster[@]}" "$@" >"$results/$name.json.tmp"; then
      log "cluster run $name failed"
      failed=1
      rm -f "$results/$name.json.tmp"
      return 1
    fi
    jq --arg run "$name" '. + {run: $run}' "$results/$name.json.tmp" >"$results/$name.json"
    rm -f "$results/$name.json.tmp"
  }
  # Steady state is measured at the end of a convergence or memory run of the same size when
  # there is one (the cluster is converged by then), else in a run of its own.
  declare -A steady_run=()
  steady_extra=()
  want_steady_in() { # want_steady_in <n> <run name>: sets steady_extra for that run, once per size
    steady_extra=()
    if wants steady && in_list "$1" "$steady_sizes" && [[ -z "${steady_run[$1]:-}" ]]; then
      steady_run[$1]="$2"
      steady_extra=(--steady-periods "$steady_periods")
    fi
  }
  if wants convergence; then
    repeat_flag=""
    ((repeat == 3)) || repeat_flag=" --repeat $repeat"
    ((rounds == 4)) || repeat_flag+=" --rounds $rounds"
    for n in ${convergence_sizes//,/ }; do
      runs=()
      for ((i = 1; i <= repeat; i++)); do
        name="convergence-$n"
        ((repeat == 1)) || name="convergence-$n-run$i"
        want_steady_in "$n" "$name"
        run_cluster "$name" --count "$n" --baseline --switch --rounds "$rounds" "${steady_extra[@]}" && runs+=("$results/$name.json")
      done
      if ((${#runs[@]} == repeat)); then
        # The median of each figure over every round of every run, and every round's ratio and
        # first patch, in the order they ran.
        jq -rs "$jq_defs"'
          def m(f): map(f // empty) | if length > 0 then median else "nan" end;
          def ms(f): f * 1000 | round | tostring;
          map(.rounds[])
          | [m(.convergence_seconds), m(.baseline_seconds), m(.ratio), m(.first_patch_seconds), m(.first_patch_after_golden_seen_seconds), m(.first_patch_server_seconds), m(.baseline_first_patch_seconds), m(.config_map_update_seconds), m(first_patch_floor), m(.critical_path_writes), m(.rollout_events), m(.ratio_after_update_answered), m(.cpu_seconds.controller), m(.cpu_seconds.apiserver), m(.cpu_seconds.bench), m(.baseline_cpu_seconds.apiserver), m(.baseline_cpu_seconds.bench), length, (map(.ratio * 10 | round | tostring | sub("(?<d>.)$"; ".\(.d)") | sub("^\\."; "0.") + "x") | join(", ")), (map("\(ms(.first_patch_seconds)) (\(.first_patch_server_seconds // null | if . == null then "-" else ms(.) end))") | join(", "))] | map(tostring) | join("\t")' \
          "${runs[@]}" | {
          IFS=$'\t' read -r c b r first after_seen server baseline_first update floor critical events r_answered cpu_c cpu_a cpu_b cpu_pa cpu_pb count ratios firsts
          row "2. convergence" "$(thousands "$n")" \
            "$(printf 'median of %s rollouts: %.2f s; plain client %.2f s; ratio %.2fx (first patch %.3f s after the ConfigMap update call began, against a floor of %.3f s: the call took %.3f s, and the plain client'"'"'s first patch was seen %.3f s after it sent it; %.3f s after the benchmark'"'"'s watch saw the ConfigMap change; by the API server'"'"'s clock, received %.3f s after the ConfigMap update was; %.0f writes on the critical path, %.0f Events sent before convergence was seen); ratio %.2fx from the update'"'"'s answer; CPU per rollout: controller %.3f s, API server %.3f s, benchmark %.3f s; plain client'"'"'s: API server %.3f s, benchmark (the plain client) %.3f s' "$count" "$c" "$b" "$r" "$first" "$floor" "$update" "$baseline_first" "$after_seen" "$server" "$critical" "$events" "$r_answered" "$cpu_c" "$cpu_a" "$cpu_b" "$cpu_pa" "$cpu_pb"); each rollout: ratio $ratios; first patch in ms, from the update call (by the server's clock) $firsts" \
            "$(cmd_for convergence "$n")$repeat_flag"
        }
      else
        row "2. convergence" "$(thousands "$n")" "FAILED (see target/bench/)" "$(cmd_for convergence "$n")$repeat_flag"
      fi
    done
  fi
  if wants memory; then
    for n in ${memory_sizes//,/ }; do
      want_steady_in "$n" "memory-$n"
      # One rollout of every MachineSet after the start, so the peak covers the controller's
      # busiest moment too.
      if run_cluster "memory-$n" --count "$n" --switch "${steady_extra[@]}"; then
        jq -r '"\(.rss_hwm_bytes) \(.ready_seconds) \(.list_seconds // "nan") \(.initial_convergence_seconds) \(.rounds[0].convergence_seconds)"' "$results/memory-$n.json" | {
          read -r hwm ready list initial rollout
          row "4. memory, startup" "$(thousands "$n")" \
            "$(printf 'peak RSS %.1f MiB over the start and one rollout of all %s (%.2f s); ready (/readyz 200) %.2f s after start, where a plain client lists the MachineSets in %.2f s; BootImagesCurrent reported %.2f s after start' \
              "$(jq -n "$hwm / 1048576")" "$(thousands "$n")" "$rollout" "$ready" "$list" "$initial")" \
            "$(cmd_for memory "$n")"
        }
      else
        row "4. memory, startup" "$(thousands "$n")" "FAILED (see target/bench/)" "$(cmd_for memory "$n")"
      fi
    done
  fi
  if wants steady; then
    for n in ${steady_sizes//,/ }; do
      if [[ -z "${steady_run[$n]:-}" ]]; then
        steady_run[$n]="steady-$n"
        run_cluster "steady-$n" --count "$n" --switch --steady-periods "$steady_periods" || true
      fi
      name="${steady_run[$n]}"
      if [[ -f "$results/$name.json" ]]; then
        jq -r '.steady | "\(.writes) \(.requests) \(.seconds)"' "$results/$name.json" | {
          read -r w q secs
          row "3. steady state" "$(thousands "$n")" \
            "$(printf '%.0f writes; %.0f API requests on the controller'"'"'s resources; in %s resync periods of %s = %.0f s' \
              "$w" "$q" "$steady_periods" "$resync" "$secs")" \
            "$(cmd_for steady "$n")"
        }
      else
        row "3. steady state" "$(thousands "$n")" "FAILED (see target/bench/)" "$(cmd_for steady "$n")"
      fi
    done
  fi
  if wants nodes; then
    # Without periodic passes in the windows measured (the resync period is the run's own).
    every_run=("${bench_cluster[@]}")
    bench_cluster=("${bench_cluster[0]}" --concurrency "$concurrency" --resync-period 10m)
    for n in ${node_sizes//,/ }; do
      if run_cluster "nodes-$n" --count 100 --nodes "$n" --node-flips 200; then
        jq -r '"\(.node_churn.controller_ms_per_flip) \(.ready_seconds) \(.initial_convergence_seconds) \(.rss_hwm_bytes)"' "$results/nodes-$n.json" | {
          read -r per_flip ready initial hwm
          row "6. node churn" "$(thousands "$n") Nodes" \
            "$(printf 'controller CPU per Node readiness flip %.3f ms (200 flips, 20 a second, idle CPU subtracted); ready (/readyz 200) %.2f s after start, BootImagesCurrent %.2f s; peak RSS %.1f MiB (100 MachineSets, a Machine per Node)' \
              "$per_flip" "$ready" "$initial" "$(jq -n "$hwm / 1048576")")" \
            "$(cmd_for nodes "$n")"
        }
      else
        row "6. node churn" "$(thousands "$n") Nodes" "FAILED (see target/bench/)" "$(cmd_for nodes "$n")"
      fi
    done
    bench_cluster=("${every_run[@]}")
  fi
  if wants takeover; then
    log "takeover: a killed leader, and a leader whose Lease calls hang"
    takeover_log="$results/takeover.log"
    if PATH="$bin_dir:$PATH" BIC_CONTROLLER_BINARY="$BIC_BINARY" cargo test --locked --test suite -- \
      faults::standby_takes_over_from_a_killed_leader leader_election_bounds::a_leader_whose_renewals_hang_steps_down_by_its_renew_deadline \
      --nocapture >"$takeover_log" 2>&1; then
      # The tests print Rust's Debug form of a Duration (15.987093103s, 987.1ms): one decimal.
      seconds() { awk -v d="$1" 'BEGIN { if (d ~ /ms$/) v = d / 1000; else v = d + 0; printf "%.1f s", v }'; }
      killed="$(sed -n 's/.*MEASURED: bravo took over \(.*\) after alpha was killed.*/\1/p' "$takeover_log" | tail -n 1)"
      hung="$(sed -n 's/.*MEASURED: stepped down \(.*\) after its renewals started hanging.*/\1/p' "$takeover_log" | tail -n 1)"
      [[ -z "$killed" ]] || killed="$(seconds "$killed")"
      [[ -z "$hung" ]] || hung="$(seconds "$hung")"
      row "5. leader election" "-" \
        "a standby leads ${killed:-?} after the leader is killed (lease 15 s, retry 2 s); a leader whose Lease calls hang exits ${hung:-?} after they start hanging (renew deadline 4 s)" \
        "hack/bench.sh --only takeover"
    else
      failed=1
      row "5. leader election" "-" "FAILED (see $takeover_log)" "hack/bench.sh --only takeover"
    fi
  fi
fi

# ---------------------------------------------------------------------------------------------
load_end="$(load_avg)"
fixtures="$(jq -rs 'map(.source // empty) | first // "n/a"' "$results"/*.json 2>/dev/null || echo n/a)"
{
  echo
  echo "Machine: $(machine); load average $load_start at start, $load_end at end ($(( $(date +%s) - started ))s)"
  echo "Data: $fixtures"
  echo
  echo "| measurement | MachineSets | figure | reproduce |"
  echo "|---|---|---|---|"
  sort -s -t'|' -k2.2,2.2n "$rows"
  echo
  echo "Details: the per-run JSON in $results, the controllers' logs in $repo/target/test-logs"
}

if [[ -n "$json_out" ]]; then
  jq -n \
    --arg machine "$(machine)" --arg load_start "$load_start" --arg load_end "$load_end" \
    --arg quick "$quick" --arg data "$fixtures" --arg steady_size "${steady_sizes%%,*}" \
    --slurpfile all <(jq -s '.' "$results"/*.json 2>/dev/null || echo '[]') "$jq_defs"'
    def by_count_in(runs; f): runs | map(select(f != null) | {key: (.count | tostring), value: f}) | from_entries;
    # Convergence runs repeat (--repeat): the median of the runs of each size.
    def median_by_count_in(runs; f): runs | map(select(f != null)) | group_by(.count)
      | map({key: (.[0].count | tostring), value: (map(f) | median)}) | from_entries;
    ($all[0] // []) as $runs
    | ($runs | map(select(.results)) | first // {results: []}) as $planner
    | ($runs | map(select(.instructions)) | first // {instructions: []}) as $instructions
    | ($runs | map(select((.results | not) and (.instructions | not)))) as $cluster
    # Every rollout of every convergence run, with the size of its run (memory runs roll out
    # once too, without a plain client).
    | ($cluster | map(select(.run // "" | startswith("convergence"))
        | .count as $count | (.rounds // [])[] | . + {count: $count})) as $rounds
    | ($planner.results | map(.count) | max) as $largest
    | ($cluster | map(select(.run // "" | startswith("memory")))) as $memory_runs
    | (if ($memory_runs | length) > 0 then $memory_runs else $cluster end) as $memory
    | ($cluster | map(select(.steady != null)) | (map(select(.count == ($steady_size | tonumber))) + .) | first | .steady) as $steady
    | {
      machine: $machine, load_average: {start: $load_start, end: $load_end},
      quick: ($quick == "1"), data: $data,
      planner_ns_per_machineset:
        ($planner.results | map(select(.count == $largest and .platform == "AWS")) | first | .ns_per_machineset),
      planner_ns_per_machineset_by_platform:
        ($planner.results | map(select(.count == $largest)) | map({key: .platform, value: .ns_per_machineset}) | from_entries),
      planner: $planner.results,
      planner_instructions_per_machineset:
        ($instructions.instructions | map(select(.history == 0)) | map({key: .platform, value: {count, plan, pass}}) | from_entries),
      planner_instructions_per_machineset_with_history:
        ($instructions.instructions | map(select(.history > 0)) | map({key: .platform, value: {count, history, plan, pass}}) | from_entries),
      convergence_seconds: median_by_count_in($rounds; .convergence_seconds),
      baseline_seconds: median_by_count_in($rounds; .baseline_seconds),
      convergence_ratio: median_by_count_in($rounds; .ratio),
      convergence_ratio_after_update_answered: median_by_count_in($rounds; .ratio_after_update_answered),
      # CPU seconds each process used during a rollout, the controller'"'"'s and (baseline_) the
      # plain client'"'"'s; bench is the benchmark itself: the plain client and the watches.
      rollout_cpu_seconds: ($rounds | group_by(.count) | map(. as $r | {key: (.[0].count | tostring),
        value: ([(["cpu_seconds", ""], ["baseline_cpu_seconds", "baseline_"]) as [$side, $prefix]
          | ("controller", "apiserver", "etcd", "bench") as $k
          | ($r | map(.[$side][$k] // empty)) | select(length > 0) | {key: "\($prefix)\($k)", value: median}]
          | from_entries)})
        | from_entries),
      first_patch_seconds: median_by_count_in($rounds; .first_patch_seconds),
      first_patch_after_golden_seen_seconds: median_by_count_in($rounds; .first_patch_after_golden_seen_seconds),
      first_patch_server_seconds: median_by_count_in($rounds; .first_patch_server_seconds),
      baseline_first_patch_seconds: median_by_count_in($rounds; .baseline_first_patch_seconds),
      first_patch_floor_seconds: median_by_count_in($rounds; first_patch_floor),
      config_map_update_seconds: median_by_count_in($rounds; .config_map_update_seconds),
      critical_path_writes: median_by_count_in($rounds; .critical_path_writes),
      rollout_events: median_by_count_in($rounds; .rollout_events),
      steady_state_writes: $steady.writes,
      steady_state_requests: $steady.requests,
      steady_state: $steady,
      steady_state_by_count: by_count_in($cluster; .steady),
      rss_bytes: by_count_in($memory; .rss_hwm_bytes),
      ready_seconds: ($memory | max_by(.count) | .ready_seconds),
      ready_seconds_by_count: by_count_in($memory; .ready_seconds),
      list_seconds_by_count: by_count_in($memory; .list_seconds),
      node_flip_ms_by_count: ($cluster | map(select(.run // "" | startswith("nodes")) | {key: (.nodes | tostring), value: .node_churn.controller_ms_per_flip}) | from_entries),
      runs: $cluster
    }' >"$json_out"
  log "wrote $json_out"
fi
exit "$failed"
