#!/usr/bin/env bash
# The checkpointer builds alone: a configuration with the service and the plugin off looks for none of
# their dependencies (so a machine without libpq, prometheus-cpp, cpp-httplib, Boost, xgboost, MUNGE or
# the Slurm headers can build it) and still builds libbaton-ckpt, baton-ckpt and the Python module.
# Configures only (seconds); the wheel test (tests/python/wheel_test.py) builds this configuration.
#   alone_test.sh SOURCE_DIR
set -euo pipefail
source=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

meson setup "$tmp/build" "$source" -Dservice=false -Dplugin=false -Dtests=false -Dbench=false \
    -Dcuda=disabled >"$tmp/setup.out" 2>&1 || { cat "$tmp/setup.out"; exit 1; }
log=$tmp/build/meson-logs/meson-log.txt
looked=$(grep -E -i 'dependency (libpq|prometheus|cpp-httplib|boost|openssl)|library (xgboost|munge)|header "slurm/spank.h"|munge\.h|xgboost/c_api\.h' "$log" || true)
if [ -n "$looked" ]; then
    echo "alone_test: the checkpointer-only configuration looked for the service's or plugin's dependencies:" >&2
    echo "$looked" >&2
    exit 1
fi
targets=$(meson introspect --targets "$tmp/build" | python3 -c 'import json, sys; print(" ".join(sorted(t["name"] for t in json.load(sys.stdin))))')
for wanted in "baton-ckpt " "_native."; do
    case " $targets " in *" $wanted"*) ;; *) echo "alone_test: no target $wanted in: $targets" >&2; exit 1 ;; esac
done
for unwanted in batond batonctl spank_baton; do
    case " $targets " in *" $unwanted "*) echo "alone_test: $unwanted is built: $targets" >&2; exit 1 ;; esac
done
echo "checkpointer alone: targets $targets; none of the service's or plugin's dependencies looked for"
