#!/usr/bin/env bash
# Copies dashboards/boot-image-controller.json (the one to edit) into the console dashboard
# component, which kustomize can only read from its own folder.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cp "$repo/dashboards/boot-image-controller.json" "$repo/manifests/console-dashboard/boot-image-controller.json"
