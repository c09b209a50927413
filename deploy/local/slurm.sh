#!/usr/bin/env bash
# A private single-node Slurm inside DIR: slurmctld + slurmd on loopback with free ports, state, logs
# and pid files all in DIR, so that two instances can run side by side. Needs root (slurmd starts jobs
# as their users) and munge (started here if it is not running).
#
#   slurm.sh start DIR [PLUGSTACK_LINE ...]
#       write DIR/slurm.conf and DIR/plugstack.conf (one line per extra argument, e.g.
#       "required /path/spank_baton.so key=value"), start the daemons and wait until the node is idle.
#       Prints SLURM_CONF=DIR/slurm.conf; DIR/env can be sourced to export it.
#       With BATON_SLURM_GPU=1 the node also has one stand-in GPU (its device file is /dev/null), so
#       that a job asking for --gres=gpu:1 is scheduled on a machine without GPUs.
#       With BATON_SLURM_DBD=1 the cluster keeps accounting, so that sacct answers: a private MariaDB
#       server and slurmdbd run in DIR too (needs the mariadb-server and slurmdbd packages). With
#       BATON_MARIADB_SOCKET=PATH as well, slurmdbd uses the MariaDB server of that socket instead:
#       Debian 13's slurmdbd (24.11.5) stops at its first query to Debian 13's MariaDB 11.8 ("5027
#       Number of columns in result ... exceeds"), and works against MariaDB 10.11 (Debian 12's).
#   slurm.sh stop DIR      cancel this cluster's jobs and stop the daemons it started
#   slurm.sh status DIR    exit 0 if the node of DIR is up
set -euo pipefail

