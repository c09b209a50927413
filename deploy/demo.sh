#!/usr/bin/env bash
# The main job: bootstrap the machine if needed, build baton, and show what was built.
# (This grows into the one-command demo of a checkpointed job chain under Slurm.)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -eq 0 ]; then deploy/bootstrap.sh; fi
if [ -x /usr/local/cuda/bin/nvcc ]; then PATH=$PATH:/usr/local/cuda/bin; fi

builddir=${BATON_BUILD_DIR:-build}
if [ -f "$builddir/build.ninja" ]; then
    meson setup --reconfigure "$builddir" >/dev/null
else
    meson setup "$builddir" >/dev/null
fi
meson compile -C "$builddir" >/dev/null

echo "baton $(meson introspect --projectinfo "$builddir" | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')"
echo "components:"
show() {  # show LABEL PROGRAM [ARGS...]
    local label=$1; shift
    if [ -x "$1" ]; then printf '  %-14s %s\n' "$label" "$("$@" 2>&1 | head -n1)"; fi
}
show baton-ckpt "$builddir/checkpointer/baton-ckpt" --version
show batonctl "$builddir/provisioner/batonctl/batonctl" version
show batond "$builddir/provisioner/service/batond" --version
[ -f "$builddir/spank_plugin/spank_baton.so" ] && printf '  %-14s %s\n' spank_baton.so "$builddir/spank_plugin/spank_baton.so"
echo "platform:"
printf '  %-14s %s\n' Slurm "$(dpkg-query -W -f '${Version}' slurmctld)"
printf '  %-14s %s\n' PostgreSQL "$(psql --version)"
printf '  %-14s %s\n' CUDA "$(grep -q 'BATON_HAVE_CUDA 1' "$builddir/baton_version.h" && echo "built in (host path used when no GPU is present)" || echo "not built")"
