#!/usr/bin/env bash
# The test command: bootstrap the machine if needed, configure, build, and run every suite
# (unit, pg, slurm, e2e) against real PostgreSQL and Slurm started in temporary directories; then, as
# root, the live chain benchmark's quick form and the other supported Debian release (13 on 12, 12 on
# 13) in a clean root: its werror build without CUDA, its unit and slurm suites, then its quick demo and
# one multi-node test (namespaced nodes inside the root).
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

# The other release runs in a clean root (deploy/local/debian-root.sh) with no CUDA toolkit, so its
# build is also the test of the host-only build. Its preparation (debootstrap, dependencies) and its
# build run in the background at the lowest CPU priority while this machine builds and tests, on time
# the suites here leave idle; its suites run last, alone. The whole test command in that root, pg and
# e2e included: `deploy/local/debian-root.sh 13 /var/cache/baton/trixie`.
other=none
if [ $# -eq 0 ] && [ "$(id -u)" -eq 0 ]; then
    other=${BATON_OTHER_RELEASE:-$(. /etc/os-release && case "${VERSION_ID:-}" in 12) echo 13 ;; 13) echo 12 ;; *) echo none ;; esac)}
fi
case "$other" in
    12) codename=bookworm ;;
    13) codename=trixie ;;
    none) ;;
    *) echo "test.sh: BATON_OTHER_RELEASE must be 12, 13 or none, not '$other'" >&2; exit 2 ;;
esac
if [ "$other" != none ]; then
    other_root=${BATON_OTHER_ROOT:-/var/cache/baton/$codename}
    other_logs=$builddir-debian$other-logs
    mkdir -p "$other_logs"
    # The root's build directory: benchmarks left out, for time (the whole test command builds them).
    other_build="env BATON_BUILD_DIR=build-check"
    # Its failures are told on standard output, with the test results (a CI log may show only that).
    background_step() { # background_step NAME COMMAND...: runs in the root, output in $other_logs/NAME.log
        local name=$1 status=0
        shift
        ${other_nice-nice -n 19} deploy/local/debian-root.sh "$other" "$other_root" "$@" >"$other_logs/$name.log" 2>&1 ||
            status=$?
        if [ $status -ne 0 ]; then
            tail -n 60 "$other_logs/$name.log"
            echo "test.sh: Debian $other ($codename): $name failed (exit $status); the log is $other_logs/$name.log"
        fi
        return $status
    }
    # Should this script stop early, a step under way goes on to its end (and unmounts what it mounted).
    trap '[ -z "${other_job:-}" ] || ! kill -0 "$other_job" 2>/dev/null ||
        echo "test.sh: the Debian $other step goes on in the background; its log is in $other_logs" >&2' EXIT
    echo "test.sh: preparing Debian $other ($codename) in a clean root at $other_root, in the background"
    background_step prepare deploy/bootstrap.sh &
    other_job=$!
fi

if [ -f "$builddir/build.ninja" ]; then
    meson setup --reconfigure "$builddir" >/dev/null
else
    meson setup "$builddir"
fi
meson compile -C "$builddir"

# A machine that cannot host the root (no mirror, debootstrap or mounts refused: debian-root.sh's exit
# 77) skips the other release, as a suite without its device does, and tests the host-only build instead.
if [ "$other" != none ]; then
    prepared=0
    wait "$other_job" || prepared=$?
    if [ $prepared -eq 77 ]; then
        echo "test.sh: SKIPPED Debian $other ($codename): this machine cannot host a clean root (see above)"
        other=none
    elif [ $prepared -ne 0 ]; then
        exit $prepared
    fi
fi
if [ "$other" != none ]; then
    echo "test.sh: building Debian $other ($codename) in its root, in the background"
    background_step build $other_build bash -c \
        '[ -f "$BATON_BUILD_DIR/build.ninja" ] || meson setup "$BATON_BUILD_DIR" -Dbench=false; meson compile -C "$BATON_BUILD_DIR"' &
    other_job=$!
fi

meson test -C "$builddir" --print-errorlogs "$@"

# The other release's unit suite (but host-release) runs beside the live chain benchmark below, whose
# jobs mostly sleep, at normal priority: it starts no cluster of its own. Its slurm suite, demo and
# multi-node test run after it (one run in the root at a time), alone.
if [ "$other" != none ]; then
    wait "$other_job" || exit $?
    echo "test.sh: Debian $other ($codename) in its clean root: the unit suite (but host-release), in the background"
    other_nice= background_step unit $other_build deploy/test.sh --suite unit --no-suite host-release &
    other_job=$!
fi

# The live chain benchmark's quick form (bench/chains, about 8 minutes) runs too, so that it keeps
# working: it fails when an arm could not run at all, and its figures are not judged (a shared machine
# is too noisy for that). Without the traces it says why and is skipped (exit 77). It runs after the
# suites: its clusters must not share the machine with a suite's clusters (a quick demo run beside a load
# of that size, the chaos test's, took over 560 s instead of 250 s); the other release's unit suite,
# which starts none, runs beside it.
if [ $# -eq 0 ] && [ "$(id -u)" -eq 0 ]; then
    meson test -C "$builddir" --benchmark --print-errorlogs chain_bench_quick
fi

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

if [ "$other" != none ]; then
    unit=0
    wait "$other_job" || unit=$?
    tail -n 40 "$other_logs/unit.log"
    [ $unit -eq 0 ] || exit $unit
    echo "test.sh: Debian $other ($codename) in its clean root: the slurm suite, then demo_test and cluster_handover_test"
    other_job=
    # The quick demo and one multi-node test (cluster.sh's namespaced nodes inside the root) run side by
    # side, on the build the suites' run left: the multi-node test's jobs mostly sleep. (meson test takes
    # suites or names, not both: these two are a run of their own.)
    deploy/local/debian-root.sh "$other" "$other_root" $other_build bash -c 'deploy/test.sh --suite slurm || exit
        b=$BATON_BUILD_DIR
        meson test -C "$b" --no-rebuild --print-errorlogs --logbase demo demo_test & demo=$!
        meson test -C "$b" --no-rebuild --print-errorlogs --logbase cluster cluster_handover_test; cluster=$?
        wait $demo && exit $cluster'
fi

# Where nvcc made a CUDA build and no other release ran, the host-only build (what a machine without
# CUDA gets) is tested here.
if [ $# -eq 0 ] && [ "$other" = none ] && grep -q 'BATON_HAVE_CUDA 1' "$builddir/baton_version.h"; then
    hostdir=$builddir-host
    [ -f "$hostdir/build.ninja" ] || meson setup "$hostdir" -Dcuda=disabled -Dbench=false
    meson compile -C "$hostdir"
    meson test -C "$hostdir" --print-errorlogs --suite unit
fi
