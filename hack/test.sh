#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, unit and property tests, the
# integration tests against a real kube-apiserver + etcd, and the alert-rule checks.
#
# The control plane is built from Go modules on first use (cached afterwards, see
# hack/build-control-plane.sh), started in a private state directory, and always torn down.
#
# Usage: hack/test.sh [extra cargo test args...]
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
log() { echo "test.sh: $*" >&2; }
started=$(date +%s)

for tool in cargo go; do
  command -v "$tool" >/dev/null || { log "error: $tool is required (Rust via rustup, Go >= 1.24)"; exit 1; }
done
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  log "installing rustfmt and clippy"
  rustup component add rustfmt clippy
fi

log "formatting"
cargo fmt --all -- --check

# Licenses, banned crates and sources. Advisories need the RustSec database from GitHub, which
# CI cannot reach: `cargo deny check advisories` runs where it can (docs/development.md).
log "supply chain (cargo deny: licenses, bans, sources)"
"$(hack/ensure-cargo-deny.sh)" deny --locked check licenses bans sources

log "building the control plane (cached after the first run)"
hack/build-control-plane.sh >&2

log "Prometheus and promtool (Debian's package, installed once)"
hack/ensure-prometheus.sh

log "moto, the EC2 simulator (PyPI, installed once into a virtualenv)"
hack/ensure-moto.sh >/dev/null

log "vcsim, the vCenter simulator (govmomi from the Go module proxy, built once)"
hack/ensure-vcsim.sh >/dev/null

log "olm-bundle, operator-framework's bundle validators (Go module proxy, built once)"
hack/ensure-olm-bundle.sh >/dev/null
log "ACM's policy and placement CRDs (Go module proxy, fetched once)"
hack/ensure-acm-crds.sh >/dev/null
log "squid and mitmproxy, a forward and a TLS-inspecting proxy (Debian's package; PyPI, installed once)"
hack/ensure-squid.sh >/dev/null
hack/ensure-mitmproxy.sh >/dev/null

log "building the project"
cargo build --all-targets --locked

# Every test that skips appends a line here (src/testkit/skips.rs); the summary lists them, and
# BIC_FAIL_ON_SKIP=1 (CI, where ../shared and every tool exist) turns a skip into a failure.
BIC_SKIP_LOG="$(mktemp "${TMPDIR:-/tmp}/bic-skips.XXXXXX")"
export BIC_SKIP_LOG
report_skips() {
  [[ -s "$BIC_SKIP_LOG" ]] || return 0
  log "$(wc -l <"$BIC_SKIP_LOG") test(s) SKIPPED:"
  sed 's/^/  /' "$BIC_SKIP_LOG" >&2
}

# A private cluster: never reuse (or tear down) one a developer is using for the demo.
export BIC_CLUSTER_DIR="${BIC_TEST_CLUSTER_DIR:-$repo/.local-cluster-test}"
export BIC_BINARY="$repo/target/debug/boot-image-controller"
trap 'report_skips; rm -f "$BIC_SKIP_LOG"; hack/local-cluster.sh down >&2 || true' EXIT
KUBECONFIG="$(hack/local-cluster.sh up | tail -n 1)"
export KUBECONFIG
BIC_BIN_DIR="$(sed -n 's/^BIN_DIR=//p' "$BIC_CLUSTER_DIR/cluster.env")"
export BIC_BIN_DIR
export PATH="$BIC_BIN_DIR:$PATH"

log "lints"
cargo clippy --all-targets --locked -- -D warnings

# The fuzz targets (fuzz/, a workspace of its own that nothing above compiles) still compile
# against the library: stable Rust checks them; running them needs nightly (hack/fuzz.sh). The
# shared target dir reuses the dependencies the lints just checked.
log "fuzz targets compile (cargo check; hack/fuzz.sh runs them)"
cargo check --manifest-path fuzz/Cargo.toml --bins --locked --target-dir "${CARGO_TARGET_DIR:-$repo/target}"

log "tests"
cargo test --locked "$@"

