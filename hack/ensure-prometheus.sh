#!/usr/bin/env bash
# Makes sure Debian's `prometheus` package is installed: it provides `promtool` (for
# hack/check-rules.sh) and the `prometheus` server (for tests/suite/prometheus.rs). Installs it when
# either command is missing, as root only; the service is not started. Exits non-zero when the
# commands are missing and cannot be installed.
#
# Usage: hack/ensure-prometheus.sh
set -euo pipefail

log() { echo "ensure-prometheus: $*" >&2; }

ensure_prometheus() {
  if command -v promtool >/dev/null && command -v prometheus >/dev/null; then
    return 0
  fi
  # Tests run in parallel and may all find it missing on a fresh machine: one installs, the
  # others wait for it (apt-get refuses a second dpkg at once) and then find it there.
  exec 9>"${TMPDIR:-/tmp}/boot-image-controller-ensure-prometheus.lock"
  flock 9
  if command -v promtool >/dev/null && command -v prometheus >/dev/null; then
    return 0
  fi
  if ((EUID != 0)); then
    log "error: promtool or prometheus not found; install Debian's prometheus package (apt-get install -y prometheus)"
    return 1
  fi
  log "installing Debian's prometheus package (promtool, prometheus)"
  # Installing the package must not start a Prometheus server: policy-rc.d exiting 101 tells
  # invoke-rc.d and deb-systemd-invoke not to start services. Keep one that is already there.
  local policy=/usr/sbin/policy-rc.d created_policy=""
  if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    created_policy=1
  fi
  local status=0
  {
    apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus
  } >&2 || status=$?
  [[ -z "$created_policy" ]] || rm -f "$policy"
  if ((status != 0)); then
    log "error: apt-get install prometheus failed"
    return 1
  fi
  if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
    log "error: the prometheus package did not provide promtool and prometheus"
    return 1
  fi
}

ensure_prometheus
