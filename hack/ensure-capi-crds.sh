#!/usr/bin/env bash
# Prints a directory holding the upstream Cluster API CRDs the controller works with (the last
# stdout line; progress goes to stderr): MachineSets and MachineDeployments from
# sigs.k8s.io/cluster-api, AWSMachineTemplates from sigs.k8s.io/cluster-api-provider-aws/v2,
# fetched through the Go module proxy like the control plane (hack/build-control-plane.sh) and
# cached per version in the project's tool cache (~/.cache/boot-image-controller/tools): once
# per machine. Never written by hand, never committed.
set -euo pipefail

# The Cluster API and its AWS provider, pinned: tests run against exactly these CRDs.
capi_version=v1.14.2
capa_version=v2.13.0

root="${BIC_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/boot-image-controller/tools}/capi-crds-$capi_version-$capa_version"
mkdir -p "$(dirname "$root")"
# Test binaries and local clusters may ask at once: one fetches, the others wait.
exec 9>"$root.lock"
flock 9
if [[ ! -d "$root" ]]; then
  GO="${GO:-$(command -v go || true)}"
  [[ -n "$GO" ]] || GO=/usr/local/go/bin/go
  [[ -x "$GO" ]] || { echo "ensure-capi-crds: Go toolchain not found (set GO=/path/to/go)" >&2; exit 1; }
  echo "ensure-capi-crds: fetching the Cluster API $capi_version and CAPA $capa_version CRDs into $root (once)" >&2
  module_dir() {
    local dir
    dir="$(cd / && GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=mod "$GO" mod download -json "$1@$2" |
      sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -n "$dir" && -d "$dir" ]] || { echo "ensure-capi-crds: cannot download $1@$2 from the Go module proxy" >&2; exit 1; }
    echo "$dir"
  }
  capi="$(module_dir sigs.k8s.io/cluster-api "$capi_version")"
  capa="$(module_dir sigs.k8s.io/cluster-api-provider-aws/v2 "$capa_version")"
  # Copied next to the target and renamed, so an interrupted fetch never looks cached.
  rm -rf "$root.tmp" && mkdir -p "$root.tmp"
  cp "$capi/core/config/crd/bases/cluster.x-k8s.io_machinesets.yaml" \
     "$capi/core/config/crd/bases/cluster.x-k8s.io_machinedeployments.yaml" \
     "$capa/config/crd/bases/infrastructure.cluster.x-k8s.io_awsmachinetemplates.yaml" "$root.tmp/"
  chmod u+w "$root.tmp"/*
  mv "$root.tmp" "$root"
fi
echo "$root"
