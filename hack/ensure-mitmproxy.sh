#!/usr/bin/env bash
# Prints the path of `mitmdump`, the TLS-inspecting proxy the egress tests use (it re-signs every
# TLS connection with its own CA, as an enterprise's inspecting proxy does), installed from PyPI
# once by hack/ensure-pypi-tool.sh.
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/ensure-pypi-tool.sh" mitmproxy "mitmproxy==11.0.2" mitmdump
