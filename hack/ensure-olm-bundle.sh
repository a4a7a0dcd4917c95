#!/usr/bin/env bash
# Prints the path of `olm-bundle`, which renders the OLM bundle in bundle/ from manifests/ and
# checks it with operator-framework's validators: hack/tools/olm-bundle, a small main of ours
# around github.com/operator-framework/api, built once by hack/ensure-go-tool.sh.
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/ensure-go-tool.sh" olm-bundle github.com/operator-framework/api
