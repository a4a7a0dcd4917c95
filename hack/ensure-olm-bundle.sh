#!/usr/bin/env bash
# Prints the path of `olm-bundle`, which renders the OLM bundle in bundle/ from manifests/ and
# checks it with operator-framework's validators, building hack/tools/olm-bundle (a small main of
# ours around github.com/operator-framework/api, pinned in its go.mod) through the Go module
# proxy into the project's tool cache (~/.cache/boot-image-controller/tools) on first use, like
# hack/ensure-vcsim.sh: once per machine and version, statically, exactly as pinned.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
module="$repo/hack/tools/olm-bundle"
version="$(awk '$1 == "github.com/operator-framework/api" { print $2; exit }' "$module/go.mod")"
[[ -n "$version" ]] || { echo "ensure-olm-bundle: no operator-framework/api version in $module/go.mod" >&2; exit 1; }
# Our main.go changes too: its digest is part of the cache key.
source_digest="$(cat "$module/main.go" "$module/go.mod" | sha256sum | cut -c1-12)"
root="${BIC_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/boot-image-controller/tools}/olm-bundle-$version-$source_digest"
bin="$root/olm-bundle"
mkdir -p "$(dirname "$root")"
# Test binaries run in parallel and may all ask at once: one builds, the others wait.
exec 9>"$root.lock"
flock 9
if [[ ! -x "$bin" ]]; then
  GO="${GO:-$(command -v go || true)}"
  [[ -n "$GO" ]] || GO=/usr/local/go/bin/go
  [[ -x "$GO" ]] || { echo "ensure-olm-bundle: Go toolchain not found (set GO=/path/to/go)" >&2; exit 1; }
  echo "ensure-olm-bundle: building olm-bundle (operator-framework/api $version) into $root (once)" >&2
  mkdir -p "$root"
  # Ignore any go.work and never download another toolchain; build next to the target and
  # rename, so an interrupted build never leaves a truncated binary that looks cached.
  (cd "$module" && GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--buildvcs=false}" \
    "$GO" build -trimpath -ldflags "-s -w" -o "$bin.tmp" .) >&2
  mv -f "$bin.tmp" "$bin"
fi
echo "$bin"
