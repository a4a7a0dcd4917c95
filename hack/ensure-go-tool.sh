#!/usr/bin/env bash
# Prints the path of one of our small Go tools (hack/tools/NAME: a main of ours around an
# upstream module pinned in its go.mod), building it through the Go module proxy into the
# project's tool cache (~/.cache/boot-image-controller/tools) on first use: once per machine,
# pinned version and source, statically, exactly as pinned. hack/ensure-vcsim.sh and
# hack/ensure-olm-bundle.sh name the tool and its upstream module.
#
# Usage: hack/ensure-go-tool.sh NAME UPSTREAM_MODULE
set -euo pipefail
name="${1:?usage: $0 NAME UPSTREAM_MODULE}"
upstream="${2:?usage: $0 NAME UPSTREAM_MODULE}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
module="$repo/hack/tools/$name"
log() { echo "ensure-$name: $*" >&2; }
# The upstream version pinned in go.mod names the cached build (a one-line or a block require).
version="$(awk -v m="$upstream" '$1 == "require" && $2 == m { print $3; exit }
                                 $1 == m { print $2; exit }' "$module/go.mod")"
[[ -n "$version" ]] || { log "no $upstream version in $module/go.mod"; exit 1; }
# Our main.go changes too: its digest is part of the cache key.
source_digest="$(cat "$module/main.go" "$module/go.mod" | sha256sum | cut -c1-12)"
root="${BIC_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/boot-image-controller/tools}/$name-$version-$source_digest"
bin="$root/$name"
mkdir -p "$(dirname "$root")"
# Test binaries run in parallel and may all ask at once: one builds, the others wait.
exec 9>"$root.lock"
flock 9
if [[ ! -x "$bin" ]]; then
  GO="${GO:-$(command -v go || true)}"
  [[ -n "$GO" ]] || GO=/usr/local/go/bin/go
  [[ -x "$GO" ]] || { log "Go toolchain not found (set GO=/path/to/go)"; exit 1; }
  log "building $name ($upstream $version) into $root (once)"
  mkdir -p "$root"
  # Ignore any go.work and never download another toolchain; build next to the target and
  # rename, so an interrupted build never leaves a truncated binary that looks cached.
  (cd "$module" && GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--buildvcs=false}" \
    "$GO" build -trimpath -ldflags "-s -w" -o "$bin.tmp" .) >&2
  mv -f "$bin.tmp" "$bin"
fi
echo "$bin"
