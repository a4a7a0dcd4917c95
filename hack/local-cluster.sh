#!/usr/bin/env bash
# A throwaway local Kubernetes control plane (etcd + kube-apiserver, no
# controller-manager, scheduler or nodes) on 127.0.0.1, with the OpenShift CRDs
# the boot image controller works with, for integration tests and the demo.
#
# Usage: hack/local-cluster.sh up|down|status|env|stop-apiserver [--kill]|start-apiserver [--no-wait]
#   up      build the binaries if needed, start etcd and kube-apiserver, install
#           the CRDs and namespaces; the last stdout line is the admin
#           kubeconfig path (all progress goes to stderr). Reuses a running,
#           ready cluster.
#   down    stop both processes and remove the state directory.
#   status  print URL, kubeconfig and PIDs; exit 0 if running, 1 if not.
#   env     print `export KUBECONFIG=...` (and PATH with kubectl) for eval.
#   stop-apiserver [--kill]
#           stop only kube-apiserver (SIGTERM, or SIGKILL with --kill), keeping
#           etcd and the state: for fault tests, on a private BIC_CLUSTER_DIR.
#   start-apiserver [--no-wait]
#           start kube-apiserver again on the same port with the same flags
#           and wait until it is ready (with --no-wait, return once it is
#           started: a test that races the controller checks for itself).
#
# Environment:
#   BIC_CLUSTER_DIR  state directory (default: <repo>/.local-cluster)
#   BIC_SHARED_DIR   upstream data; its fixtures/crds/ is used when present
#                    (default: <repo>/../shared)
#   BIC_BINARY       boot-image-controller binary printing the project's CRDs
#                    with `crds`, used when there are no upstream CRDs
#                    (default: cargo run --quiet --bin boot-image-controller --)
#   BIC_BIN_DIR      control plane binary cache (see hack/build-control-plane.sh)
#   BIC_READY_TIMEOUT  seconds to wait for kube-apiserver /readyz (default 120)
#   BIC_MACHINECONFIGURATION_CRD  the MachineConfiguration CRD to install instead of
#                    the newest one, e.g. an older release's from
#                    fixtures/crds/releases/<version>/ (tests of each release's API)
#
# With no kube-controller-manager, nothing runs controllers: deleted namespaces
# stay Terminating, ownerReferences are not garbage collected, service accounts
# get no tokens. Tests must not rely on those.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
state_dir="${BIC_CLUSTER_DIR:-$repo/.local-cluster}"
shared_dir="${BIC_SHARED_DIR:-$repo/../shared}"
# Canonical path for messages, when it exists.
shared_dir="$(cd "$shared_dir" 2>/dev/null && pwd || echo "$shared_dir")"
ready_timeout="${BIC_READY_TIMEOUT:-120}"

kubeconfig="$state_dir/admin.kubeconfig"
pki="$state_dir/pki"
# Upstream CRDs read in place. The MachineSet CRD is the TechPreview variant: a superset of the
# default one with spec/status.authoritativeAPI (MachineAPIMigration), which the controller
# reads.
upstream_crds=(machineset-techpreview machine controlplanemachineset machineconfiguration infrastructure clusterversion)
namespaces=(openshift-machine-api openshift-machine-config-operator openshift-cluster-api)

log() { echo "local-cluster: $*" >&2; }
die() { log "error: $*"; exit 1; }

