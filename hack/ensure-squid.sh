#!/usr/bin/env bash
# Prints the path of `squid`, the forward proxy the egress tests send the controller's outbound
# calls through (tests/suite/egress.rs), installing Debian's package when it is missing (as root
# only; the service is not started: hack/ensure-debian-package.sh).
#
# Usage: hack/ensure-squid.sh
set -euo pipefail
"$(dirname "${BASH_SOURCE[0]}")/ensure-debian-package.sh" squid squid
command -v squid || echo /usr/sbin/squid
