#!/usr/bin/env bash
# Prints a directory holding the CRDs of Red Hat ACM's policy framework and placement that
# deploy/acm/ uses (the last stdout line; progress goes to stderr): Policy and PlacementBinding
# from open-cluster-management.io/governance-policy-propagator, ConfigurationPolicy from
# open-cluster-management.io/config-policy-controller, Placement and ManagedClusterSetBinding
# from open-cluster-management.io/api. Fetched through the Go module proxy like the Cluster API
# CRDs (hack/ensure-capi-crds.sh) and cached per version in the project's tool cache
# (~/.cache/boot-image-controller/tools): once per machine. Never written by hand, never
# committed. tests/suite/acm.rs installs them on the test cluster.
set -euo pipefail

# Open Cluster Management's releases, pinned: tests validate against exactly these CRDs.
api_version=v0.16.1
propagator_version=v0.16.0
config_policy_version=v0.16.0

root="${BIC_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/boot-image-controller/tools}/acm-crds-$api_version-$propagator_version-$config_policy_version"
mkdir -p "$(dirname "$root")"
# Test binaries may ask at once: one fetches, the others wait.
exec 9>"$root.lock"
flock 9
if [[ ! -d "$root" ]]; then
  GO="${GO:-$(command -v go || true)}"
  [[ -n "$GO" ]] || GO=/usr/local/go/bin/go
  [[ -x "$GO" ]] || { echo "ensure-acm-crds: Go toolchain not found (set GO=/path/to/go)" >&2; exit 1; }
  echo "ensure-acm-crds: fetching the ACM policy and placement CRDs into $root (once)" >&2
  module_dir() {
    local dir
    dir="$(cd / && GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=mod "$GO" mod download -json "$1@$2" |
      sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -n "$dir" && -d "$dir" ]] || { echo "ensure-acm-crds: cannot download $1@$2 from the Go module proxy" >&2; exit 1; }
    echo "$dir"
  }
  api="$(module_dir open-cluster-management.io/api "$api_version")"
  propagator="$(module_dir open-cluster-management.io/governance-policy-propagator "$propagator_version")"
  config_policy="$(module_dir open-cluster-management.io/config-policy-controller "$config_policy_version")"
  # Copied next to the target and renamed, so an interrupted fetch never looks cached.
  rm -rf "$root.tmp" && mkdir -p "$root.tmp"
  cp "$api/cluster/v1beta1/0000_02_clusters.open-cluster-management.io_placements.crd.yaml" \
     "$api/cluster/v1beta2/0000_01_clusters.open-cluster-management.io_managedclustersetbindings.crd.yaml" \
     "$propagator/deploy/crds/policy.open-cluster-management.io_policies.yaml" \
     "$propagator/deploy/crds/policy.open-cluster-management.io_placementbindings.yaml" \
     "$config_policy/deploy/crds/policy.open-cluster-management.io_configurationpolicies.yaml" "$root.tmp/"
  chmod u+w "$root.tmp"/*
  mv "$root.tmp" "$root"
fi
echo "$root"
