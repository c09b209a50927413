#!/usr/bin/env bash
# Checks the deploy files with the tools that consume them:
#   1. systemd-analyze verify on batond.service as configured by meson, with ExecStart pointed at the
#      built batond (verify needs the binary to exist); any message fails, and a copy with a misspelt
#      key must produce one (so the check can fail at all); systemd-sysusers --dry-run on the user;
#   2. batond --check-config on deploy/config/batond.json (and a bad copy must be refused); the
#      plugstack line names spank_baton.so and only keys the plugin knows (spank_plugin/config.cpp);
#   3. promtool check rules and promtool test rules on the alert rules;
#   4. promtool check config on the scrape config (rule file and token file paths made local);
#   5. every PromQL expression of the Grafana dashboard, Grafana variables replaced, through
#      promtool check rules;
#   6. every baton_* metric name in the rules, their tests and the dashboard is one batond exports
#      (provisioner/service/metrics.cpp; histograms as _bucket, _sum or _count).
# Usage: deploy_check.sh SOURCE_ROOT CONFIGURED_UNIT BATOND. Exit 77 (skip) only when a tool is absent.
set -euo pipefail

[ $# -eq 3 ] || { echo "usage: $0 SOURCE_ROOT CONFIGURED_UNIT BATOND" >&2; exit 2; }
src=$(realpath "$1") unit=$(realpath "$2") batond=$(realpath "$3")
deploy=$src/deploy

for tool in systemd-analyze systemd-sysusers promtool python3; do
    if ! command -v "$tool" >/dev/null; then
        echo "SKIP: $tool is not installed (deploy/bootstrap.sh installs it)" >&2
        exit 77
    fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== systemd unit"
sed "s|^ExecStart=[^ ]*/batond |ExecStart=$batond |" "$unit" > "$work/batond.service"
grep -q "^ExecStart=$batond --config /etc/baton/batond.json$" "$work/batond.service" ||
    fail "ExecStart of $unit is not '<sbindir>/batond --config /etc/baton/batond.json'"
# verify exits 0 on unknown keys and only prints them: any output is a failure.
out=$(systemd-analyze verify "$work/batond.service" 2>&1) || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify: $out"
sed 's/^NoNewPrivileges=/NoNewPrivilege=/' "$work/batond.service" > "$work/misspelt.service"
out=$(systemd-analyze verify "$work/misspelt.service" 2>&1 || true)
[ -n "$out" ] || fail "systemd-analyze verify did not notice a misspelt key: the check is blind"
mkdir -p "$work/root/etc"
out=$(systemd-sysusers --root="$work/root" --dry-run "$deploy/systemd/baton.sysusers.conf" 2>&1) ||
    fail "systemd-sysusers: $out"
grep -q "Creating user 'baton'" <<<"$out" || fail "systemd-sysusers creates no user 'baton': $out"

echo "== batond config"
"$batond" --config "$deploy/config/batond.json" --check-config
python3 - "$deploy/config/batond.json" "$work/bad.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["tick_seconds"] = 0
json.dump(config, open(sys.argv[2], "w"))
PY
if "$batond" --config "$work/bad.json" --check-config 2>"$work/bad.err"; then
    fail "batond --check-config accepted tick_seconds 0"
fi
grep -q "tick_seconds" "$work/bad.err" || fail "the refusal does not name the key: $(cat "$work/bad.err")"

echo "== plugstack.conf.d/baton.conf"
python3 - "$src/spank_plugin/config.cpp" "$deploy/slurm/plugstack.conf.d/baton.conf" <<'PY'
import re, sys
known = set(re.findall(r'key == "([a-z_]+)"', open(sys.argv[1]).read()))
if len(known) < 5:
    sys.exit(f"found only {len(known)} plugstack keys in {sys.argv[1]}: the pattern is out of date")
lines = [l.split() for l in open(sys.argv[2]) if l.strip() and not l.lstrip().startswith("#")]
if len(lines) != 1:
    sys.exit(f"{sys.argv[2]}: expected one plugin line, found {len(lines)}")
flag, path, *args = lines[0]
if flag not in ("optional", "required") or not path.startswith("/") or not path.endswith("/spank_baton.so"):
    sys.exit(f"{sys.argv[2]}: not 'optional|required /PATH/spank_baton.so ...': {' '.join(lines[0])}")
unknown = [a for a in args if a.partition("=")[0] not in known or "=" not in a]
if unknown:
    sys.exit(f"{sys.argv[2]}: keys the plugin does not know: {unknown} (known: {sorted(known)})")
print(f"{len(args)} plugin arguments, all known")
PY

echo "== alert rules"
promtool check rules "$deploy/prometheus/baton.rules.yml"
(cd "$deploy/prometheus" && promtool test rules baton.rules.test.yml)

echo "== scrape config"
echo "a-token" > "$work/token"
sed -e "s|/etc/prometheus/rules/baton.rules.yml|$deploy/prometheus/baton.rules.yml|" \
    -e "s|/etc/prometheus/baton-metrics-token|$work/token|" \
    "$deploy/prometheus/prometheus.yml" > "$work/prometheus.yml"
promtool check config "$work/prometheus.yml"

echo "== dashboard expressions"
python3 - "$deploy/grafana/baton-dashboard.json" "$work/dashboard.rules.yml" <<'PY'
import json, sys
dashboard = json.load(open(sys.argv[1]))
# Grafana's variables as Prometheus would receive them.
variables = {"$__rate_interval": "2m", "$__interval": "1m", "$__range": "24h", "$job": "batond"}
rules = []
for panel in dashboard["panels"]:
    targets = panel.get("targets", [])
    if not targets:
        sys.exit(f"panel '{panel['title']}' has no query")
    for target in targets:
        expr = target["expr"]
        for name, value in variables.items():
            expr = expr.replace(name, value)
        if "$" in expr:
            sys.exit(f"panel '{panel['title']}': unknown variable in {target['expr']}")
        rules.append({"record": f"dashboard:check_{len(rules)}", "expr": expr})
# JSON is YAML: promtool reads it as a rules file.
json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, open(sys.argv[2], "w"), indent=1)
print(f"{len(rules)} expressions in {len(dashboard['panels'])} panels")
PY
promtool check rules "$work/dashboard.rules.yml"

echo "== metric names"
python3 - "$src/provisioner/service/metrics.cpp" "$deploy/prometheus/baton.rules.yml" \
    "$deploy/prometheus/baton.rules.test.yml" "$deploy/grafana/baton-dashboard.json" <<'PY'
import re, sys
source = open(sys.argv[1]).read()
# A table of FamilyText names, each registered with its kind: family(prometheus::BuildGauge(), chainsText, ...).
names = dict(re.findall(r'constexpr FamilyText (\w+) \{ "(baton_[a-z_]+)"', source))
kinds = re.findall(r'family\(prometheus::Build(Gauge|Counter|Histogram)\(\), (\w+),', source)
families = [(kind, names[text]) for kind, text in kinds if text in names]
if len(families) < 10:
    sys.exit(f"found only {len(families)} metric families in {sys.argv[1]}: the pattern is out of date")
exported = set()
for kind, name in families:
    exported |= {name + s for s in ("_bucket", "_sum", "_count")} if kind == "Histogram" else {name}
bad = []
for path in sys.argv[2:]:
    for name in sorted(set(re.findall(r'\bbaton_[a-z_]+', open(path).read()))):
        if name not in exported:
            bad.append(f"{path}: {name}")
if bad:
    sys.exit("not exported by batond:\n  " + "\n  ".join(bad))
print(f"all names are among the {len(families)} families batond exports")
PY
echo "deploy files: all checks passed"
