#!/usr/bin/env bash
# Prints the path of a cargo-deny binary, installing it on first use with
# `cargo install --locked` into the project's tool cache (~/.cache/boot-image-controller/tools),
# so it is built once per machine and never touches ~/.cargo/bin.
set -euo pipefail
version="0.20.2"
root="${BIC_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/boot-image-controller/tools}/cargo-deny-$version"
bin="$root/bin/cargo-deny"
if [[ ! -x "$bin" ]]; then
  echo "ensure-cargo-deny: installing cargo-deny $version into $root (once)" >&2
  cargo install --locked --quiet --version "$version" --root "$root" cargo-deny >&2
fi
echo "$bin"
