# syntax=docker/dockerfile:1
#
# The boot-image-controller image: `docker build -t boot-image-controller .` (or podman/buildah).
# Build stage on Debian bookworm; the runtime is distroless/cc on the same Debian release, so the
# glibc the binary was linked against is the one it runs with. No shell, no package manager.

FROM docker.io/library/rust:1-bookworm AS build
WORKDIR /src
COPY . .
# --locked: build exactly the dependency versions of Cargo.lock. The cache mounts keep the
# registry and the target directory between builds; the binary is copied out of the cached
# target directory because cache mounts are not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin boot-image-controller \
 && install -D -m 0755 target/release/boot-image-controller /out/boot-image-controller

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="boot-image-controller" \
      org.opencontainers.image.description="Keeps the boot images of OpenShift MachineSets current with the cluster's golden CoreOS stream" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/boot-image-controller /usr/local/bin/boot-image-controller
# The nonroot user of distroless, numeric so that runAsNonRoot can verify it without an
# /etc/passwd lookup. On OpenShift the restricted SCC replaces it with a UID from the namespace's
# range, which works as well: the controller writes no files.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/boot-image-controller"]
CMD ["run"]
