#!/usr/bin/env bash
# Builds the local test control plane from source through the Go module proxy:
# kube-apiserver and kubectl (hack/tools/kube) and etcd (hack/tools/etcd), at
# the versions pinned in those modules' go.mod (see hack/tools/gen-replaces.sh).
#
# Binaries are cached per Kubernetes version in
#   ${BIC_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/boot-image-controller/bin/<k8s-version>}
# and a binary that is there and reports the pinned version is not rebuilt.
#
# Progress goes to stderr; the last line on stdout is the binary directory.
#
# A cold build (empty module and build caches) downloads ~1 GiB of modules and
# compiles for many minutes on 2 cores: run it early, in the background.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$repo/hack/tools"

log() { echo "build-control-plane: $*" >&2; }
die() { log "error: $*"; exit 1; }

GO="${GO:-$(command -v go || true)}"
[[ -n "$GO" ]] || GO=/usr/local/go/bin/go
[[ -x "$GO" ]] || die "Go toolchain not found (set GO=/path/to/go or put go on PATH)"

# Ignore any go.work around the repo, never download another toolchain, and
# build static binaries: the modules are built exactly as pinned.
export GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0

# required_version <go.mod> <module>: the version <go.mod> requires of <module>.
required_version() {
  awk -v m="$2" '($1 == "require" && $2 == m) { print $3; exit }
                 ($1 == m)                      { print $2; exit }' "$1"
}

k8s_version="$(required_version "$tools/kube/go.mod" k8s.io/kubernetes)"
etcd_version="$(required_version "$tools/etcd/go.mod" go.etcd.io/etcd/server/v3)"
[[ "$k8s_version" =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]] ||
  die "cannot read the k8s.io/kubernetes version from $tools/kube/go.mod"
k8s_major="${BASH_REMATCH[1]}" k8s_minor="${BASH_REMATCH[2]}"
[[ -n "$etcd_version" ]] || die "cannot read the etcd version from $tools/etcd/go.mod"

bin_dir="${BIC_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/boot-image-controller/bin/$k8s_version}"
mkdir -p "$bin_dir"
# Concurrent runs (parallel test binaries) wait here instead of writing the
# same files; the later ones then find the binaries cached.
exec 8<"$bin_dir"
flock 8

# Kubernetes binaries report the version stamped into these variables (their
# source defaults are "v0.0.0-master+$Format:%H$"); hack/lib/version.sh of
# kubernetes stamps the same ones. client-go's copy feeds the User-Agent.
# There is no git checkout, so gitCommit stays empty rather than made up.
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version"
  k8s_ldflags+=" -X $pkg.gitMajor=$k8s_major -X $pkg.gitMinor=$k8s_minor"
  k8s_ldflags+=" -X $pkg.gitCommit= -X $pkg.gitTreeState=clean"
  k8s_ldflags+=" -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done

# reports_version <binary> <version>: the cached binary runs and says <version>.
reports_version() {
  local out
  [[ -x "$1" ]] || return 1
  case "$(basename "$1")" in
    kube-apiserver) out="$("$1" --version 2>/dev/null)" ;;
    kubectl) out="$("$1" version --client 2>/dev/null)" ;;
    etcd) out="$("$1" --version 2>/dev/null)" ;;
  esac || return 1
  # etcd prints "etcd Version: 3.6.16" (no leading v).
  grep -qE "(^|[ v])${2#v}\$" <<<"$out"
}

# build <module dir> <package> <binary name> <version> [ldflags]
build() {
  local dir="$1" pkg="$2" name="$3" version="$4" ldflags="${5:-"-s -w"}"
  local out="$bin_dir/$name"
  if reports_version "$out" "$version"; then
    log "using cached $out ($version)"
    return
  fi
  log "building $name $version ($pkg)"
  local start=$SECONDS
  # Go's build cache for these builds takes about 2.7 GB and is no use once the binaries are
  # cached here (CI once ran out of disk): the builds share a cache of their own, removed at
  # exit. A GOCACHE set by the caller is used as it is.
  if [[ -z "${GOCACHE:-}" ]]; then
    GOCACHE="$(mktemp -d "$bin_dir/../go-build.XXXXXX")"
    export GOCACHE
    trap 'rm -rf "$GOCACHE"' EXIT
  fi
  # Build next to the target and rename, so an interrupted build never
  # leaves a truncated binary that looks cached.
  (cd "$dir" && "$GO" build -trimpath -ldflags "$ldflags" -o "$out.tmp" "$pkg")
  mv -f "$out.tmp" "$out"
  reports_version "$out" "$version" || die "$out does not report version $version"
  log "built $out in $((SECONDS - start))s"
}

start=$SECONDS
build "$tools/etcd" go.etcd.io/etcd/server/v3 etcd "$etcd_version"
build "$tools/kube" k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$k8s_version" "$k8s_ldflags"
build "$tools/kube" k8s.io/kubernetes/cmd/kubectl kubectl "$k8s_version" "$k8s_ldflags"
log "control plane binaries ready in $bin_dir (took $((SECONDS - start))s)"
echo "$bin_dir"
