#!/usr/bin/env bash
# Counts the production lines of src/ per area, against the budgets of issue 49 and of the
# features added since (docs/architecture.md, "Line budgets", shows the same table and a docs
# test keeps it equal to `hack/count-lines.sh --markdown`).
#
# Production lines: the lines of a file of src/ before its first `#[cfg(test)]` at the start of
# a line, leaving out src/testkit/ and files named tests*.rs. Code lines: the same without blank
# lines and `//` comment lines, so that deleting comments does not look like progress.
#
# Every file belongs to exactly one area: a path names a file, a path ending in / a folder (every
# file under it that no path names). A file in no area, or named twice, is an error (exit 1):
# place a new file in the table below.
#
# It also lists the functions longer than 80 lines. That scan is approximate: it follows brace
# depth from each `fn` to its closing brace, skipping strings, character literals and comments,
# and reads no macros.
#
#   hack/count-lines.sh             the table, totals and long functions
#   hack/count-lines.sh --markdown  the table as docs/architecture.md shows it
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo/src"

mode=text
case "${1:-}" in
  "") ;;
  --markdown) mode=markdown ;;
  *) echo "usage: $0 [--markdown]" >&2; exit 2 ;;
esac

# area|budget|paths under src/
# A budget is issue 49's, then what each feature added to the area since the issue was written
# (at c6c9e5c), as "name lines": "safety" is issue 46 (boot evidence that cannot blame a good
# image, standing down before judging inputs, lenient watches, bounded text, shared stubs),
# merged after it; "fleet report" is issue 50's `plan --live` over several contexts; the rest
# are issues 47 and 48. A feature with files of its own is an area.
# "look-ups" is the bookkeeping EC2 and vCenter share (issue 49, detour 1): its budget is what it
# took out of the loop, EC2 and vCenter.
areas='
loop|1750, safety 171, egress 18, STS 12, OVA mirror 14, opt-in 9, hold limit 7, stub-hold Event 21, look-ups -47|controller/mod.rs controller/act.rs controller/observe.rs controller/report.rs controller/retry.rs controller/config.rs
watches|750, safety 105|controller/watches.rs controller/lenient.rs controller/secrets.rs
status|1050, safety 194, opt-in 25, OVA mirror 1|controller/status/
events|150, stub-hold Event 1|controller/events.rs
metrics|330, OVA mirror 1|metrics.rs
server|900, safety 172|server/
lease|360|controller/lease.rs
planner|2300, safety 140, opt-in 173|plan/mod.rs plan/decision.rs plan/gates.rs plan/rules.rs plan/selection.rs plan/history.rs plan/patch.rs plan/other_managers.rs plan/nodes.rs
stub|520, safety 108|plan/stub.rs plan/pointer_config.rs plan/shared_stubs.rs revert/stub_secret.rs
Cluster API|520, safety 3|plan/cluster_api_templates.rs controller/templates.rs
boot evidence|800, safety 527|plan/boot_evidence.rs plan/boot_follow.rs controller/boot_watches.rs controller/node_watch.rs
platform/|1600, safety 11, opt-in 21|platform/
EC2|1350, STS 143, egress 2, look-ups -19|ec2/ controller/ami_lookups.rs facts/ec2.rs facts/region.rs
STS|0, STS 185|ec2/sts.rs
vCenter|1950, OVA mirror 96, egress -9, look-ups -2|vcenter/ controller/template_imports.rs facts/vcenter.rs
revert|950|revert.rs cli/revert.rs plan/undo.rs
CLI|1750, safety 18, egress 4, opt-in 11, fleet report 56|cli/ manifests.rs main.rs
fleet report|0, fleet report 353|cli/fleet.rs
model|1750, safety 270, OVA mirror 7, opt-in 9|api.rs machine_kind.rs golden_stream.rs known_images.rs controller/remembered_images.rs reason.rs names.rs arch.rs quoted.rs lib.rs facts/mod.rs
plumbing|220, egress 225|api_client.rs http_client.rs kubeconfig.rs bounded_read.rs
egress proxy|0, egress 284|http_client/proxy.rs
look-ups|0, loop 47, EC2 19, vCenter 2|controller/lookups.rs
'

mapfile -t files < <(find . -name '*.rs' ! -path './testkit/*' ! -name 'tests*.rs' | sed 's|^\./||' | LC_ALL=C sort)
awk -v areas="$areas" -v mode="$mode" '
function area_of(file,    best, best_len, p, n) {
  if (file in exact) return exact[file]
  best = ""; best_len = 0
  for (p in folder) {
    n = length(p)
    if (substr(file, 1, n) == p && n > best_len) { best = folder[p]; best_len = n }
  }
  return best
}