# The integration suite once more as a fresh clone runs it: without ../shared, so on the
# project's own generated CRDs, with the tests that need upstream data skipped. CI always has
# ../shared, and a test that passed only with it once broke this command on fresh clones
# unseen. Only for a whole run (no test filter); BIC_TEST_WITHOUT_SHARED=0 leaves it out.
if [[ $# -eq 0 && -d "${BIC_SHARED_DIR:-$repo/../shared}/fixtures" && "${BIC_TEST_WITHOUT_SHARED:-1}" == 1 ]]; then
  log "integration tests without ../shared, as on a fresh clone"
  no_shared="$(mktemp -d "${TMPDIR:-/tmp}/bic-no-shared.XXXXXX")"
  fresh_skips="$(mktemp "${TMPDIR:-/tmp}/bic-fresh-skips.XXXXXX")"
  fresh_cluster="$repo/.local-cluster-test-fresh"
  trap 'report_skips; rm -f "$BIC_SKIP_LOG"; BIC_CLUSTER_DIR="$fresh_cluster" hack/local-cluster.sh down >&2 || true; hack/local-cluster.sh down >&2 || true' EXIT
  fresh_kubeconfig="$(BIC_SHARED_DIR="$no_shared" BIC_CLUSTER_DIR="$fresh_cluster" hack/local-cluster.sh up | tail -n 1)"
  BIC_SHARED_DIR="$no_shared" BIC_CLUSTER_DIR="$fresh_cluster" KUBECONFIG="$fresh_kubeconfig" \
    BIC_SKIP_LOG="$fresh_skips" cargo test --locked --test suite
  log "without ../shared: $(wc -l <"$fresh_skips") test(s) skipped for want of upstream data, as expected"
  BIC_CLUSTER_DIR="$fresh_cluster" hack/local-cluster.sh down >&2
  rm -rf "$no_shared" "$fresh_skips"
fi

# The soak variant of the fault tests, bounded (one 300-MachineSet rollout, three apiserver kills,
# under a minute): ignored by plain `cargo test`, run here so CI exercises it on every change.
log "soak: kube-apiserver killed three times during a large rollout"
cargo test --locked --test suite -- --ignored --exact faults::soak_apiserver_killed_repeatedly_during_a_large_rollout

# The README's other command, the demo, runs end to end (its own control plane, the debug binary
# built above); its checks fail it when what it shows is not what happened.
log "demo (hack/demo.sh, docs/demo.md)"
demo_log="$(mktemp "${TMPDIR:-/tmp}/bic-demo.XXXXXX")"
if ! hack/demo.sh >"$demo_log" 2>&1; then
  tail -n 40 "$demo_log" >&2
  log "the demo failed (whole output: $demo_log)"
  exit 1
fi
# docs/demo.md's transcript is what this run showed, times, ports and orders of arrival aside.
if ! BIC_DEMO_OUTPUT="$demo_log" cargo test --locked --test suite -- --ignored --exact \
  docs::the_demo_transcript_is_what_a_fresh_run_shows; then
  log "docs/demo.md's transcript is stale: hack/demo.sh --transcript docs/demo.md (this run: $demo_log)"
  exit 1
fi
rm -f "$demo_log"

log "alert rules (promtool)"
hack/check-rules.sh

# The release image (hack/build-image.sh): a release build, then buildah from scratch, and
# --version and a plan run inside the image. The release build compiles every dependency again
# with optimisations (17 minutes from a clean target/ on 2 cores, figures in
# hack/build-image.sh); BIC_BUILD_IMAGE=0 leaves it out of a quick local run, and says so.
if [[ "${BIC_BUILD_IMAGE:-1}" == 1 ]]; then
  log "the image (hack/build-image.sh)"
  hack/build-image.sh
else
  log "the image: NOT BUILT (BIC_BUILD_IMAGE=0); hack/build-image.sh builds it and runs --version and a plan inside it"
  if [[ "${BIC_FAIL_ON_SKIP:-0}" == 1 ]]; then
    log "error: the image must be built when BIC_FAIL_ON_SKIP=1"
    exit 1
  fi
fi

if [[ -s "$BIC_SKIP_LOG" && "${BIC_FAIL_ON_SKIP:-0}" == 1 ]]; then
  log "error: tests were skipped and BIC_FAIL_ON_SKIP=1 (in CI everything they need exists)"
  exit 1
fi
log "all checks passed in $(( $(date +%s) - started ))s"
