#!/usr/bin/env bash
# Checks the alerting rules with promtool: `promtool check rules` on the rules of
# manifests/monitoring/prometheusrule.yaml, then `promtool test rules` with the unit tests in
# hack/promtool/tests.yaml (every alert, firing and not firing). Also parses every query of
# dashboards/*.json with promtool. For a fleet (docs/fleet.md): checks the per-cluster recording
# rules of manifests/monitoring/prometheusrule-fleet.yaml and runs their unit tests
# (hack/promtool/fleet-tests.yaml), and checks the hub's rules of
# deploy/acm/observability/thanos-ruler-custom-rules.yaml. Exits non-zero on any failure.
#
# promtool comes from Debian's `prometheus` package, installed when missing by
# hack/ensure-prometheus.sh (as root; the service is not started). Needs python3; PyYAML enables
# the stricter checks of the test file.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { echo "check-rules: $*" >&2; }
die() { log "error: $*"; exit 1; }

"$repo/hack/ensure-prometheus.sh" || die "promtool is needed"
log "$(promtool --version 2>&1 | head -n1)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# promtool reads rule_files relative to the test file, so both go into one directory.
"$repo/hack/promtool/extract-rules.sh" >"$work/rules.yaml"
cp "$repo/hack/promtool/tests.yaml" "$work/tests.yaml"

# The line-based fallback of extract-rules.sh (for hosts without PyYAML) must read the manifest
# the same way.
if python3 -c 'import yaml' 2>/dev/null; then
  BIC_NO_PYYAML=1 "$repo/hack/promtool/extract-rules.sh" >"$work/rules-fallback.yaml"
  python3 - "$work/rules.yaml" "$work/rules-fallback.yaml" <<'PY' ||
import sys, yaml
a, b = (yaml.safe_load(open(p)) for p in sys.argv[1:])
sys.exit(a != b)
PY
    die "extract-rules.sh without PyYAML reads manifests/monitoring/prometheusrule.yaml differently"
fi

# Every alert in the rules has a unit test.
mapfile -t alerts < <(sed -nE 's/^[[:space:]]*-?[[:space:]]*alert:[[:space:]]*([A-Za-z0-9_]+).*/\1/p' "$work/rules.yaml" | sort -u)
((${#alerts[@]} > 0)) || die "no alerts found in the rules"
untested=()
for alert in "${alerts[@]}"; do
  grep -qE "alertname:[[:space:]]*$alert\$" "$work/tests.yaml" || untested+=("$alert")
done
((${#untested[@]} == 0)) || die "alerts without a test in hack/promtool/tests.yaml: ${untested[*]}"
# ... and both a case where it fires and one where it must not.
if python3 -c 'import yaml' 2>/dev/null; then
  python3 - "$work/tests.yaml" "${alerts[@]}" <<'PY' || die "every alert needs a firing and a quiet case, each firing with a namespace label, in hack/promtool/tests.yaml"
import sys, yaml
tests = yaml.safe_load(open(sys.argv[1]))["tests"]
cases = {}
for test in tests:
    for case in test.get("alert_rule_test", []):
        cases.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
missing = [a for a in sys.argv[2:] if cases.get(a) != {True, False}]
# promtool compares labels exactly, so an expected `namespace` proves the alert carries one:
# every runbook starts from the controller's namespace.
for test in tests:
    for case in test.get("alert_rule_test", []):
        for alert in case.get("exp_alerts") or []:
            if "namespace" not in alert.get("exp_labels", {}):
                print(f"check-rules: {case['alertname']}: an expected alert without a namespace label", file=sys.stderr)
                missing.append(case["alertname"])
for alert in missing:
    print(f"check-rules: {alert}: has {'no firing' if True not in cases.get(alert, ()) else 'no quiet'} case", file=sys.stderr)
sys.exit(1 if missing else 0)
PY
fi

# The dashboards' queries, with Grafana's variables filled in, as recording rules: promtool
# then parses every one of them.
python3 - "$work/dashboard-queries.yaml" "$repo"/dashboards/*.json <<'PY'
import json, sys

out, paths = sys.argv[1], sys.argv[2:]
values = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h", "$namespace": ".*"}
rules = []
for path in paths:
    def walk(panels):
        for panel in panels:
            walk(panel.get("panels", []))
            for target in panel.get("targets", []):
                expr = target.get("expr", "")
                for name, value in values.items():
                    expr = expr.replace(name, value)
                if "$" in expr:
                    sys.exit(f"{path}: panel {panel.get('title')!r} uses a variable this check does not know: {expr}")
                rules.append({"record": f"dashboard:query_{len(rules)}", "expr": expr})
    walk(json.load(open(path)).get("panels", []))
with open(out, "w") as f:
    json.dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}, f, indent=1)
PY

# The per-cluster recording rules a fleet's hub collects, and the hub's own alerts (the
# custom_rules.yaml of deploy/acm/observability/thanos-ruler-custom-rules.yaml); both run in
# tests/suite/fleet.rs on three controllers' data.
"$repo/hack/promtool/extract-rules.sh" "$repo/manifests/monitoring/prometheusrule-fleet.yaml" >"$work/fleet-rules.yaml"
python3 - "$repo/deploy/acm/observability/thanos-ruler-custom-rules.yaml" >"$work/hub-rules.yaml" <<'PY'
import sys
# The ConfigMap's one literal block, without PyYAML: every line under `custom_rules.yaml: |`.
lines = open(sys.argv[1]).read().split("\n")
start = next(i for i, l in enumerate(lines) if l.strip() == "custom_rules.yaml: |") + 1
indent = len(lines[start]) - len(lines[start].lstrip())
print("\n".join(l[indent:] for l in lines[start:]))
PY

cd "$work"
promtool check rules rules.yaml
promtool check rules fleet-rules.yaml hub-rules.yaml
cp "$repo/hack/promtool/fleet-tests.yaml" fleet-tests.yaml
promtool test rules fleet-tests.yaml
promtool test rules tests.yaml
if ! out="$(promtool check rules dashboard-queries.yaml 2>&1)"; then
  printf '%s\n' "$out" >&2
  die "a query in dashboards/ does not parse"
fi
log "ok: ${#alerts[@]} alerts checked and tested; dashboard queries and hub rules parse; fleet recording rules tested"
