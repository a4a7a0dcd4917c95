#!/usr/bin/env bash
# Prints the path of a `moto_server` (the EC2 and STS simulator the EC2 tests talk to), installed
# from PyPI once by hack/ensure-pypi-tool.sh.
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/ensure-pypi-tool.sh" moto "moto[server]==5.2.5" moto_server
