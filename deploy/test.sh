#!/usr/bin/env bash
# The test command: bootstrap the machine if needed, configure, build, and run every suite
# (unit, pg, slurm, e2e) against real PostgreSQL and Slurm started in temporary directories; then, as
# root, the other supported Debian release (13 on 12, 12 on 13) in a clean root: its werror build
# without CUDA and its unit and slurm suites.
#   BATON_BUILD_DIR      build directory (default: build)
#   BATON_OTHER_RELEASE  12, 13 or none (default: the release this machine does not run)
#   BATON_OTHER_ROOT     where that clean root is kept (default: /var/cache/baton/<codename>)
#   extra arguments      passed to `meson test`, e.g. --suite unit (then only those suites run, here)
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

# The other release, in a clean root (deploy/local/debian-root.sh): there the build has no CUDA
# toolkit, so it is also the host-only build's test. Its pg and e2e suites run with
# `deploy/local/debian-root.sh 13 /var/cache/baton/trixie` (the whole test command).
other=none
if [ $# -eq 0 ] && [ "$(id -u)" -eq 0 ]; then
    other=${BATON_OTHER_RELEASE:-$(. /etc/os-release && case "${VERSION_ID:-}" in 12) echo 13 ;; 13) echo 12 ;; *) echo none ;; esac)}
fi
case "$other" in
    12 | 13)
        codename=$([ "$other" = 12 ] && echo bookworm || echo trixie)
        echo "test.sh: Debian $other ($codename) in a clean root: werror build, unit and slurm suites"
        deploy/local/debian-root.sh "$other" "${BATON_OTHER_ROOT:-/var/cache/baton/$codename}" \
            deploy/test.sh --suite unit --suite slurm
        ;;
    none) ;;
    *) echo "test.sh: BATON_OTHER_RELEASE must be 12, 13 or none, not '$other'" >&2; exit 2 ;;
esac

# Where nvcc made a CUDA build and the other release did not run, the host-only build (what a machine
# without CUDA gets) is tested here.
if [ $# -eq 0 ] && [ "$other" = none ] && grep -q 'BATON_HAVE_CUDA 1' "$builddir/baton_version.h"; then
    hostdir=$builddir-host
    [ -f "$hostdir/build.ninja" ] || meson setup "$hostdir" -Dcuda=disabled -Dbench=false
    meson compile -C "$hostdir"
    meson test -C "$hostdir" --print-errorlogs --suite unit
fi
