#!/usr/bin/env bash
# A clean Debian root in which to run the tests or the demo as on a fresh machine: Debian 12 (bookworm)
# or 13 (trixie), built with debootstrap from the Debian mirror this machine's apt sources use and kept
# in DIR between runs (built again when DIR is absent). The command runs in the root on a copy of this
# source tree at /src (the build directories there are kept between runs; the host's are not touched),
# with /proc, /sys and /dev mounted and its own /run; afterwards every process left in the root is ended
# and everything mounted is unmounted. Nothing installed on the host leaks in: the README's commands
# install what they need inside the root. Run as root.
#   deploy/local/debian-root.sh 12|13 DIR [COMMAND ARG...]     (default command: deploy/test.sh)
# e.g. deploy/local/debian-root.sh 13 /var/cache/baton/trixie deploy/test.sh --suite unit
# Exit status: the command's; 77 where this machine cannot host the root (debootstrap or a mount refused).
set -euo pipefail

die() { echo "debian-root: $*" >&2; exit 1; }
cannot_host() { echo "debian-root: this machine cannot host a clean root: $*" >&2; exit 77; }

[ $# -ge 2 ] || die "usage: $0 12|13 DIR [COMMAND ARG...]"
[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap, chroot, mount)"
case "$1" in
    12) codename=bookworm ;;
    13) codename=trixie ;;
    *) die "release must be 12 or 13, not '$1'" ;;
esac
root=$(realpath -m "$2")
shift 2
[ $# -gt 0 ] || set -- deploy/test.sh
tree=$(cd "$(dirname "$0")/../.." && pwd)
. "$tree/deploy/debian-mirror.sh"

# One run at a time in a root; holding the lock, whatever is mounted or running in the root was left by a
# run that was killed before its clean-up, and goes.
mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock -n 9 || die "another run is using $root (it holds $root.lock)"
release_root() { # ends every process in the root and unmounts everything under it
    local pid target
    for pid in /proc/[0-9]*; do
        [ "$(readlink "$pid/root" 2>/dev/null)" = "$root" ] && kill -9 "${pid#/proc/}" 2>/dev/null
    done
    # The root's own mount (see below) goes last: sort -r puts "$root" after everything under it.
    mounts_under_root() { findmnt -rn -o TARGET | awk -v r="$root" '$0 == r || index($0, r "/") == 1' | sort -r; }
    [ -z "$(mounts_under_root)" ] || sleep 1
    mounts_under_root | while read -r target; do
        umount "$target" 2>/dev/null || umount -l "$target" || true
    done
}
release_root

if [ ! -f "$root/.baton-root" ]; then
    command -v debootstrap >/dev/null || { apt-get update -q && apt-get install -y -q debootstrap; }
    mirror=$(debian_mirror) || cannot_host "no Debian mirror in the apt sources"
    rm -rf "$root.partial"
    debootstrap --variant=minbase "$codename" "$root.partial" "$mirror" ||
        cannot_host "debootstrap $codename from $mirror failed (its log: $root.partial/debootstrap/debootstrap.log)"
    # Packages must not start their services in the root: the tests start their own.
    printf '#!/bin/sh\nexit 101\n' > "$root.partial/usr/sbin/policy-rc.d"
    chmod 0755 "$root.partial/usr/sbin/policy-rc.d"
    rm -rf "$root"
    mv "$root.partial" "$root"
    echo "$codename" > "$root/.baton-root"
fi
[ "$(cat "$root/.baton-root")" = "$codename" ] || die "$root holds $(cat "$root/.baton-root"), not $codename"

# The source tree: tracked and untracked-but-not-ignored files (every file but .git and build
# directories where the tree is no git checkout). The checkout may belong to another user (a CI clone):
# git is told that this one is safe. Only files whose content changed are written (and so get a new
# time): the build directories under /src then rebuild what they feed, also when the host's copy is
# older than objects built from the previous copy.
source_files() { # NUL-separated, relative to $tree
    local git=(git -C "$tree" -c safe.directory="$(cd "$tree" && pwd -P)")
    if "${git[@]}" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        "${git[@]}" ls-files -z -co --exclude-standard
    else
        (cd "$tree" && find . \( -path ./.git -o -path './build*' \) -prune -o ! -type d -print0)
    fi
}
mkdir -p "$root/src"
stage=$root/.src-stage
rm -rf "$stage"
mkdir -p "$stage"
source_files | (cd "$tree" && tar --null -T - -cf -) | tar -xf - -C "$stage"
(cd "$stage" && find . ! -type d -print0) | while IFS= read -r -d '' f; do
    if ! cmp -s "$stage/$f" "$root/src/$f"; then
        mkdir -p "$(dirname "$root/src/$f")"
        rm -f "$root/src/$f"
        cp -P "$stage/$f" "$root/src/$f"
    fi
done
(cd "$root/src" && find . -path './build*' -prune -o ! -type d -print0) | while IFS= read -r -d '' f; do
    [ -e "$stage/$f" ] || [ -L "$stage/$f" ] || rm -f "$root/src/$f"
done
rm -rf "$stage"
# This machine's name resolution: its own host name too (Slurm looks it up; a root without it asks the
# name server, and where that does not answer every lookup stalls slurmctld for seconds).
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp /etc/hosts "$root/etc/hosts"

mount_in() { # mount_in TARGET MOUNT-ARGS...
    local target=$root/$1
    shift
    mkdir -p "$target"
    mount "$@" "$target" || cannot_host "mount $* $target refused"
}
trap release_root EXIT
# The root is made a mount point of its own (a bind mount onto itself), as / is on a machine: a mount
# namespace made inside it (deploy/local/cluster.sh's nodes: unshare --propagation slave) must be able
# to change the propagation of its /, which the kernel refuses for a directory that is no mount point.
# It is a peer group of its own (private, then shared, as / is under systemd): what is mounted in the
# root reaches those namespaces and nothing of it propagates back to this machine.
mount --bind "$root" "$root" || cannot_host "mount --bind $root $root refused"
mount --make-private "$root"
mount --make-shared "$root"
mount_in proc -t proc proc
mount_in sys -t sysfs sysfs
# The host's cgroup hierarchy (a fresh sysfs has none mounted): Slurm 22.05's slurmd (Debian 12) will not
# start without one, even with proctrack/linuxproc and task/none.
if mountpoint -q /sys/fs/cgroup; then
    mount_in sys/fs/cgroup --rbind /sys/fs/cgroup
    mount --make-rslave "$root/sys/fs/cgroup"
fi
mount_in dev --rbind /dev
mount --make-rslave "$root/dev"
mount_in run -t tmpfs -o mode=0755 tmpfs
mount_in tmp -t tmpfs -o mode=1777 tmpfs
# The traces, read-only where the host has them (tests find them at ../shared/traces).
traces=${BATON_TRACE_DIR:-$tree/../shared/traces}
if [ -d "$traces" ]; then
    mount_in shared/traces --bind "$traces"
    mount -o remount,bind,ro "$root/shared/traces"
fi

set +e
# BATON_OTHER_RELEASE=none: the test command inside does not build a root of its own.
chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb CI="${CI:-}" BATON_OTHER_RELEASE=none \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c 'cd /src && exec "$@"' debian-root "$@"
status=$?
set -e
exit $status