usage() { echo "usage: $0 start DIR [PLUGSTACK_LINE ...] | stop DIR | status DIR" >&2; exit 2; }
die() { echo "slurm.sh: $*" >&2; exit 1; }
[ $# -ge 2 ] || usage
action=$1
dir=$(realpath -m -- "$2")
shift 2

. "$(dirname "$0")/slurm-common.sh"

conf=$dir/slurm.conf
export SLURM_CONF=$conf

node_state() { sinfo -h -n "$(cat "$dir/nodename")" -o %t 2>/dev/null || true; }

accounting() { [ -f "$dir/slurmdbd.conf" ]; }

# A private MariaDB server (its socket in DIR, no network; slurmdbd runs as root and logs in as root
# through the socket) and slurmdbd on top of it; the cluster is added to the accounting database before
# slurmctld starts.
start_accounting() {
    local socket=${BATON_MARIADB_SOCKET:-$dir/mariadb.sock}
    if [ -z "${BATON_MARIADB_SOCKET:-}" ] && ! pid_alive "$dir/mariadb.pid"; then
        [ -d "$dir/mariadb/mysql" ] || mariadb-install-db --no-defaults --user=root --datadir="$dir/mariadb" \
            --skip-test-db >"$dir/mariadb-install.log" 2>&1 || die "mariadb-install-db failed; see $dir/mariadb-install.log"
        setsid mariadbd --no-defaults --user=root --datadir="$dir/mariadb" --socket="$dir/mariadb.sock" \
            --skip-networking --pid-file="$dir/mariadb.pid" --log-error="$dir/mariadb.log" </dev/null >/dev/null 2>&1 &
        for _ in $(seq 100); do [ -S "$dir/mariadb.sock" ] && break; sleep 0.2; done
        [ -S "$dir/mariadb.sock" ] || die "MariaDB did not start; see $dir/mariadb.log"
    fi
    if ! pid_alive "$dir/slurmdbd.pid"; then
        # The client library takes the socket from MYSQL_UNIX_PORT when the host is "localhost".
        MYSQL_UNIX_PORT=$socket slurmdbd || die "slurmdbd did not start; see $dir/slurmdbd.log"
    fi
    for _ in $(seq 100); do
        sacctmgr -n list cluster format=cluster >/dev/null 2>&1 && break
        sleep 0.2
    done
    sacctmgr -n list cluster format=cluster 2>/dev/null | grep -qw "$(cat "$dir/nodename")" ||
        sacctmgr -i add cluster "$(cat "$dir/nodename")" >/dev/null || die "cannot add the cluster to slurmdbd"
}

write_config() {
    local node ctld_port slurmd_port hardware gres_types= node_gres=
    node=baton$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
    ctld_port=$(free_port)
    slurmd_port=$(free_port)
    hardware=$(node_hardware)
    mkdir -p "$dir/state" "$dir/spool"
    echo "$node" > "$dir/nodename"
    write_cgroup_conf "$dir"
    local storage="AccountingStorageType=accounting_storage/none"
    if [ "${BATON_SLURM_DBD:-0}" = 1 ]; then
        command -v slurmdbd >/dev/null && { [ -n "${BATON_MARIADB_SOCKET:-}" ] || command -v mariadbd >/dev/null; } ||
            die "BATON_SLURM_DBD=1 needs the slurmdbd and mariadb-server packages"
        local dbd_port
        dbd_port=$(free_port)
        storage="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbd_port"
        install -m 0600 /dev/null "$dir/slurmdbd.conf"
        cat > "$dir/slurmdbd.conf" <<DBD
AuthType=auth/munge
DbdAddr=127.0.0.1
DbdHost=localhost
DbdPort=$dbd_port
SlurmUser=root
DebugLevel=info
LogFile=$dir/slurmdbd.log
PidFile=$dir/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
DBD
    fi
    if [ "${BATON_SLURM_GPU:-0}" = 1 ]; then
        gres_types="GresTypes=gpu"
        # As sites that account GPUs do: jobs' TRES (sacct) then carry gres/gpu.
        [ "${BATON_SLURM_DBD:-0}" = 1 ] && gres_types="$gres_types
AccountingStorageTRES=gres/gpu"
        node_gres="Gres=gpu:1 "
        echo "NodeName=$node Name=gpu Count=1 File=/dev/null" > "$dir/gres.conf"
    fi
    cat > "$conf" <<CONF
ClusterName=$node
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SrunPortRange=$(srun_port_range)
SlurmdSpoolDir=$dir/spool
SlurmdPidFile=$dir/slurmd.pid
SlurmdLogFile=$dir/slurmd.log
$(common_slurm_conf "$dir")
$storage
$gres_types
NodeName=$node NodeHostname=localhost NodeAddr=127.0.0.1 ${hardware}${node_gres}State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
    echo "export SLURM_CONF=$conf" > "$dir/env"
}

case $action in
start)
    [ "$(id -u)" -eq 0 ] || die "must run as root"
    command -v slurmctld >/dev/null || die "Slurm not installed (run deploy/bootstrap.sh)"
    mkdir -p "$dir"
    chmod 0755 "$dir" # every user of the cluster reads slurm.conf (a caller's temporary dir is 0700)
    [ -f "$conf" ] || write_config
    write_plugstack "$dir" "$@"
    ensure_munge
    if accounting; then start_accounting; fi
    if ! pid_alive "$dir/slurmctld.pid"; then
        slurmctld -i || die "slurmctld did not start; see $dir/slurmctld.log"
    fi
    if ! pid_alive "$dir/slurmd.pid"; then
        slurmd -N "$(cat "$dir/nodename")" || die "slurmd did not start; see $dir/slurmd.log"
    fi
    for _ in $(seq 120); do
        case $(node_state) in idle|mix|alloc) echo "SLURM_CONF=$conf"; exit 0 ;; esac
        sleep 0.5
    done
    die "node did not become idle within 60 s (state: '$(node_state)'); see $dir/slurmctld.log and $dir/slurmd.log"
    ;;
stop)
    [ -f "$conf" ] || exit 0
    if pid_alive "$dir/slurmctld.pid"; then
        # Cancel this cluster's jobs while slurmd can still kill their steps.
        timeout 10 scancel --partition=debug >/dev/null 2>&1 || true
        for _ in $(seq 100); do
            [ -z "$(timeout 5 squeue -h -t running,completing -o %i 2>/dev/null)" ] && break
            sleep 0.1
        done
    fi
    for daemon in slurmd slurmctld slurmdbd mariadb; do
        pidfile=$dir/$daemon.pid
        pid_alive "$pidfile" || continue
        pid=$(cat "$pidfile")
        kill -TERM "$pid"
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    done
    ;;
status)
    case $(node_state) in idle|mix|alloc) exit 0 ;; *) exit 1 ;; esac
    ;;
*) usage ;;
esac
