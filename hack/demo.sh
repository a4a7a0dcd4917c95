#!/usr/bin/env bash
# The demo: a simulated OpenShift-on-AWS cluster on a private local control plane, the
# controller bringing its MachineSets' boot images up to date, then an upgrade from 4.20.0 to
# 4.21.0 rolled out. One command; it finishes by itself and leaves nothing running.
#
# Usage: hack/demo.sh [--transcript FILE]
#
# --transcript FILE: also write the demo's output (without colours) into FILE, between the lines
#   `<!-- transcript: begin ... -->` and `<!-- transcript: end -->`, replacing what was there:
#   `hack/demo.sh --transcript docs/demo.md` regenerates the transcript in the docs. FILE is only
#   written when the demo succeeds.
#
# What it does, in order:
#   1. builds the controller (debug profile: the same artifacts `cargo test` and hack/test.sh
#      use, so it is usually built already; a release build would recompile every dependency
#      for a controller that handles seven objects here) and the control plane binaries
#      (cached after the first run, see hack/build-control-plane.sh);
#   2. starts its own etcd + kube-apiserver in <repo>/.local-cluster-demo (never the one of a
#      developer, <repo>/.local-cluster, nor the tests');
#   3. creates the cluster objects from demo/ and tests/testdata/aws-cluster/;
#   4. shows what `boot-image-controller plan` would change;
#   5. runs the controller and shows the result: MachineSets, conditions, Events;
#   6. upgrades the simulated cluster to 4.21.0 and shows the rollout;
#   7. shows a few metrics;
#   8. shows what `plan` says of a vSphere cluster (manifests only);
#   9. stops the controller (SIGTERM) and tears everything down.
#
# Environment:
#   BIC_DEMO_TIMEOUT    seconds to wait for each convergence (default 60)
#   BIC_DEMO_KEEP_LOGS  1 = copy the controller and API server logs to a temporary folder at
#                       the end (they are always kept when the demo fails)
#   BIC_SHARED_DIR      upstream data; its fixtures/crds/ are installed when present (see
#                       hack/local-cluster.sh), otherwise the project's own CRDs
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# --transcript: run the demo itself (output uncoloured, as it is not a terminal), then splice its
# output into the file between the markers.
if [[ "${1:-}" == --transcript ]]; then
  file="${2:?usage: hack/demo.sh [--transcript FILE]}"
  grep -q '^<!-- transcript: begin' "$file" && grep -q '^<!-- transcript: end' "$file" ||
    { echo "demo: $file has no '<!-- transcript: begin' and '<!-- transcript: end' lines" >&2; exit 2; }
  output="$(mktemp "${TMPDIR:-/tmp}/boot-image-controller-demo-transcript.XXXXXX")"
  trap 'rm -f "$output" "$output.new"' EXIT
  NO_COLOR=1 "$repo/hack/demo.sh" | tee "$output"
  awk -v transcript="$output" '
    /^<!-- transcript: begin/ { print; print "```text"; while ((getline line < transcript) > 0) print line; print "```"; skip = 1; next }
    /^<!-- transcript: end/ { skip = 0 }
    !skip { print }
  ' "$file" >"$output.new"
  cat "$output.new" >"$file"
  echo "demo: transcript written to $file" >&2
  exit 0
