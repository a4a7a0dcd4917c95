#!/usr/bin/env bash
# Prints the rule groups of a PrometheusRule manifest (its `spec`) as a plain Prometheus rules
# file, so promtool and a test Prometheus read the same rules the cluster gets. The manifest is
# the only copy of the rules.
#
# Usage: hack/promtool/extract-rules.sh [--for DURATION] [PROMETHEUSRULE_YAML]
#   --for DURATION  replace every `for:` with DURATION (e.g. 1s), for a test Prometheus that
#                   cannot wait 30 minutes (alerts without one keep firing at once)
#   default file: manifests/monitoring/prometheusrule.yaml
#
# Uses python3 with PyYAML when available; otherwise a line-based fallback that relies on the
# manifest's layout (`spec:` at the top level, two-space indentation). BIC_NO_PYYAML=1 forces
# the fallback (hack/check-rules.sh checks that both agree).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
for_override=""
if [[ "${1:-}" == --for ]]; then
  for_override="${2:?--for needs a duration}"
  shift 2
fi
file="${1:-$repo/manifests/monitoring/prometheusrule.yaml}"
[[ -f "$file" ]] || { echo "extract-rules: no such file: $file" >&2; exit 1; }

if [[ -z "${BIC_NO_PYYAML:-}" ]] && python3 -c 'import yaml' 2>/dev/null; then
  python3 - "$file" "$for_override" <<'PY'
import sys, yaml

path, for_override = sys.argv[1], sys.argv[2]
docs = [d for d in yaml.safe_load_all(open(path)) if d]
rules = [d for d in docs if d.get("kind") == "PrometheusRule"]
if len(rules) != 1:
    sys.exit(f"extract-rules: expected one PrometheusRule in {path}, found {len(rules)}")
spec = rules[0].get("spec") or {}
if not spec.get("groups"):
    sys.exit(f"extract-rules: the PrometheusRule in {path} has no spec.groups")
if for_override:
    for group in spec["groups"]:
        for rule in group.get("rules", []):
            if "for" in rule:
                rule["for"] = for_override


def block_strings(dumper, value):
    # Multi-line expressions stay readable as literal blocks.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


yaml.SafeDumper.add_representer(str, block_strings)
yaml.safe_dump(spec, sys.stdout, sort_keys=False, width=1000, allow_unicode=True)
PY
else
  # Everything after the top-level `spec:` line, one indentation level less.
  out="$(awk '
    /^spec:[[:space:]]*$/ { inside = 1; next }
    /^[^[:space:]#]/      { inside = 0 }
    inside                { sub(/^  /, ""); print }
  ' "$file")"
  grep -q '^groups:' <<<"$out" || {
    echo "extract-rules: no top-level spec.groups found in $file (install python3-yaml for a real YAML parser)" >&2
    exit 1
  }
  if [[ -n "$for_override" ]]; then
    out="$(sed -E "s/^([[:space:]]+)for:[[:space:]].*/\\1for: $for_override/" <<<"$out")"
  fi
  printf '%s\n' "$out"
fi
