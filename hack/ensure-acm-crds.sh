#!/usr/bin/env bash
# Prints a directory holding the CRDs of Red Hat ACM's policy framework and placement that
# deploy/acm/ uses (the last stdout line; progress goes to stderr): Policy and PlacementBinding
# from open-cluster-management.io/governance-policy-propagator, ConfigurationPolicy from
# open-cluster-management.io/config-policy-controller, Placement and ManagedClusterSetBinding
# from open-cluster-management.io/api; fetched and cached by hack/ensure-module-files.sh, like
# the Cluster API CRDs. tests/suite/acm.rs installs them on the test cluster.
set -euo pipefail

# Open Cluster Management's releases, pinned: tests validate against exactly these CRDs.
api_version=v0.16.1
propagator_version=v0.16.0
config_policy_version=v0.16.0

api="open-cluster-management.io/api@$api_version:cluster"
propagator="open-cluster-management.io/governance-policy-propagator@$propagator_version:deploy/crds"
config_policy="open-cluster-management.io/config-policy-controller@$config_policy_version:deploy/crds"
exec "$(dirname "${BASH_SOURCE[0]}")/ensure-module-files.sh" \
  "acm-crds-$api_version-$propagator_version-$config_policy_version" \
  "$api/v1beta1/0000_02_clusters.open-cluster-management.io_placements.crd.yaml" \
  "$api/v1beta2/0000_01_clusters.open-cluster-management.io_managedclustersetbindings.crd.yaml" \
  "$propagator/policy.open-cluster-management.io_policies.yaml" \
  "$propagator/policy.open-cluster-management.io_placementbindings.yaml" \
  "$config_policy/policy.open-cluster-management.io_configurationpolicies.yaml"
