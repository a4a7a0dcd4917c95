#!/usr/bin/env bash
# Prints the path of `mitmdump`, the TLS-inspecting proxy the egress tests use (it re-signs every
# TLS connection with its own CA, as an enterprise's inspecting proxy does), installing mitmproxy
# from PyPI into a virtualenv of the project's tool cache on first use, as hack/ensure-moto.sh.
set -euo pipefail
version="11.0.2"
root="${BIC_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/boot-image-controller/tools}/mitmproxy-$version"
bin="$root/bin/mitmdump"
mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock 9
if [[ ! -f "$root/.complete" ]]; then
  echo "ensure-mitmproxy: installing mitmproxy $version into $root (once)" >&2
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    apt-get install -y -qq python3-venv >&2
  fi
  rm -rf "$root"
  python3 -m venv "$root" >&2
  "$root/bin/pip" install --quiet --disable-pip-version-check "mitmproxy==$version" >&2
  touch "$root/.complete"
fi
echo "$bin"
