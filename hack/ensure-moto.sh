#!/usr/bin/env bash
# Prints the path of a `moto_server` (the EC2 simulator the EC2 tests talk to), installing moto
# from PyPI into a virtualenv of the project's tool cache (~/.cache/boot-image-controller/tools)
# on first use, so it is installed once per machine and never touches the system Python.
set -euo pipefail
version="5.2.5"
root="${BIC_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/boot-image-controller/tools}/moto-$version"
bin="$root/bin/moto_server"
mkdir -p "$(dirname "$root")"
# Test binaries run in parallel and may all ask at once: one installs, the others wait.
exec 9>"$root.lock"
flock 9
# A venv records its own path, so it is built where it stays; the marker says it is complete.
if [[ ! -f "$root/.complete" ]]; then
  echo "ensure-moto: installing moto[server] $version into $root (once)" >&2
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    # Debian ships venv apart from python3.
    apt-get install -y -qq python3-venv >&2
  fi
  rm -rf "$root"
  python3 -m venv "$root" >&2
  "$root/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$version" >&2
  touch "$root/.complete"
fi
echo "$bin"