# ensure_tools installs the Debian packages providing missing commands, running
# `apt-get update` once and only when something is missing.
ensure_tools() {
  local -A package_of=([openssl]=openssl [ip]=iproute2 [flock]=util-linux [setsid]=util-linux)
  local cmd missing=()
  for cmd in "${!package_of[@]}"; do
    command -v "$cmd" >/dev/null || missing+=("${package_of[$cmd]}")
  done
  ((${#missing[@]} == 0)) && return
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  ((EUID == 0)) || die "missing packages ${missing[*]}; install them (apt-get install -y ${missing[*]})"
  log "installing ${missing[*]}"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
}

# State recorded by `up`: ports, URL and binary directory.
load_state() {
  [[ -f "$state_dir/cluster.env" ]] || return 1
  # shellcheck source=/dev/null
  source "$state_dir/cluster.env"
}

# pid_alive <name>: the process recorded in <name>.pid runs and is still the
# binary we started (guards against PID reuse after a reboot).
pid_alive() {
  local pid cmdline
  pid="$(cat "$state_dir/$1.pid" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  cmdline="$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")" || return 1
  [[ "$cmdline" == *"/$1 "* && "$cmdline" == *"$state_dir/"* ]]
}

kubectl() { "$BIN_DIR/kubectl" --kubeconfig "$kubeconfig" "$@"; }

is_ready() {
  load_state && pid_alive etcd && pid_alive kube-apiserver &&
    kubectl get --raw /readyz >/dev/null 2>&1
}

# free_ports <n>: n distinct free TCP ports on 127.0.0.1, one per line.
free_ports() {
  if command -v python3 >/dev/null; then
    # Holding all sockets open until the end makes the kernel hand out n
    # different ports.
    python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print("\n".join(str(s.getsockname()[1]) for s in socks))
PY
    return
  fi
  # Fallback: probe random high ports; a refused connection means free.
  local -a picked=()
  local port
  while ((${#picked[@]} < $1)); do
    port=$((20000 + RANDOM % 40000))
    [[ " ${picked[*]} " == *" $port "* ]] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then picked+=("$port"); fi
  done
  printf '%s\n' "${picked[@]}"
}

# sign <name> <subject> <extensions>: a P-256 key and a certificate for it
# signed by the cluster CA. Keys are PKCS#8, which every TLS stack reads.
sign() {
  local name="$1" subject="$2" extensions="$3"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/$name.key" 2>/dev/null
  openssl req -new -key "$pki/$name.key" -subj "$subject" -out "$pki/$name.csr"
  printf '%s\n' "$extensions" >"$pki/$name.ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 3650 -sha256 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr" "$pki/$name.ext"
}

make_pki() {
  mkdir -p "$pki"
  chmod 700 "$pki"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=boot-image-controller-local-ca" \
    -days 3650 -sha256 -out "$pki/ca.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
  sign serving "/CN=kube-apiserver" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
  # O=system:masters is bound to cluster-admin by the bootstrap RBAC policy.
  sign admin "/O=system:masters/CN=boot-image-controller-admin" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  # Service account tokens: the API server signs with the private key and
  # verifies with the public one.
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$pki/sa.key" 2>/dev/null
  openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub"
}

# spawn <name> <binary> <args...>: run a daemon in its own session (so ^C or
# a test harness killing its process group does not take it down), logging to
# <name>.log. The PID file is written by the process itself before it execs,
# so it is the daemon's PID whatever setsid does. stdin/stdout/stderr and the
# lock fd are not inherited: a caller reading `up`'s stdout through a pipe
# must see EOF when `up` exits, and the lock must be released.
spawn() {
  local name="$1" i
  shift
  # shellcheck disable=SC2016 # expanded by the inner shell
  setsid bash -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$state_dir/$name.pid" "$@" \
    </dev/null >>"$state_dir/$name.log" 2>&1 9<&- &
  for ((i = 0; i < 50; i++)); do
    [[ -s "$state_dir/$name.pid" ]] && return
    sleep 0.1
  done
  die "$name did not start (see $state_dir/$name.log)"
}

# stop <name>: TERM the recorded process, KILL it if it lingers.
stop() {
  local name="$1" pid i
  pid_alive "$name" || return 0
  pid="$(cat "$state_dir/$name.pid")"
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  log "$name did not exit after 10s; killing it"
  kill -KILL "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
}

# kill_now <name>: SIGKILL the recorded process, as a crash would end it.
kill_now() {
  local name="$1" pid
  pid_alive "$name" || return 0
  pid="$(cat "$state_dir/$name.pid")"
  log "killing $name (pid $pid) with SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  # pid_alive rather than kill -0: a zombie nobody reaps would pass kill -0.
  while pid_alive "$name"; do sleep 0.1; done
}

stop_apiserver() {
  load_state || die "no cluster in $state_dir"
  case "${1:-}" in
    "") stop kube-apiserver ;;
    --kill) kill_now kube-apiserver ;;
    *) die "usage: $0 stop-apiserver [--kill]" ;;
  esac
}

restart_apiserver() {
  case "${1:-}" in
    "" | --no-wait) ;;
    *) die "usage: $0 start-apiserver [--no-wait]" ;;
  esac
  if ! load_state || [[ ! -f "$state_dir/ready" ]]; then
    die "no cluster in $state_dir; run '$0 up' first"
  fi
  pid_alive etcd || die "etcd is not running; '$0 up' starts a fresh cluster"
  if pid_alive kube-apiserver; then
    log "kube-apiserver already running"
    return
  fi
  start_apiserver "${ETCD_URL##*:}" "${API_URL##*:}"
  if [[ "${1:-}" == --no-wait ]]; then
    log "kube-apiserver started again at $API_URL (not waiting for it to be ready)"
    return
  fi
  wait_ready || die "kube-apiserver did not come back (see $state_dir/kube-apiserver.log)"
  log "kube-apiserver ready again at $API_URL"
}

teardown() {
  stop kube-apiserver
  stop etcd
  rm -rf "$state_dir"
}

# no_default_route_hint: explain the usual cause of a kube-apiserver that dies
# at start on hosts (sandboxes, network namespaces) without a default route.
no_default_route_hint() {
  command -v ip >/dev/null && [[ -z "$(ip route show default 2>/dev/null)" ]] || return 0
  log "note: this host has no default route (ip route show default is empty)."
  log "kube-apiserver picks its advertise address from the default route's interface"
  log "unless --advertise-address is given (this script passes 127.0.0.1, which works"
  log "without one). If the log says 'Unable to find suitable network address', give"
  log "it a default route with a non-loopback address, e.g. (documentation range):"
  log "  ip addr add 198.51.100.1/32 dev lo && ip route add default dev lo"
}

# wait_ready: poll /readyz until it answers ok or a process dies.
wait_ready() {
  local deadline=$((SECONDS + ready_timeout)) name
  until kubectl get --raw /readyz >/dev/null 2>&1; do
    for name in etcd kube-apiserver; do
      if ! pid_alive "$name"; then
        log "$name exited; last lines of $state_dir/$name.log:"
        tail -n 20 "$state_dir/$name.log" >&2 || true
        no_default_route_hint
        return 1
      fi
    done
    if ((SECONDS >= deadline)); then
      log "kube-apiserver not ready after ${ready_timeout}s; see $state_dir/kube-apiserver.log"
      kubectl get --raw '/readyz?verbose' >&2 || true
      no_default_route_hint
      return 1
    fi
    sleep 0.5
  done
}

# project_crds: the CRDs printed by `boot-image-controller crds`.
project_crds() {
  if [[ -n "${BIC_BINARY:-}" ]]; then
    "$BIC_BINARY" crds
  else
    command -v cargo >/dev/null || die "no upstream CRDs in $shared_dir/fixtures/crds and no cargo to build boot-image-controller"
    (cd "$repo" && cargo run --quiet --bin boot-image-controller -- crds)
  fi
}

install_crds() {
  local crd_dir="$shared_dir/fixtures/crds" names name
  # Server-side apply: the upstream CRDs are too big for the
  # last-applied-configuration annotation of client-side apply (256 KiB).
  local apply=(apply --server-side --force-conflicts --field-manager=bic-local-cluster -o name)
  if [[ -d "$crd_dir" ]]; then
    log "installing upstream CRDs from $crd_dir"
    local args=()
    for name in "${upstream_crds[@]}"; do
      if [[ "$name" == machineconfiguration && -n "${BIC_MACHINECONFIGURATION_CRD:-}" ]]; then
        args+=(-f "$BIC_MACHINECONFIGURATION_CRD")
      else
        args+=(-f "$crd_dir/$name.crd.yaml")
      fi
    done
    names="$(kubectl "${apply[@]}" "${args[@]}")" || die "the API server rejected the upstream CRDs (see above)"
  else
    log "no $crd_dir; installing the project's CRDs (boot-image-controller crds)"
    local crds
    crds="$(project_crds)" ||
      die "'boot-image-controller crds' failed; it is needed when $crd_dir is absent (set BIC_BINARY or BIC_SHARED_DIR)"
    [[ -n "$crds" ]] || die "'boot-image-controller crds' printed nothing"
    names="$(kubectl "${apply[@]}" -f - <<<"$crds")" ||
      die "the API server rejected the CRDs printed by 'boot-image-controller crds' (see above)"
  fi
  # The Cluster API CRDs, from their Go modules (hack/ensure-capi-crds.sh), with or without the
  # upstream data.
  local capi_dir
  capi_dir="$("$repo/hack/ensure-capi-crds.sh")" || die "cannot fetch the Cluster API CRDs (see above)"
  log "installing the Cluster API CRDs from $capi_dir"
  names+=$'\n'"$(kubectl "${apply[@]}" -f "$capi_dir")" || die "the API server rejected the Cluster API CRDs (see above)"
  # shellcheck disable=SC2086 # one resource name per word
  kubectl wait --for condition=established --timeout=60s $names >&2
}

install_namespaces() {
  local ns manifest=""
  for ns in "${namespaces[@]}"; do
    manifest+="apiVersion: v1
kind: Namespace
metadata:
  name: $ns
---
"
  done
  kubectl apply --server-side --field-manager=bic-local-cluster -f - <<<"$manifest" >&2
}

# start_apiserver <etcd port> <api port>: spawn kube-apiserver against the
# cluster's etcd and PKI (used by `up` and `start-apiserver`).
start_apiserver() {
  log "starting kube-apiserver on $API_URL"
  # --advertise-address: without it kube-apiserver derives an address from
  # the default route's interface and fails on hosts with none.
  # --endpoint-reconciler-type=none: the "kubernetes" Service endpoints
  # would be 127.0.0.1, which Endpoints validation rejects (a loopback
  # address); nothing here routes to that Service anyway.
  # --service-account-issuer / key files: required by kube-apiserver to
  # start; tokens it issues are verified with sa.pub.
  # --audit-*: the body of every patch of a machine resource and of the
  # installer's stub secrets (their in-place upgrade), as the API server
  # received it, in $state_dir/audit.log; a test compares it with what
  # `plan` says `run` sends. Writes of the golden ConfigMap are logged without
  # their body: the benchmark times the first patch from them by the server's
  # own clock. TokenReviews are logged with their body: a test counts the
  # reviews the controller sends for a token it was shown (this cluster's
  # tokens are test tokens). Status patches of MachineConfigurations are
  # logged without their body: a test counts the refused ones. Nothing else
  # is logged.
  cat >"$state_dir/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Request
  verbs: ["patch"]
  resources:
  - group: machine.openshift.io
    resources: ["machinesets", "controlplanemachinesets"]
  - group: ""
    resources: ["secrets"]
    resourceNames: ["worker-user-data", "master-user-data"]
- level: Metadata
  verbs: ["update", "patch"]
  resources:
  - group: ""
    resources: ["configmaps"]
    resourceNames: ["coreos-bootimages"]
- level: Request
  verbs: ["create"]
  resources:
  - group: authentication.k8s.io
    resources: ["tokenreviews"]
- level: Metadata
  verbs: ["patch"]
  resources:
  - group: operator.openshift.io
    resources: ["machineconfigurations/status"]
- level: None
POLICY
  spawn kube-apiserver "$BIN_DIR/kube-apiserver" \
    --audit-policy-file="$state_dir/audit-policy.yaml" \
    --audit-log-path="$state_dir/audit.log" --audit-log-format=json \
    --audit-log-maxsize=100 --audit-log-maxbackup=1 \
    --etcd-servers="http://127.0.0.1:$1" \
    --bind-address=127.0.0.1 --secure-port="$2" \
    --advertise-address=127.0.0.1 \
    --endpoint-reconciler-type=none \
    --tls-cert-file="$pki/serving.crt" --tls-private-key-file="$pki/serving.key" \
    --client-ca-file="$pki/ca.crt" \
    --service-account-issuer="$API_URL" \
    --service-account-key-file="$pki/sa.pub" \
    --service-account-signing-key-file="$pki/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --authorization-mode=RBAC
}

up() {
  if is_ready && [[ -f "$state_dir/ready" ]]; then
    log "reusing the cluster at $API_URL"
    echo "$kubeconfig"
    return
  fi
  if [[ -d "$state_dir" ]]; then
    log "found a stale or incomplete cluster in $state_dir; starting afresh"
    teardown
  fi

  local start=$SECONDS
  BIN_DIR="$("$repo/hack/build-control-plane.sh" | tail -n1)"
  mkdir -p "$state_dir"
  # A failed up leaves no process running but keeps the logs; the next up or
  # down clears them.
  trap 'if [[ ! -f "$state_dir/ready" ]]; then stop kube-apiserver; stop etcd; log "up failed; logs kept in $state_dir"; fi' EXIT
  make_pki

  local ports
  mapfile -t ports < <(free_ports 3)
  local etcd_port="${ports[0]}" peer_port="${ports[1]}" api_port="${ports[2]}"
  API_URL="https://127.0.0.1:$api_port"
  cat >"$state_dir/cluster.env" <<EOF
API_URL=$API_URL
ETCD_URL=http://127.0.0.1:$etcd_port
BIN_DIR=$BIN_DIR
EOF

  log "starting etcd on 127.0.0.1:$etcd_port"
  # Peer URLs default to port 2380 on all interfaces: pin them to a free
  # loopback port too. --unsafe-no-fsync: the data is thrown away anyway, and
  # fsync makes every write slow on shared disks.
  spawn etcd "$BIN_DIR/etcd" \
    --name=bic --data-dir="$state_dir/etcd" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" \
    --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-cluster="bic=http://127.0.0.1:$peer_port" \
    --unsafe-no-fsync --log-level=warn

  start_apiserver "$etcd_port" "$api_port"

  write_kubeconfig "$api_port"
  wait_ready || die "the control plane did not come up (logs in $state_dir)"
  log "kube-apiserver ready after $((SECONDS - start))s"

  install_namespaces
  install_crds
  touch "$state_dir/ready"
  log "cluster up in $((SECONDS - start))s: $API_URL"
  echo "$kubeconfig"
}

# write_kubeconfig <port>: admin kubeconfig with embedded certificates, so it
# stays valid when copied and needs no files next to it.
write_kubeconfig() {
  local k=("$BIN_DIR/kubectl" config --kubeconfig="$kubeconfig")
  "${k[@]}" set-cluster local --server="https://127.0.0.1:$1" \
    --certificate-authority="$pki/ca.crt" --embed-certs=true >/dev/null
  "${k[@]}" set-credentials admin --client-certificate="$pki/admin.crt" \
    --client-key="$pki/admin.key" --embed-certs=true >/dev/null
  "${k[@]}" set-context local --cluster=local --user=admin >/dev/null
  "${k[@]}" use-context local >/dev/null
  chmod 600 "$kubeconfig"
}

status() {
  if is_ready; then
    echo "running: $API_URL"
    echo "kubeconfig: $kubeconfig"
    echo "etcd: pid $(cat "$state_dir/etcd.pid") at $ETCD_URL, log $state_dir/etcd.log"
    echo "kube-apiserver: pid $(cat "$state_dir/kube-apiserver.pid"), log $state_dir/kube-apiserver.log"
    echo "binaries: $BIN_DIR"
    [[ -f "$state_dir/ready" ]] || echo "warning: CRDs/namespaces not installed (an 'up' did not finish)"
  elif [[ -d "$state_dir" ]]; then
    echo "not running (stale state in $state_dir; 'down' removes it)"
    return 1
  else
    echo "not running"
    return 1
  fi
}

main() {
  local cmd="${1:-}"
  case "$cmd" in
    up | down | stop-apiserver | start-apiserver) ;;
    status) status; return ;;
    env)
      load_state || die "no cluster in $state_dir; run '$0 up' first"
      printf 'export KUBECONFIG=%q\n' "$kubeconfig"
      # shellcheck disable=SC2016 # $PATH is for the shell that evals this
      printf 'export PATH=%q:"$PATH"\n' "$BIN_DIR"
      return
      ;;
    *) die "usage: $0 up|down|status|env|stop-apiserver [--kill]|start-apiserver [--no-wait]" ;;
  esac

  ensure_tools
  # One up/down at a time (test binaries may race to start the cluster). The
  # lock is taken on the state dir's parent directory, which outlives `down`
  # and needs no lock file left behind.
  mkdir -p "$(dirname "$state_dir")"
  exec 9<"$(dirname "$state_dir")"
  flock 9
  BIN_DIR=""
  load_state || true
  case "$cmd" in
    up) up ;;
    stop-apiserver) stop_apiserver "${2:-}" ;;
    start-apiserver) restart_apiserver "${2:-}" ;;
    *)
      teardown
      log "cluster down"
      ;;
  esac
}

main "$@"
