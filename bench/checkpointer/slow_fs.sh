#!/usr/bin/env bash
# Runs a command beside a file system made slow on purpose, standing in for a busy shared one (NFS,
# Lustre): an ext4 image on a loop device, whose reads and writes are throttled to MBPS MB/s for the
# command's processes only, by the block I/O controller of cgroup v2 (io.max) or v1 (blkio.throttle).
# Everything else on the machine (the node-local directory included) keeps its own speed.
#
#   slow_fs.sh MBPS COMMAND [ARG...]     COMMAND runs with BATON_SLOW_DIR set to the slow directory
#
# Needs root, a free loop device and the block I/O controller; exits 77 (skipped) without them.
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: slow_fs.sh MBPS COMMAND [ARG...]" >&2
    exit 2
fi
mbps=$1
shift
case "$mbps" in '' | *[!0-9]*) echo "slow_fs.sh: MBPS must be a whole number, not '$mbps'" >&2; exit 2 ;; esac
skip() { echo "slow_fs.sh: SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (loop device, mount, cgroup)"

work=$(mktemp -d "${TMPDIR:-/tmp}/baton-slowfs.XXXXXX")
loop= cgroup=
cleanup() {
    set +e
    if [ -n "$cgroup" ]; then
        # Back to the parent group (a process that has ended meanwhile is no error), then remove it.
        while read -r pid; do
            { echo "$pid" >"$(dirname "$cgroup")/cgroup.procs"; } 2>/dev/null
        done <"$cgroup/cgroup.procs"
        rmdir "$cgroup"
    fi
    mountpoint -q "$work/mnt" && umount "$work/mnt"
    [ -z "$loop" ] || losetup -d "$loop"
    rm -rf "$work"
}
trap cleanup EXIT

truncate -s 8G "$work/image"
mkfs.ext4 -q -F "$work/image" || skip "mkfs.ext4 failed"
loop=$(losetup -f --show "$work/image" 2>/dev/null) || skip "no free loop device"
mkdir "$work/mnt"
mount "$loop" "$work/mnt" || skip "cannot mount $loop"
device=$(lsblk -dno MAJ:MIN "$loop" | tr -d ' ')
bytes=$((mbps * 1000000))

if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    grep -qw io /sys/fs/cgroup/cgroup.controllers || skip "cgroup v2 without the io controller"
    echo +io >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
    cgroup=/sys/fs/cgroup/baton-slowfs-$$
    mkdir "$cgroup"
    echo "$device rbps=$bytes wbps=$bytes" >"$cgroup/io.max" || skip "io.max refused"
elif [ -d /sys/fs/cgroup/blkio ]; then
    cgroup=/sys/fs/cgroup/blkio/baton-slowfs-$$
    mkdir "$cgroup"
    echo "$device $bytes" >"$cgroup/blkio.throttle.write_bps_device"
    echo "$device $bytes" >"$cgroup/blkio.throttle.read_bps_device"
else
    skip "no block I/O controller"
fi
echo "slow_fs.sh: $work/mnt on $loop ($device), reads and writes throttled to $mbps MB/s"
echo $$ >"$cgroup/cgroup.procs"
BATON_SLOW_DIR=$work/mnt "$@"
