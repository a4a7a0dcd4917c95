#!/usr/bin/env bash
# Prints a directory holding the upstream Cluster API CRDs the controller works with (the last
# stdout line; progress goes to stderr): MachineSets and MachineDeployments from
# sigs.k8s.io/cluster-api, AWSMachineTemplates from sigs.k8s.io/cluster-api-provider-aws/v2,
# fetched and cached by hack/ensure-module-files.sh.
set -euo pipefail

# The Cluster API and its AWS provider, pinned: tests run against exactly these CRDs.
capi_version=v1.14.2
capa_version=v2.13.0

capi="sigs.k8s.io/cluster-api@$capi_version:core/config/crd/bases"
capa="sigs.k8s.io/cluster-api-provider-aws/v2@$capa_version:config/crd/bases"
exec "$(dirname "${BASH_SOURCE[0]}")/ensure-module-files.sh" "capi-crds-$capi_version-$capa_version" \
  "$capi/cluster.x-k8s.io_machinesets.yaml" \
  "$capi/cluster.x-k8s.io_machinedeployments.yaml" \
  "$capa/infrastructure.cluster.x-k8s.io_awsmachinetemplates.yaml"
