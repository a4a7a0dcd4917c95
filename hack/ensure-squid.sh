#!/usr/bin/env bash
# Prints the path of `squid`, the forward proxy the egress tests send the controller's outbound
# calls through (tests/suite/egress.rs), installing Debian's package when it is missing (as root
# only; the service is not started). Exits non-zero when it is missing and cannot be installed.
#
# Usage: hack/ensure-squid.sh
set -euo pipefail

log() { echo "ensure-squid: $*" >&2; }
found() { command -v squid || ls /usr/sbin/squid 2>/dev/null; }

ensure_squid() {
  found >/dev/null && return 0
  # Tests run in parallel and may all find it missing: one installs, the others wait.
  exec 9>"${TMPDIR:-/tmp}/boot-image-controller-ensure-squid.lock"
  flock 9
  found >/dev/null && return 0
  if ((EUID != 0)); then
    log "error: squid not found; install Debian's squid package (apt-get install -y squid)"
    return 1
  fi
  log "installing Debian's squid package"
  # As hack/ensure-prometheus.sh: policy-rc.d exiting 101 keeps the package from starting the
  # system's squid service.
  local policy=/usr/sbin/policy-rc.d created_policy=""
  if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    created_policy=1
  fi
  local status=0
  {
    apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends squid
  } >&2 || status=$?
  [[ -z "$created_policy" ]] || rm -f "$policy"
  if ((status != 0)); then
    log "error: apt-get install squid failed"
    return 1
  fi
}

ensure_squid
found