fi
(($# == 0)) || { echo "usage: hack/demo.sh [--transcript FILE]" >&2; exit 2; }

if [[ -z "${EPOCHREALTIME:-}" ]]; then
  echo "demo: needs bash >= 5 (for EPOCHREALTIME); this is bash $BASH_VERSION" >&2
  exit 1
fi

cd "$repo"

export BIC_CLUSTER_DIR="$repo/.local-cluster-demo"
state="$BIC_CLUSTER_DIR/demo" # our own files, removed with the cluster by `down`
timeout="${BIC_DEMO_TIMEOUT:-60}"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
bin="$target_dir/debug/boot-image-controller"
export BIC_BINARY="$bin" # `local-cluster.sh up` prints the project's CRDs with it

fixtures="demo"
testdata="tests/testdata/aws-cluster"
mapi_ns="openshift-machine-api"
mco_ns="openshift-machine-config-operator"
known_images_file="$fixtures/known-images.txt"

started="$EPOCHREALTIME"
step="starting"
controller_pid=""
up_log="$(mktemp "${TMPDIR:-/tmp}/boot-image-controller-demo-up.XXXXXX")"

# ---------------------------------------------------------------------------------------------
# Output

if [[ -t 1 && -z "${NO_COLOR:-}" ]]; then
  bold=$'\e[1m' dim=$'\e[2m' red=$'\e[31m' green=$'\e[32m' reset=$'\e[0m'
else
  bold="" dim="" red="" green="" reset=""
fi

section() {
  step="$1"
  printf '\n%s== %s%s  %s(%s)%s\n' "$bold" "$1" "$reset" "$dim" "$(since "$started")" "$reset"
}
say() { printf '%s\n' "$*" | fold -s -w 96 | sed 's/ *$//; s/^/   /'; }
# shown <command...>: prints a command the way a person would type it.
shown() { printf '   %s$ %s%s\n' "$dim" "$*" "$reset"; }
indent() { sed 's/^/     /; s/ *$//'; }
die() {
  printf '\n%sdemo: error: %s%s\n' "$red" "$*" "$reset" >&2
  exit 1
}
# rel <path>: the path relative to the repository, for messages.
rel() { printf '%s\n' "${1#"$repo"/}"; }
# hide_paths: the checkout's path as <checkout> and the home folder as ~ in tool output, so that
# the transcript (docs/demo.md) shows no path of the machine that wrote it.
hide_paths() {
  local home="${HOME:-}"
  [[ "$home" == / ]] && home=""
  sed -u -e "s|$repo|<checkout>|g" ${home:+-e "s|$home/|~/|g"}
}
# since <epoch-realtime>: seconds elapsed, one decimal.
since() {
  local start="${1/[.,]/}" now="${EPOCHREALTIME/[.,]/}"
  local tenths=$(((now - start) / 100000))
  printf '%d.%d s' $((tenths / 10)) $((tenths % 10))
}

# ---------------------------------------------------------------------------------------------
# Cleanup: on every exit, stop the controller and tear the control plane down.

stop_controller() {
  [[ -n "$controller_pid" ]] || return 0
  local pid="$controller_pid" i
  controller_pid=""
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 150; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "demo: the controller did not exit 15 s after SIGTERM; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

# keep_logs <why>: copies the logs out of the state directory before it is removed.
keep_logs() {
  local dir
  dir="$(mktemp -d "${TMPDIR:-/tmp}/boot-image-controller-demo-logs.XXXXXX")"
  cp "$up_log" "$dir/local-cluster-up.log" 2>/dev/null || true
  cp "$state/controller.log" "$dir/" 2>/dev/null || true
  cp "$BIC_CLUSTER_DIR/kube-apiserver.log" "$BIC_CLUSTER_DIR/etcd.log" "$dir/" 2>/dev/null || true
  echo "demo: $1 $dir: $(cd "$dir" && echo *)" >&2
}

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  stop_controller
  if ((status == 130 || status == 143)); then
    printf '\n%sdemo: interrupted during "%s"; cleaning up%s\n' "$red" "$step" "$reset" >&2
    keep_logs "logs kept in"
  elif ((status != 0)); then
    printf '\n%sdemo: failed during "%s" (exit status %d)%s\n' "$red" "$step" "$status" "$reset" >&2
    keep_logs "logs kept in"
  elif [[ "${BIC_DEMO_KEEP_LOGS:-}" == 1 ]]; then
    keep_logs "logs copied to"
  fi
  if [[ -d "$BIC_CLUSTER_DIR" ]]; then
    hack/local-cluster.sh down >>"$up_log" 2>&1 || echo "demo: 'hack/local-cluster.sh down' failed; see $up_log" >&2
  fi
  rm -f "$up_log"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------------------------
# Helpers

# free_port: a TCP port on 127.0.0.1 nobody listens on.
free_port() {
  if command -v python3 >/dev/null; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
    return
  fi
  local port
  while :; do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
}

apply() { kubectl apply --server-side --field-manager=demo "$@" >/dev/null; }
apply_status() { kubectl apply --server-side --field-manager=demo --subresource=status "$@" >/dev/null; }

# dump <dir>: the cluster objects the controller reads, as `kubectl get -o yaml` prints them.
dump() {
  rm -rf "$1"
  mkdir -p "$1"
  kubectl get infrastructure/cluster clusterversion/version machineconfiguration/cluster -o yaml >"$1/cluster.yaml"
  # The control-plane Nodes say the architecture of MachineSets that do not declare theirs.
  kubectl get nodes -l node-role.kubernetes.io/master -o yaml >"$1/nodes.yaml"
  kubectl get configmaps -n "$mco_ns" -o yaml >"$1/$mco_ns.yaml"
  kubectl get machinesets.machine.openshift.io,secrets -n "$mapi_ns" -o yaml >"$1/$mapi_ns.yaml"
}

plan() { "$bin" plan --known-images-file "$known_images_file" -f "$@"; }

machine_sets() {
  kubectl get machinesets.machine.openshift.io -n "$mapi_ns" --sort-by=.metadata.name "$@"
}

# snapshot: "name ami secret" per MachineSet.
snapshot() {
  machine_sets --no-headers -o custom-columns='N:.metadata.name,A:.spec.template.spec.providerSpec.value.ami.id,S:.spec.template.spec.providerSpec.value.userDataSecret.name'
}

resource_versions() { machine_sets -o jsonpath='{range .items[*]}{.metadata.resourceVersion} {end}'; }

# condition <type>: "status reason" of our condition on the MachineConfiguration.
condition() {
  kubectl get machineconfiguration cluster \
    -o "jsonpath={.status.conditions[?(@.type==\"$1\")].status} {.status.conditions[?(@.type==\"$1\")].reason}"
}

# show_conditions [type]: our conditions (or the one of that type) with wrapped messages.
show_conditions() {
  local type status reason message
  while IFS=$'\t' read -r type status reason message; do
    [[ -z "${1:-}" || "$type" == "$1" ]] || continue
    printf '     %-28s %-6s %s\n' "$type" "$status" "$reason"
    printf '%s\n' "$message" | fold -s -w 88 | sed 's/ *$//; s/^/         /'
  done < <(kubectl get machineconfiguration cluster \
    -o jsonpath='{range .status.conditions[*]}{.type}{"\t"}{.status}{"\t"}{.reason}{"\t"}{.message}{"\n"}{end}')
}

# show_events [skip]: Events on the MachineSets, oldest first, after the first <skip>.
show_events() {
  local name type reason note
  while IFS=$'\t' read -r name type reason note; do
    printf '     %-36s %s/%s\n' "$name" "$type" "$reason"
    printf '%s\n' "$note" | fold -s -w 88 | sed 's/ *$//; s/^/         /'
  done < <(event_lines | tail -n +"$((${1:-0} + 1))")
}
event_lines() {
  kubectl get events.events.k8s.io -n "$mapi_ns" --sort-by=.eventTime \
    -o jsonpath='{range .items[*]}{.regarding.name}{"\t"}{.type}{"\t"}{.reason}{"\t"}{.note}{"\n"}{end}'
}
event_count() { event_lines | grep -c . || true; }

metrics() { curl -fsS --max-time 5 "http://127.0.0.1:$metrics_port/metrics"; }

sees_golden_421() {
  [[ "$(metrics)" == *'boot_image_controller_golden_stream_info{release="4.21.0",stream="rhcos-4.21"} 1'* ]]
}
reports_upgrading() {
  [[ "$(condition BootImageUpdateProgressing)" == "False ClusterUpgrading" ]]
}

controller_alive() {
  [[ -n "$controller_pid" ]] && kill -0 "$controller_pid" 2>/dev/null
}

controller_died() {
  echo "     last lines of the controller log:" >&2
  tail -n 15 "$state/controller.log" | indent >&2
  die "the controller exited unexpectedly"
}

# converged: the plan of the live cluster has nothing left to do and the controller says so.
converged() {
  dump "$state/live"
  local summary
  summary="$(plan "$state/live" | tail -n 1)"
  [[ "$summary" =~ ^Summary:\ 0\ Update,.*\ 0\ Error ]] &&
    [[ "$(condition BootImageUpdateProgressing)" == "False BootImagesCurrent" ]] &&
    [[ "$(condition BootImageUpdateDegraded)" == "False AsExpected" ]]
}

# expect_summary <dir> <summary>: the plan of a dump must end with this summary (the fixtures
# are fixed, so the outcome is known: a regression must fail the demo, not pass quietly).
expect_summary() {
  local got
  got="$(plan "$1" | tail -n 1)"
  [[ "$got" == "Summary: $2" ]] || die "expected the plan to say \"Summary: $2\", it says \"$got\""
}

# watch_rollout <since>: prints each MachineSet change as it is seen, until converged.
watch_rollout() {
  local t0="$1" deadline=$((SECONDS + timeout))
  local -A before=()
  local name ami secret
  while read -r name ami secret; do before[$name]="$ami $secret"; done <<<"$initial_snapshot"
  while :; do
    controller_alive || controller_died
    print_changes
    if converged; then
      print_changes # anything that happened during the check
      return 0
    fi
    if ((SECONDS >= deadline)); then
      echo "     the plan of the live cluster is still:" >&2
      plan "$state/live" | indent >&2
      echo "     conditions:" >&2
      show_conditions >&2
      die "the controller did not converge within ${timeout}s (BIC_DEMO_TIMEOUT)"
    fi
    sleep 0.1
  done
}

# print_changes: the MachineSets that differ from `before` (of watch_rollout), with the time.
print_changes() {
  local name ami secret old_ami old_secret change
  while read -r name ami secret; do
    [[ "${before[$name]:-}" == "$ami $secret" ]] && continue
    read -r old_ami old_secret <<<"${before[$name]:-- -}"
    change=""
    [[ "$old_ami" != "$ami" ]] && change+="$old_ami -> $ami"
    [[ "$old_secret" != "$secret" ]] && change+="${change:+, }$old_secret -> $secret"
    printf '     seen at +%-7s %-36s %s\n' "$(since "$t0")" "$name" "$change"
    before[$name]="$ami $secret"
  done < <(snapshot)
}

# patch_latency <since>: seconds from <since> to the newest Event, which the controller writes
# right after each patch (milliseconds, from the Event's microsecond eventTime).
patch_latency() {
  local last ms start="${1/[.,]/}"
  last="$(kubectl get events.events.k8s.io -n "$mapi_ns" --sort-by=.eventTime \
    -o jsonpath='{range .items[*]}{.eventTime}{"\n"}{end}' | tail -n 1)"
  ms=$(($(date -d "$last" +%s%3N) - start / 1000))
  printf '%d.%03d s' $((ms / 1000)) $((ms % 1000))
}

# wait_for <description> <command...>: polls the command until it succeeds.
wait_for() {
  local what="$1" deadline=$((SECONDS + timeout))
  shift
  until "$@"; do
    controller_alive || controller_died
    ((SECONDS < deadline)) || die "timed out after ${timeout}s (BIC_DEMO_TIMEOUT) waiting for $what"
    sleep 0.2
  done
}

# ---------------------------------------------------------------------------------------------

printf '%sboot-image-controller demo%s\n' "$bold" "$reset"
say "A simulated OpenShift 4.20 cluster on AWS, on a throwaway local control plane. The controller" \
  "brings its MachineSets' boot images up to date, then the cluster is upgraded to 4.21 and the" \
  "controller rolls the new images out. Everything is torn down at the end."
say "No Machine Config Operator is simulated: on a real 4.20 or 4.21 AWS cluster the MCO's own" \
  "boot image controller manages these MachineSets and this controller stands down (README," \
  "\"Will it act on my cluster?\"). Here nothing else manages them, so it acts, as it does on the" \
  "releases and platforms where the MCO does not."

command -v cargo >/dev/null || die "cargo is required (Rust, via rustup)"
command -v curl >/dev/null ||
  die "curl is required: the demo reads the controller's /readyz and /metrics with it (install it, e.g. dnf install curl or apt-get install curl)"

section "1/9 Build"
if [[ -d "$BIC_CLUSTER_DIR" ]]; then
  say "A previous demo did not finish cleanly; removing its leftovers in $(rel "$BIC_CLUSTER_DIR")."
  if pid="$(cat "$state/controller.pid" 2>/dev/null)" && [[ "$pid" =~ ^[0-9]+$ ]] &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--kubeconfig $BIC_CLUSTER_DIR/"; then
    kill -TERM "$pid" 2>/dev/null || true
  fi
  hack/local-cluster.sh down >>"$up_log" 2>&1
fi
say "The controller, debug profile (shared with the tests, so usually already built):"
shown "cargo build --locked --bin boot-image-controller"
cargo build --locked --bin boot-image-controller 2>&1 | hide_paths | sed 's/^ */     /'
say "The control plane (kube-apiserver, etcd), built from Go modules on the first run only," \
  "about 8 minutes on 2 cores:"
hack/build-control-plane.sh 2>&1 >/dev/null | hide_paths |
  sed -u -e '/using cached/d' -e 's/^build-control-plane: /     /'

section "2/9 A private control plane"
t="$EPOCHREALTIME"
if ! kubeconfig="$(hack/local-cluster.sh up 2>"$up_log" | tail -n 1)" || [[ ! -f "$kubeconfig" ]]; then
  tail -n 20 "$up_log" | indent >&2
  die "hack/local-cluster.sh up failed"
fi
eval "$(hack/local-cluster.sh env)" # KUBECONFIG, and PATH with kubectl
mkdir -p "$state"
say "etcd + kube-apiserver on 127.0.0.1, state in $(rel "$BIC_CLUSTER_DIR")/ (ready in $(since "$t"))."
say "$(sed -n 's/^API_URL=/API server: /p' "$BIC_CLUSTER_DIR/cluster.env"); kubeconfig $(rel "$kubeconfig")"
if grep -q "installing upstream CRDs" "$up_log"; then
  say "CRDs: the upstream OpenShift ones (from \$BIC_SHARED_DIR/fixtures/crds)."
else
  say "CRDs: the project's own (boot-image-controller crds)."
fi

section "3/9 A simulated OpenShift 4.20 cluster on AWS"
say "Created from $fixtures/ and $testdata/ (real formats, real image ids):"
apply -f "$testdata/infrastructure.yaml"
apply_status -f "$testdata/infrastructure.yaml"
apply -f "$fixtures/clusterversion-4.20.yaml"
apply_status -f "$fixtures/clusterversion-4.20.yaml"
apply -f "$testdata/machineconfiguration.yaml"
apply -f "$fixtures/coreos-bootimages-4.20.yaml"
apply -f "$testdata/secrets.yaml"
apply -f "$testdata/nodes.yaml"
apply -f "$fixtures/machinesets.yaml"
apply_status -f "$fixtures/machinesets.yaml"
cat <<EOF | indent
Infrastructure/cluster        AWS, us-east-1, infrastructure name demo-abc12
ClusterVersion/version        4.20.0 Completed (installed at 4.16.0, updated through 4.17, 4.18, 4.19)
MachineConfiguration/cluster  no managedBootImages: the AWS default, every MachineSet is managed
ConfigMap coreos-bootimages   the golden images of 4.20.0: stream rhcos-4.20, 9.6.20250826-1
                              (namespace $mco_ns)
Secret worker-user-data       the installer's stub (Ignition 2.2.0), never refreshed: upgraded in
                              place to 3.2.0 when a MachineSet using it moves to a new image
Secret worker-user-data-managed
                              the Machine Config Operator's stub (Ignition 3.2.0), kept current
MachineSets in $mapi_ns:
EOF
machine_sets -o custom-columns='NAME:.metadata.name,AMI:.spec.template.spec.providerSpec.value.ami.id,STUB SECRET:.spec.template.spec.providerSpec.value.userDataSecret.name,ARCH LABEL:.metadata.annotations.capacity\.cluster-autoscaler\.kubernetes\.io/labels,OWNER:.metadata.ownerReferences[*].kind,HIVE POOL:.metadata.labels.hive\.openshift\.io/machine-pool,OPT-OUT:.metadata.annotations.boot-image-controller\.io/boot-image-updates' |
  sed 's/<none>/  -   /g' | indent

section "4/9 Before: what the controller would change"
say "\`plan\` runs the controller's decision on manifest files, without touching the cluster. Here:" \
  "\`kubectl get -o yaml\` of the objects above, dumped to $(rel "$state/before")/. The 4.16 AMIs" \
  "are known CoreOS images from the list of every RHCOS AMI since 4.12 that the binary ships;" \
  "$known_images_file shows how to add AMIs it does not know. Other AMIs are custom images" \
  "and are left alone."
dump "$state/before"
shown "boot-image-controller plan -f $(rel "$state/before") --known-images-file $known_images_file"
plan "$state/before" | indent
expect_summary "$state/before" "2 Update, 2 UpToDate, 3 Skip, 0 Error (7 MachineSets)"

section "5/9 The controller"
metrics_port="$(free_port)"
health_port="$(free_port)"
while [[ "$health_port" == "$metrics_port" ]]; do health_port="$(free_port)"; done
args=(run --kubeconfig "$KUBECONFIG" --namespace "$mco_ns"
  --metrics-bind-address "127.0.0.1:$metrics_port" --health-probe-bind-address "127.0.0.1:$health_port"
  --known-images-file "$known_images_file")
shown "boot-image-controller run --kubeconfig $(rel "$KUBECONFIG") --namespace $mco_ns \\"
shown "    --metrics-bind-address 127.0.0.1:$metrics_port --health-probe-bind-address 127.0.0.1:$health_port \\"
shown "    --known-images-file $known_images_file"
say "Its log: $(rel "$state/controller.log") (removed at the end; BIC_DEMO_KEEP_LOGS=1 keeps a copy)."
initial_snapshot="$(snapshot)"
t="$EPOCHREALTIME"
NO_COLOR=1 "$bin" "${args[@]}" >"$state/controller.log" 2>&1 &
controller_pid=$!
echo "$controller_pid" >"$state/controller.pid"
wait_for "/readyz" curl -fs --max-time 2 -o /dev/null "http://127.0.0.1:$health_port/readyz"
say "Ready after $(since "$t") (/readyz: caches synced). MachineSets as they change:"
watch_rollout "$t"
say "Converged: every patch was made within $(patch_latency "$t") of the controller's start" \
  "(Event times); the plan of the live cluster has nothing left to update."
echo
say "After:"
dump "$state/after"
plan "$state/after" | sed -n '/^MachineSets:/,$p' | grep -v '^    ' | indent
expect_summary "$state/after" "0 Update, 4 UpToDate, 3 Skip, 0 Error (7 MachineSets)"
echo
say "Conditions on MachineConfiguration/cluster (kubectl get machineconfiguration cluster -o yaml):"
show_conditions
echo
say "Events (kubectl get events.events.k8s.io -n $mapi_ns):"
show_events
events_before_upgrade="$(event_count)"

section "6/9 Upgrade to 4.21.0"
say "While the cluster ran 4.20, the controller remembered the 4.20 images in ConfigMap" \
  "$mco_ns/boot-image-controller-known-images ($(kubectl get configmap -n "$mco_ns" boot-image-controller-known-images -o jsonpath='{.data.images}' | grep -c ami-) images)." \
  "After the upgrade they are no longer golden, and this is how it still knows they are ours."
echo
say "a) The Cluster Version Operator starts the update: history gets a 4.21.0 entry, Partial."
apply -f "$fixtures/upgrade/clusterversion-4.21-updating.yaml"
apply_status -f "$fixtures/upgrade/clusterversion-4.21-updating.yaml"
say "b) Mid-upgrade, the Machine Config Operator publishes the 4.21.0 golden ConfigMap" \
  "(stream rhcos-4.21, 9.6.20251023-0). Nodes still run 4.20: the controller must wait."
versions="$(resource_versions)"
apply -f "$testdata/coreos-bootimages.yaml"
wait_for "the controller to see the 4.21 stream" sees_golden_421
wait_for "BootImageUpdateProgressing reason ClusterUpgrading" reports_upgrading
show_conditions BootImageUpdateProgressing
[[ "$(resource_versions)" == "$versions" ]] || die "a MachineSet was written while the cluster was upgrading"
say "No MachineSet was written (their resourceVersions are unchanged)."
echo
say "c) The update completes: history[0] is 4.21.0 Completed, matching the golden ConfigMap." \
  "MachineSets as they change:"
initial_snapshot="$(snapshot)"
t="$EPOCHREALTIME"
apply_status -f "$fixtures/upgrade/clusterversion-4.21-completed.yaml"
watch_rollout "$t"
say "Rolled out: every patch was made within $(patch_latency "$t") of the upgrade completing" \
  "(Event times)."
echo
say "After the upgrade:"
dump "$state/upgraded"
shown "boot-image-controller plan -f $(rel "$state/upgraded")"
plan "$state/upgraded" | grep -v '^    ' | indent
expect_summary "$state/upgraded" "0 Update, 4 UpToDate, 3 Skip, 0 Error (7 MachineSets)"
echo
say "Conditions:"
show_conditions
echo
say "New Events:"
show_events "$events_before_upgrade"

section "7/9 Metrics"
say "While the controller runs: http://127.0.0.1:$metrics_port/metrics (Prometheus text format);" \
  "health: http://127.0.0.1:$health_port/healthz and /readyz. A few lines:"
shown "curl -s http://127.0.0.1:$metrics_port/metrics"
metrics | grep -E '^(boot_image_controller_(golden_stream_info|machine_resources|leader|ready|last_successful_sync_timestamp_seconds)|mcc_bootimage_update_error)|^boot_image_controller_(patches_total|writes_total|errors_total|hot_loops_total|blocked|reconcile_duration_seconds_(count|sum))\{.*\} (0\.0*)?[1-9]' |
  indent
[[ "$(metrics)" == *$'\nmcc_bootimage_update_error{'* ]] ||
  say "(no mcc_bootimage_update_error series: no MachineSet is failing)"

section "8/9 vSphere: what it would import"
say "On vSphere the boot image is a template in vCenter, and the stream publishes an OVA. From" \
  "manifests alone, \`plan\` says which template each MachineSet would move to, what it would" \
  "import and where (the running controller imports it, then moves the MachineSet; see" \
  "docs/platforms/vsphere.md and tests/suite/vsphere.rs, which run it against vcsim). Here: a" \
  "vSphere cluster with two failure domains, tests/testdata/vsphere-cluster/, with the AWS cluster's" \
  "release, Nodes and stub secrets; its MachineConfiguration opts every MachineSet in (on 4.21" \
  "vSphere boot images are opt-in)."
vsphere=(-f tests/testdata/vsphere-cluster)
for file in clusterversion nodes secrets; do
  vsphere+=(-f "tests/testdata/aws-cluster/$file.yaml")
done
shown "boot-image-controller plan ${vsphere[*]}"
vsphere_plan="$("$bin" plan "${vsphere[@]}")"
indent <<<"$vsphere_plan"
[[ "$(tail -n 1 <<<"$vsphere_plan")" == "Summary: 0 Update, 0 UpToDate, 3 Skip, 0 Error (3 MachineSets)" ]] ||
  die "the vSphere plan changed: $(tail -n 1 <<<"$vsphere_plan")"

section "9/9 Shutdown"
t="$EPOCHREALTIME"
pid="$controller_pid"
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
controller_pid=""
((status == 0)) || die "the controller exited with status $status after SIGTERM"
say "Controller stopped by SIGTERM: exit status 0 after $(since "$t")."
[[ "${BIC_DEMO_KEEP_LOGS:-}" == 1 ]] && keep_logs "logs copied to"
BIC_DEMO_KEEP_LOGS="" # copied once
step="teardown"
hack/local-cluster.sh down >>"$up_log" 2>&1 || die "hack/local-cluster.sh down failed"
say "Control plane stopped and $(rel "$BIC_CLUSTER_DIR")/ removed."
printf '\n%sDemo finished in %s.%s\n' "$green" "$(since "$started")" "$reset"
