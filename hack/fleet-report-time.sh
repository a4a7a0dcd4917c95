#!/usr/bin/env bash
# Times the fleet report (`plan --all-contexts`, issue 50) over N kubeconfig contexts spread
# round-robin over the clusters given: each KUBECONFIG's current context, or `stopped` for an
# API server that is not running (127.0.0.1:9). 100 contexts over one local cluster simulate a
# fleet of 100: every context is read as a cluster of its own, with its own client and TLS.
#
#   hack/fleet-report-time.sh N KUBECONFIG|stopped... [-- plan flags]
#   e.g. hack/fleet-report-time.sh 100 .local-cluster/admin.kubeconfig -- --concurrency 8
#
# Prints the seconds, the clusters read and the clusters failed, and the exit code of `plan`
# (4 when one failed). BIC_BINARY: the binary (default target/debug/boot-image-controller);
# KUBECTL: kubectl (default: kubectl on PATH).
set -euo pipefail

[ $# -ge 2 ] || { sed -n '2,13p' "$0" >&2; exit 2; }
n=$1; shift
sources=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do sources+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
binary=${BIC_BINARY:-target/debug/boot-image-controller}
kubectl=${KUBECTL:-kubectl}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
out=$dir/fleet.kubeconfig
k() { "$kubectl" config --kubeconfig="$out" "$@" >/dev/null; }

for i in "${!sources[@]}"; do
  source=${sources[$i]}
  if [ "$source" = stopped ]; then
    k set-cluster "c$i" --server=https://127.0.0.1:9 --insecure-skip-tls-verify=true
    k set-credentials "u$i" --token=none
    continue
  fi
  view() { "$kubectl" config view --kubeconfig="$source" --raw --minify -o jsonpath="$1"; }
  view '{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"$dir/ca$i"
  view '{.users[0].user.client-certificate-data}' | base64 -d >"$dir/crt$i"
  view '{.users[0].user.client-key-data}' | base64 -d >"$dir/key$i"
  k set-cluster "c$i" --server="$(view '{.clusters[0].cluster.server}')" \
    --certificate-authority="$dir/ca$i" --embed-certs=true
  k set-credentials "u$i" --client-certificate="$dir/crt$i" --client-key="$dir/key$i" \
    --embed-certs=true
done
for ((c = 0; c < n; c++)); do
  i=$((c % ${#sources[@]}))
  k set-context "$(printf 'cluster-%03d' "$c")" --cluster="c$i" --user="u$i"
done

start=$(date +%s.%N)
status=0
"$binary" plan --kubeconfig "$out" --all-contexts -o json "$@" >"$dir/report.json" \
  2>"$dir/stderr" || status=$?
end=$(date +%s.%N)
read_ok=$(grep -c '^      "error": null' "$dir/report.json" || true)
failed=$(grep -c '^        "kind": ' "$dir/report.json" || true)
printf '%d contexts: %.2f s, %d read, %d failed, exit %d\n' \
  "$n" "$(echo "$end - $start" | bc)" "$read_ok" "$failed" "$status"
