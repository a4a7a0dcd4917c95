#!/usr/bin/env bash
# Makes sure Debian's package PACKAGE is installed, so that every COMMAND it provides is found
# (on PATH, or in /usr/sbin, which a user's PATH may lack). Installs it when one is missing, as
# root only, without starting its service. Exits non-zero when a command is missing and cannot be
# installed. hack/ensure-prometheus.sh and hack/ensure-squid.sh name theirs.
#
# Usage: hack/ensure-debian-package.sh PACKAGE COMMAND...
set -euo pipefail
package="${1:?usage: $0 PACKAGE COMMAND...}"
shift
(($#)) || { echo "usage: $0 PACKAGE COMMAND..." >&2; exit 2; }

log() { echo "ensure-$package: $*" >&2; }
all_found() {
  local command
  for command in "$@"; do
    command -v "$command" >/dev/null || [[ -x "/usr/sbin/$command" ]] || return 1
  done
}

ensure_package() {
  all_found "$@" && return 0
  # Tests run in parallel and may all find it missing on a fresh machine: one installs, the
  # others wait for it (apt-get refuses a second dpkg at once) and then find it there.
  exec 9>"${TMPDIR:-/tmp}/boot-image-controller-ensure-$package.lock"
  flock 9
  all_found "$@" && return 0
  if ((EUID != 0)); then
    log "error: $* not found; install Debian's $package package (apt-get install -y $package)"
    return 1
  fi
  log "installing Debian's $package package ($*)"
  # Installing the package must not start its service: policy-rc.d exiting 101 tells
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
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package"
  } >&2 || status=$?
  [[ -z "$created_policy" ]] || rm -f "$policy"
  if ((status != 0)); then
    log "error: apt-get install $package failed"
    return 1
  fi
  if ! all_found "$@"; then
    log "error: the $package package did not provide $*"
    return 1
  fi
}

ensure_package "$@"