# Braces of one line outside strings, character literals and comments; `fn` positions are
# recorded on the way (fn_at > 0 when a `fn name` starts on this line outside them).
function scan(line,    i, c, n, out, rest) {
  out = ""; n = length(line); fn_at = 0
  for (i = 1; i <= n; i++) {
    c = substr(line, i, 1)
    if (in_str) {
      if (c == "\\" && !raw_hashes_set) { i++; continue }
      if (c == "\"") {
        if (!raw_hashes_set) { in_str = 0; continue }
        if (substr(line, i + 1, raw_hashes) == hashes(raw_hashes)) { in_str = 0; raw_hashes_set = 0; i += raw_hashes }
      }
      continue
    }
    if (c == "/" && substr(line, i + 1, 1) == "/") break
    if (c == "r" && match(substr(line, i), /^r#*"/) && (i == 1 || substr(line, i - 1, 1) !~ /[A-Za-z0-9_]/)) {
      raw_hashes = RLENGTH - 2; raw_hashes_set = 1; in_str = 1; i += RLENGTH - 1; continue
    }
    if (c == "\"") { in_str = 1; raw_hashes_set = 0; continue }
    if (c == "\047") {
      if (substr(line, i + 1, 1) == "\\") { rest = substr(line, i + 2); if (match(rest, /\047/)) i += 1 + RSTART; continue }
      if (substr(line, i + 2, 1) == "\047") { i += 2; continue }
      continue
    }
    if (c == "f" && !fn_at && match(substr(line, i), /^fn [A-Za-z_][A-Za-z0-9_]*/) && (i == 1 || substr(line, i - 1, 1) !~ /[A-Za-z0-9_]/)) {
      fn_at = length(out) + 1; fn_name = substr(line, i + 3, RLENGTH - 3)
    }
    if (index("{};()[]", c)) out = out c
  }
  return out
}
function hashes(k,    s) { s = ""; while (k-- > 0) s = s "#"; return s }

function fn_braces(file, lineno, line,    b, i, c) {
  b = scan(line)
  if (fn_at && !open && !pending) { pending = 1; parens = 0; fn_start = lineno; fn_file = file; fn_title = fn_name }
  for (i = 1; i <= length(b); i++) {
    c = substr(b, i, 1)
    if (pending && i >= (fn_at ? fn_at : 1)) {
      if (c == "(" || c == "[") parens++
      else if (c == ")" || c == "]") parens--
      else if (c == ";" && parens == 0) { pending = 0; continue }
      else if (c == "{") { pending = 0; open = 1; open_depth = depth }
    }
    if (c == "{") depth++
    else if (c == "}") {
      depth--
      if (open && depth == open_depth) {
        open = 0
        if (lineno - fn_start + 1 > 80) long[++nlong] = sprintf("%5d  %s:%d %s", lineno - fn_start + 1, fn_file, fn_start, fn_title)
      }
    }
  }
  if (fn_at) fn_at = 0
}

BEGIN {
  na = split(areas, rows, "\n")
  for (r = 1; r <= na; r++) {
    if (rows[r] == "") continue
    split(rows[r], f, "|")
    order[++nareas] = f[1]; paths[f[1]] = f[3]
    nt = split(f[2], terms, ", ")
    budget[f[1]] = terms[1]; shown = terms[1]
    for (k = 2; k <= nt; k++) {
      budget[f[1]] += substr(terms[k], match(terms[k], /-?[0-9]+$/))
      shown = shown " + " terms[k]
    }
    budget_text[f[1]] = nt == 1 ? shown : terms[1] == 0 && nt == 2 ? budget[f[1]] : budget[f[1]] " = " shown
    np = split(f[3], ps, " ")
    for (k = 1; k <= np; k++) {
      if (ps[k] ~ /\/$/) { if (ps[k] in folder) dup = dup " " ps[k]; folder[ps[k]] = f[1] }
      else { if (ps[k] in exact) dup = dup " " ps[k]; exact[ps[k]] = f[1] }
    }
  }
  for (k = 1; k < ARGC; k++) if (area_of(ARGV[k]) == "") homeless = homeless " src/" ARGV[k]
}
FNR == 1 {
  area = area_of(FILENAME)
  testing = 0; depth = 0; open = 0; pending = 0; in_str = 0
}
/^#\[cfg\(test\)\]/ { testing = 1 }
testing || area == "" { next }
{
  prod[area]++
  if ($0 !~ /^[ \t]*(\/\/.*)?$/) code[area]++
  fn_braces(FILENAME, FNR, $0)
}
END {
  if (dup != "") { print "count-lines: named twice:" dup > "/dev/stderr"; exit 1 }
  if (homeless != "") { print "count-lines: in no area (add them to hack/count-lines.sh):" homeless > "/dev/stderr"; exit 1 }
  for (a = 1; a <= nareas; a++) { name = order[a]; tp += prod[name]; tc += code[name]; tb += budget[name] }
  if (mode == "markdown") {
    print "| area | files (under `src/`) | lines today | code lines today | budget |"
    print "|---|---|--:|--:|--:|"
    for (a = 1; a <= nareas; a++) {
      name = order[a]; list = paths[name]; gsub(/ /, "`, `", list)
      printf "| %s | `%s` | %d | %d | %s |\n", name, list, prod[name], code[name], budget_text[name]
    }
    printf "| **total** | | **%d** | **%d** | **%d** |\n", tp, tc, tb
    exit 0
  }
  printf "%-16s %7s %7s %7s  %s\n", "area", "lines", "code", "budget", "within"
  for (a = 1; a <= nareas; a++) {
    name = order[a]
    printf "%-16s %7d %7d %7d  %s\n", name, prod[name], code[name], budget[name], prod[name] <= budget[name] ? "yes" : "no, " prod[name] - budget[name] " over"
  }
  printf "%-16s %7d %7d %7d  %s\n", "total", tp, tc, tb, tp <= tb ? "yes" : "no, " tp - tb " over"
  printf "\nfunctions over 80 lines (approximate: a brace-depth scan from each fn): %d\n", nlong
  for (k = 1; k <= nlong; k++) print long[k]
}
' "${files[@]}"
