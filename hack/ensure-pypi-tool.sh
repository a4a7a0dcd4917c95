#!/usr/bin/env bash
# Prints the path of COMMAND from the PyPI requirement NAME[EXTRAS]==VERSION, installed into a
# virtualenv of the project's tool cache (~/.cache/boot-image-controller/tools) on first use, so
# it is installed once per machine and never touches the system Python. hack/ensure-moto.sh and
# hack/ensure-mitmproxy.sh name theirs.
#
# Usage: hack/ensure-pypi-tool.sh NAME REQUIREMENT COMMAND
set -euo pipefail
name="${1:?usage: $0 NAME REQUIREMENT COMMAND}"
requirement="${2:?usage: $0 NAME REQUIREMENT COMMAND}"
command="${3:?usage: $0 NAME REQUIREMENT COMMAND}"
version="${requirement##*==}"
root="${BIC_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/boot-image-controller/tools}/$name-$version"
mkdir -p "$(dirname "$root")"
# Test binaries run in parallel and may all ask at once: one installs, the others wait.
exec 9>"$root.lock"
flock 9
# A venv records its own path, so it is built where it stays; the marker says it is complete.
if [[ ! -f "$root/.complete" ]]; then
  echo "ensure-$name: installing $requirement into $root (once)" >&2
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    # Debian ships venv apart from python3.
    apt-get install -y -qq python3-venv >&2
  fi
  rm -rf "$root"
  python3 -m venv "$root" >&2
  "$root/bin/pip" install --quiet --disable-pip-version-check "$requirement" >&2
  touch "$root/.complete"
fi
echo "$root/bin/$command"
