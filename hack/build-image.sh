#!/usr/bin/env bash
# Builds the release image from scratch with buildah, without any registry, and checks it by
# running the binary inside it.
#
# Usage: hack/build-image.sh
#
# What goes in (nothing else: no shell, no package manager):
#   /usr/local/bin/boot-image-controller  the release binary, stripped; its debug info (line
#                                         tables) is kept apart in target/image/*.debug and
#                                         linked by .gnu_debuglink
#   the C runtime libraries it loads      exactly what `ldd` names, and the dynamic loader
#   /etc/ssl/certs/ca-certificates.crt    the CA roots (Debian's ca-certificates), for EC2 and
#                                         vCenter
#   /etc/passwd, /etc/group, nsswitch     user and group 65532 (nonroot), which the image runs as
# with OCI labels (title, description, version, revision, licenses, created).
#
# Then, in a working container made from the archive (the image itself stays as built),
# `buildah run --isolation chroot` runs `boot-image-controller --version` and a `plan` of the
# project's AWS fixture, and checks what they print.
#
# Output (BIC_IMAGE_DIR, default target/image/):
#   boot-image-controller.oci.tar    the image as an OCI archive; push it with
#                                    skopeo copy oci-archive:<file> docker://<registry>/<name>:<tag>
#   boot-image-controller.debug      the binary's debug info
#
# Needs root (buildah's storage) and Debian's buildah, installed with apt-get when missing.
# The release build is the slow part: from a clean target/ it took 17 minutes (1,019 s) on 2
# cores with light other load (2026-11-27, commit 004fa87); with target/release current, the
# whole script takes about 5 s (cargo decides). That run's image: a 9 MiB archive, holding an
# 18 MiB stripped binary (123 MiB before stripping).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
log() { echo "build-image: $*" >&2; }
die() { log "error: $*"; exit 1; }

out="${BIC_IMAGE_DIR:-$repo/target/image}"
archive="$out/boot-image-controller.oci.tar"
fixture="tests/testdata/aws-cluster"

if ! command -v buildah >/dev/null; then
  ((EUID == 0)) || die "buildah is missing; install it (apt-get install buildah) or run as root"
  log "installing buildah (Debian's package)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah >/dev/null
fi
for tool in cargo objcopy ldd; do
  command -v "$tool" >/dev/null || die "$tool is required"
done
certs=/etc/ssl/certs/ca-certificates.crt
[[ -s "$certs" ]] || die "$certs is missing (Debian's ca-certificates package)"

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
# The commit build.rs stamps into the binary: BIC_GIT_COMMIT when set, else git's. Passed on
# only when set, since a change of that variable rebuilds the crate.
commit="${BIC_GIT_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}"

log "release build of $version (commit $commit)"
started=$SECONDS
cargo build --release --locked --bin boot-image-controller
log "release build: $((SECONDS - started)) s"
binary="${CARGO_TARGET_DIR:-$repo/target}/release/boot-image-controller"

# The file system of the image, assembled in a scratch folder.
rootfs="$(mktemp -d "${TMPDIR:-/tmp}/boot-image-controller-rootfs.XXXXXX")"
containers=()
images=()
cleanup() {
  local c
  for c in "${containers[@]}"; do buildah rm "$c" >/dev/null 2>&1 || true; done
  for c in "${images[@]}"; do buildah rmi -f "$c" >/dev/null 2>&1 || true; done
  rm -rf "$rootfs"
}
trap cleanup EXIT

mkdir -p "$out" "$rootfs/usr/local/bin" "$rootfs/etc/ssl/certs" "$rootfs/tmp"
chmod 1777 "$rootfs/tmp"
objcopy --only-keep-debug "$binary" "$out/boot-image-controller.debug"
objcopy --strip-all --add-gnu-debuglink="$out/boot-image-controller.debug" \
  "$binary" "$rootfs/usr/local/bin/boot-image-controller"
chmod 0755 "$rootfs/usr/local/bin/boot-image-controller"

# The libraries the binary loads, and the loader, at the paths ldd names (symlinks resolved).
while read -r lib; do
  mkdir -p "$rootfs$(dirname "$lib")"
  cp -L "$lib" "$rootfs$lib"
done < <(ldd "$binary" | grep -o '/[^ ]*' | sort -u)
cp "$certs" "$rootfs/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"

log "assembling the image"
ctr="$(buildah from scratch)"
containers+=("$ctr")
buildah copy --quiet "$ctr" "$rootfs/" / >/dev/null
buildah config \
  --user 65532:65532 \
  --workingdir / \
  --env PATH=/usr/local/bin:/usr/bin:/bin \
  --env MALLOC_ARENA_MAX=1 \
  --entrypoint '["/usr/local/bin/boot-image-controller"]' \
  --cmd run \
  --port 8080 --port 8081 \
  --label org.opencontainers.image.title=boot-image-controller \
  --label "org.opencontainers.image.description=$(sed -n 's/^description = "\(.*\)"/\1/p' Cargo.toml | head -n 1)" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$commit" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  --label "org.opencontainers.image.created=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "$ctr"
rm -f "$archive"
# Compressed layers (buildah's default is uncompressed): the archive is what a registry stores.
buildah commit --quiet --format oci --disable-compression=false --rm "$ctr" "oci-archive:$archive:boot-image-controller:$version" >/dev/null
containers=()

log "checking the image: --version and a plan inside it"
check="$(buildah from --quiet "oci-archive:$archive")"
containers+=("$check")
# `from` copied the archive into buildah's storage: removed again on exit.
images+=("$(buildah inspect --format '{{.FromImageID}}' "$check")")
buildah copy --quiet "$check" "$fixture" /fixture >/dev/null
run() { buildah run --isolation chroot "$check" -- /usr/local/bin/boot-image-controller "$@"; }
printed="$(run --version)"
[[ "$printed" == "boot-image-controller $version (commit $commit)" ]] ||
  die "--version in the image printed: $printed"
log "  $printed"
plan="$(run plan -f /fixture)" || die "plan in the image failed: $plan"
summary="$(tail -n 1 <<<"$plan")"
[[ "$summary" =~ ^Summary:\ [0-9]+\ Update, ]] || die "plan in the image printed: $plan"
log "  plan -f $fixture: $summary"
user="$(buildah inspect --format '{{.OCIv1.Config.User}}' "$check")"
[[ "$user" == 65532:65532 ]] || die "the image runs as $user, not 65532:65532"

size=$(stat -c %s "$archive")
log "ok: $(rel() { printf '%s' "${1#"$repo"/}"; }; rel "$archive") ($((size / 1024 / 1024)) MiB; binary $(($(stat -c %s "$rootfs/usr/local/bin/boot-image-controller") / 1024 / 1024)) MiB stripped, $(($(stat -c %s "$binary") / 1024 / 1024)) MiB before)"
