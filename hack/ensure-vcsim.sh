#!/usr/bin/env bash
# Prints the path of a `vcsim` (govmomi's vCenter simulator, which the vSphere tests talk to):
# hack/tools/vcsim, a small main around govmomi's `simulator` package, built once by
# hack/ensure-go-tool.sh.
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/ensure-go-tool.sh" vcsim github.com/vmware/govmomi
