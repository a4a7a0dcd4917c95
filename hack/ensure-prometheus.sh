#!/usr/bin/env bash
# Makes sure Debian's `prometheus` package is installed: it provides `promtool` (for
# hack/check-rules.sh) and the `prometheus` server (for tests/suite/prometheus.rs). Installs it
# when either command is missing, as root only; the service is not started
# (hack/ensure-debian-package.sh).
#
# Usage: hack/ensure-prometheus.sh
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/ensure-debian-package.sh" prometheus promtool prometheus
