#!/usr/bin/env bash
# Renders the OLM bundle (bundle/) from manifests/ and hack/olm/, and checks it with
# operator-framework's validators (hack/tools/olm-bundle, built once by
# hack/ensure-olm-bundle.sh). docs/olm.md says how to build, push and install it.
#
# Usage:
#   hack/bundle.sh                       re-render bundle/ after a change to manifests/ or hack/olm/
#                                        (image: the placeholder boot-image-controller:latest)
#   hack/bundle.sh --image REF [--out DIR]
#                                        render a releasable bundle into DIR (default
#                                        target/bundle) for the image REF, which must name a
#                                        digest: quay.io/you/boot-image-controller@sha256:...
#                                        A REF without one takes the digest of the image
#                                        hack/build-image.sh built (target/image/*.oci.tar),
#                                        which `skopeo copy --preserve-digests` keeps when pushed.
#   hack/bundle.sh --check               only check bundle/ (what tests/suite/olm_bundle.rs runs)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
log() { echo "bundle: $*" >&2; }
die() { log "error: $*"; exit 1; }

image="" out="" check_only=0
while (($#)); do
  case "$1" in
    --image) image="${2:?--image needs a value}"; shift 2 ;;
    --out) out="${2:?--out needs a value}"; shift 2 ;;
    --check) check_only=1; shift ;;
    *) die "unknown argument $1 (see the usage at the top of $0)" ;;
  esac
done
tool="$(hack/ensure-olm-bundle.sh)"

if ((check_only)); then
  exec "$tool" check -repo "$repo"
fi
if [[ -z "$image" ]]; then
  "$tool" render -repo "$repo"
  exec "$tool" check -repo "$repo"
fi

if [[ "$image" != *@sha256:* ]]; then
  archive="${BIC_IMAGE_DIR:-$repo/target/image}/boot-image-controller.oci.tar"
  [[ -f "$archive" ]] || die "$image names no digest, and there is no $archive to take it from (hack/build-image.sh)"
  # The archive's index names the image manifest: its digest is the image's.
  digest="$(tar -xOf "$archive" index.json | grep -o '"digest": *"sha256:[0-9a-f]\{64\}"' | head -n 1 | grep -o 'sha256:[0-9a-f]*')"
  [[ -n "$digest" ]] || die "no manifest digest in $archive"
  # Drop a tag (a colon after the last slash; one before it is a registry's port).
  name="$image"
  [[ "${name##*/}" != *:* ]] || name="${name%:*}"
  image="$name@$digest"
fi
out="${out:-$repo/target/bundle}"
log "rendering the bundle for $image into $out"
"$tool" render -repo "$repo" -image "$image" -out "$out"
"$tool" check -repo "$repo" -bundle "$out" -release
