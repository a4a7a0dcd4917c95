#!/usr/bin/env bash
# Prints a directory holding files of pinned upstream Go modules (the last stdout line; progress
# goes to stderr), fetched through the Go module proxy like the control plane
# (hack/build-control-plane.sh) and cached under NAME in the project's tool cache
# (~/.cache/boot-image-controller/tools): once per machine. Never written by hand, never
# committed. hack/ensure-capi-crds.sh and hack/ensure-acm-crds.sh name the modules and files.
#
# Usage: hack/ensure-module-files.sh NAME MODULE@VERSION:PATH...
set -euo pipefail
name="${1:?usage: $0 NAME MODULE@VERSION:PATH...}"
shift
log() { echo "ensure-module-files: $*" >&2; }

root="${BIC_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/boot-image-controller/tools}/$name"
mkdir -p "$(dirname "$root")"
# Test binaries and local clusters may ask at once: one fetches, the others wait.
exec 9>"$root.lock"
flock 9
if [[ ! -d "$root" ]]; then
  GO="${GO:-$(command -v go || true)}"
  [[ -n "$GO" ]] || GO=/usr/local/go/bin/go
  [[ -x "$GO" ]] || { log "Go toolchain not found (set GO=/path/to/go)"; exit 1; }
  log "fetching $name into $root (once)"
  # Copied next to the target and renamed, so an interrupted fetch never looks cached.
  rm -rf "$root.tmp" && mkdir -p "$root.tmp"
  for file in "$@"; do
    module="${file%%:*}"
    # Ignore any go.work and never download another toolchain.
    dir="$(cd / && GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=mod "$GO" mod download -json "$module" |
      sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -n "$dir" && -d "$dir" ]] || { log "cannot download $module from the Go module proxy"; exit 1; }
    cp "$dir/${file#*:}" "$root.tmp/"
  done
  chmod u+w "$root.tmp"/*
  mv "$root.tmp" "$root"
fi
echo "$root"
