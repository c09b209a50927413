#!/usr/bin/env bash
# The main job: bootstrap the machine if needed, build baton, then run a real chained training end to
# end (deploy/demo/demo.py): private PostgreSQL, a private Slurm with the plugin and munge, batond,
# the PyTorch example as a chain of short jobs, a report and a timeline in the output folder.
#
#   deploy/demo.sh [--quick] [--output DIR] [--no-build | --installed] [--steps N] [--nodes N] [--keep-state]
#
# --quick: a shorter training, still in several jobs (what the e2e suite runs). --output: default
# demo-output/. --nodes: Slurm nodes, each in its own network namespace (default 2 where namespaces can
# be made, else 1). --no-build: use the build directory as it is (BATON_BUILD_DIR, default build/).
# --installed: build nothing and run the installed baton (Debian packages or meson install): only the
# services and Python modules the demo needs are installed (deploy/bootstrap.sh --runtime).
set -euo pipefail
cd "$(dirname "$0")/.."

build=1
installed=0
args=()
output=demo-output
while [ $# -gt 0 ]; do
    case $1 in
    --no-build) build=0 ;;
    --installed) installed=1 ;;
    --output) [ $# -ge 2 ] || { echo "demo.sh: --output needs a folder" >&2; exit 2; }; output=$2; shift ;;
    --quick | --keep-state) args+=("$1") ;;
    --steps | --nodes) [ $# -ge 2 ] || { echo "demo.sh: $1 needs a number" >&2; exit 2; }; args+=("$1" "$2"); shift ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" -eq 0 ] || { echo "demo.sh: run it as root (it starts Slurm's daemons and munge)" >&2; exit 2; }

if [ "$installed" -eq 1 ]; then
    deploy/bootstrap.sh --runtime
    exec /usr/bin/python3 deploy/demo/demo.py --installed --output "$output" "${args[@]}"
fi

builddir=${BATON_BUILD_DIR:-build}
if [ "$build" -eq 1 ]; then
    deploy/bootstrap.sh
    if [ -x /usr/local/cuda/bin/nvcc ]; then PATH=$PATH:/usr/local/cuda/bin; fi
    if [ -f "$builddir/build.ninja" ]; then
        meson setup --reconfigure "$builddir" >/dev/null
    else
        meson setup "$builddir" >/dev/null
    fi
    echo "demo.sh: building in $builddir (the first build takes a while)"
    meson compile -C "$builddir" >/dev/null
fi

# exec: Ctrl-C and SIGTERM reach the driver, which stops everything it started.
exec /usr/bin/python3 deploy/demo/demo.py --build-dir "$builddir" --output "$output" "${args[@]}"
