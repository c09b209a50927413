#!/usr/bin/env bash
# Installs every build, run and test dependency of baton on Debian 12 (bookworm) or Debian 13 (trixie).
# Run as root. Idempotent: a second run installs nothing and returns quickly.
#   deploy/bootstrap.sh [--runtime | --apt-source]
# --apt-source: on Debian 12 only the pinned Debian 13 source below, from which apt installs the
# prometheus-cpp libraries that the baton package needs (Debian 13 needs nothing).
# --runtime: that source, and what the demo needs to run the installed packages (deploy/demo.sh
# --installed: PostgreSQL, Slurm, munge, PyTorch, scikit-learn, matplotlib), no build tools.
set -euo pipefail

die() { echo "bootstrap: $*" >&2; exit 1; }

mode=all
case "${1:-}" in
    --runtime) mode=runtime ;;
    --apt-source) mode=apt-source ;;
    "") ;;
    *) die "usage: $0 [--runtime | --apt-source]" ;;
esac

[ "$(id -u)" -eq 0 ] || die "must run as root (it installs Debian packages)"
[ -r /etc/os-release ] || die "cannot read /etc/os-release: unsupported system"
. /etc/os-release
[ "${ID:-}" = debian ] && { [ "${VERSION_ID:-}" = 12 ] || [ "${VERSION_ID:-}" = 13 ]; } ||
    die "supported systems are Debian 12 (bookworm) and Debian 13 (trixie); this is ${PRETTY_NAME:-unknown}"

export DEBIAN_FRONTEND=noninteractive

packages=(
    build-essential pkg-config meson ninja-build git
    libpq-dev postgresql postgresql-client
    slurmctld slurmd slurm-client libslurm-dev munge libmunge-dev
    slurmdbd mariadb-server # the chain benchmark's accounting (cluster.sh --accounting)
    nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
    libboost-dev libcpp-httplib-dev libcivetweb-dev libxgboost-dev libxxhash-dev zlib1g-dev libbz2-dev
    pybind11-dev python3-dev python3-numpy python3-torch python3-sklearn python3-matplotlib
    python3-venv python3-pip python3-mesonpy python3-build # the checkpointer's pip install (pyproject.toml)
    prometheus systemd valgrind procps iproute2 curl ca-certificates
)
if [ "$VERSION_ID" = 13 ]; then
    # Debian 13 has prometheus-cpp; its cpp-httplib header is built with OpenSSL (libssl-dev).
    packages+=(prometheus-cpp-dev libssl-dev)
    prometheus_runtime=()
    prometheus_dev_marker= # a package of the list above
else
    prometheus_runtime=(libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0)
    prometheus_dev_marker=/usr/local/lib/pkgconfig/prometheus-cpp-pull.pc
fi

trixie_list=/etc/apt/sources.list.d/baton-trixie.list
if [ "$mode" != all ]; then
    packages=()
    [ "$mode" = apt-source ] || packages=(postgresql slurmctld slurmd slurm-client munge
        python3-numpy python3-torch python3-sklearn python3-matplotlib procps iproute2)
    prometheus_runtime=()
    prometheus_dev_marker=
fi

missing=()
for p in ${packages[@]+"${packages[@]}"} ${prometheus_runtime[@]+"${prometheus_runtime[@]}"}; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ] && { [ -z "$prometheus_dev_marker" ] || [ -f "$prometheus_dev_marker" ]; } &&
    { [ "$VERSION_ID" = 13 ] || [ "$mode" = all ] || [ -f "$trixie_list" ]; }; then
    echo "bootstrap: all dependencies present"
    exit 0
fi

if [ "$VERSION_ID" = 13 ]; then
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${packages[@]}"
    echo "bootstrap: done"
    exit 0
fi

# baton builds on trixie's prometheus-cpp (1.0.2; bookworm's is 1.0.1); its trixie binaries work. Add
# a trixie source built from the Debian mirror this machine already uses, pinned low so that nothing
# else is upgraded from it. The prometheus-cpp libraries alone are pinned like bookworm's own packages,
# so that apt takes trixie's newer ones where a package needs them (the baton package built here asks
# for libprometheus-cpp-core1.0 >= 1.0.2).
. "$(dirname "$0")/debian-mirror.sh"

if [ ! -f "$trixie_list" ]; then
    mirror=$(debian_mirror) || die "cannot find the Debian mirror in the apt sources"
    echo "deb $mirror trixie main" > "$trixie_list"
    cat > /etc/apt/preferences.d/baton-trixie <<PIN
Package: *
Pin: release n=trixie
Pin-Priority: 100

Package: libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
Pin: release n=trixie
Pin-Priority: 500
PIN
fi

apt-get update -q
if [ "$mode" != all ]; then
    [ ${#packages[@]} -eq 0 ] || apt-get install -y -q --no-install-recommends "${packages[@]}"
    echo "bootstrap: done"
    exit 0
fi
apt-get install -y -q --no-install-recommends "${packages[@]}"
apt-get install -y -q --no-install-recommends "${prometheus_runtime[@]/%//trixie}"

# Headers and pkg-config files only: the whole -dev package needs trixie's libcurl for its push part.
if [ ! -f "$prometheus_dev_marker" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    (cd "$work" && apt-get download -q prometheus-cpp-dev/trixie)
    dpkg-deb -x "$work"/prometheus-cpp-dev_*.deb "$work/root"
    cp -r "$work/root/usr/include/prometheus" /usr/local/include/
    mkdir -p /usr/local/lib/pkgconfig
    multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
    libdir=/usr/lib/$multiarch
    for part in core pull; do
        ln -sf "$libdir/libprometheus-cpp-$part.so.1.0" "/usr/local/lib/libprometheus-cpp-$part.so"
        sed -e "s|^libdir=.*|libdir=/usr/local/lib|" -e "s|^includedir=.*|includedir=/usr/local/include|" \
            "$work/root/usr/lib/$multiarch/pkgconfig/prometheus-cpp-$part.pc" \
            > "/usr/local/lib/pkgconfig/prometheus-cpp-$part.pc"
    done
    ldconfig
fi
echo "bootstrap: done"
