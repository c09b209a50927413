#!/usr/bin/env bash
# The test command: bootstrap the machine if needed, configure, build, and run every suite
# (unit, pg, slurm, e2e) against real PostgreSQL and Slurm started in temporary directories; where the
# CUDA build was made, the unit suite of a host-only build as well.
#   BATON_BUILD_DIR   build directory (default: build)
#   extra arguments   passed to `meson test`, e.g. --suite unit
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -eq 0 ]; then
    deploy/bootstrap.sh
else
    echo "test.sh: not root: skipping deploy/bootstrap.sh (the pg, slurm and e2e suites need root)" >&2
fi

# nvcc is not on PATH by default where the CUDA toolkit is installed; the build uses it when found.
if [ -x /usr/local/cuda/bin/nvcc ]; then PATH=$PATH:/usr/local/cuda/bin; fi

builddir=${BATON_BUILD_DIR:-build}
if [ -f "$builddir/build.ninja" ]; then
    meson setup --reconfigure "$builddir" >/dev/null
else
    meson setup "$builddir"
fi
meson compile -C "$builddir"
meson test -C "$builddir" --print-errorlogs "$@"

# The trace readers parse untrusted files: their tests run once more under UBSan, so that a signed
# overflow or an out-of-range conversion fails the run instead of storing a wrapped value. Only the
# reader test is compiled in that build directory (it takes seconds, not a second full build).
if [ $# -eq 0 ]; then
    ubsandir=$builddir-ubsan
    [ -f "$ubsandir/build.ninja" ] || meson setup "$ubsandir" -Dcuda=disabled -Dbench=false \
        -Db_sanitize=undefined -Db_lundef=false >/dev/null
    meson compile -C "$ubsandir" trace_reader_test
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        meson test -C "$ubsandir" --no-rebuild --print-errorlogs trace_reader_test
fi

# Where nvcc made a CUDA build, the host-only build (what a machine without CUDA gets) is tested too.
if [ $# -eq 0 ] && grep -q 'BATON_HAVE_CUDA 1' "$builddir/baton_version.h"; then
    hostdir=$builddir-host
    [ -f "$hostdir/build.ninja" ] || meson setup "$hostdir" -Dcuda=disabled -Dbench=false
    meson compile -C "$hostdir"
    meson test -C "$hostdir" --print-errorlogs --suite unit
fi
