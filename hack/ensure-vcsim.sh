#!/usr/bin/env bash
# Prints the path of a `vcsim` (govmomi's vCenter simulator, which the vSphere tests talk to),
# building hack/tools/vcsim (a small main around govmomi's `simulator` package, pinned in its
# go.mod) through the Go module proxy into the project's tool cache
# (~/.cache/boot-image-controller/tools) on first use, like hack/build-control-plane.sh builds
# the control plane: once per machine and version, statically, exactly as pinned.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
module="$repo/hack/tools/vcsim"
# The govmomi version pinned in hack/tools/vcsim/go.mod names the cached build.
version="$(awk '$1 == "require" && $2 == "github.com/vmware/govmomi" { print $3; exit }
                $1 == "github.com/vmware/govmomi" { print $2; exit }' "$module/go.mod")"
[[ -n "$version" ]] || { echo "ensure-vcsim: no govmomi version in $module/go.mod" >&2; exit 1; }
# Our main.go changes too: its digest is part of the cache key.
source_digest="$(cat "$module/main.go" "$module/go.mod" | sha256sum | cut -c1-12)"
root="${BIC_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/boot-image-controller/tools}/vcsim-$version-$source_digest"
bin="$root/vcsim"
mkdir -p "$(dirname "$root")"
# Test binaries run in parallel and may all ask at once: one builds, the others wait.
exec 9>"$root.lock"
flock 9
if [[ ! -x "$bin" ]]; then
  GO="${GO:-$(command -v go || true)}"
  [[ -n "$GO" ]] || GO=/usr/local/go/bin/go
  [[ -x "$GO" ]] || { echo "ensure-vcsim: Go toolchain not found (set GO=/path/to/go)" >&2; exit 1; }
  echo "ensure-vcsim: building vcsim (govmomi $version) into $root (once)" >&2
  mkdir -p "$root"
  # Ignore any go.work and never download another toolchain; build next to the target and
  # rename, so an interrupted build never leaves a truncated binary that looks cached.
  (cd "$module" && GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--buildvcs=false}" \
    "$GO" build -trimpath -ldflags "-s -w" -o "$bin.tmp" .) >&2
  mv -f "$bin.tmp" "$bin"
fi
echo "$bin"
