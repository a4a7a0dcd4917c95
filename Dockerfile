# syntax=docker/dockerfile:1
#
# The boot-image-controller image, for builds where a registry is reachable:
# `podman build -t boot-image-controller .` (or docker/buildah bud). Build stage on Debian
# bookworm; the runtime is distroless/cc on the same Debian release, so the glibc the binary was
# linked against is the one it runs with. No shell, no package manager.
# hack/build-image.sh builds the same image without any registry (from scratch, with buildah)
# and is the build the tests run; see docs/install.md, "The image".

# Base images, overridable so that a release build pins them by digest (docs/install.md, "With
# the Dockerfile"): --build-arg RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot@sha256:<digest>.
# They are not pinned here: the project's CI reaches no container registry, and a digest nobody
# looked up would be worse than none.
ARG BUILD_IMAGE=docker.io/library/rust:1-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${BUILD_IMAGE} AS build
WORKDIR /src
COPY . .
# The source commit for `--version` and build_info (.git is not copied into the build context):
# --build-arg BIC_GIT_COMMIT=$(git rev-parse --short=12 HEAD).
ARG BIC_GIT_COMMIT=unknown
ENV BIC_GIT_COMMIT=${BIC_GIT_COMMIT}
# --locked: build exactly the dependency versions of Cargo.lock. The cache mounts keep the
# registry and the target directory between builds; the binary is copied out of the cached
# target directory because cache mounts are not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin boot-image-controller \
 && install -D -m 0755 target/release/boot-image-controller /out/boot-image-controller

FROM ${RUNTIME_IMAGE}
LABEL org.opencontainers.image.title="boot-image-controller" \
      org.opencontainers.image.description="Keeps the boot images of OpenShift MachineSets current with the cluster's golden CoreOS stream" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/boot-image-controller /usr/local/bin/boot-image-controller
# The nonroot user of distroless, numeric so that runAsNonRoot can verify it without an
# /etc/passwd lookup. On OpenShift the restricted SCC replaces it with a UID from the namespace's
# range, which works as well: the only files the controller writes are vSphere OVA downloads, in
# the directory --vsphere-download-dir names (the Deployment mounts an emptyDir there, writable
# by any UID of the pod), and the root filesystem stays read-only.
USER 65532:65532
# One glibc allocator arena (manifests/deployment.yaml says why).
ENV MALLOC_ARENA_MAX=1
# 8080: /metrics (HTTPS with --metrics-secure), 8081: /healthz and /readyz (plain HTTP).
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/boot-image-controller"]
CMD ["run"]
