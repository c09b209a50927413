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

conf=$dir/slurm.conf
export SLURM_CONF=$conf

free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

ensure_munge() {
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi
    [ -r /etc/munge/munge.key ] || die "no /etc/munge/munge.key (run deploy/bootstrap.sh)"
    install -d -o munge -g munge -m 0755 /run/munge
    # Two clusters starting at once both find no munged: the second's fails on the socket lock, and the
    # first's answers for both.
    runuser -u munge -- /usr/sbin/munged 2>/dev/null || true
    for _ in $(seq 50); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return
        sleep 0.1
    done
    die "munged did not start or does not answer"
}

node_state() { sinfo -h -n "$(cat "$dir/nodename")" -o %t 2>/dev/null || true; }

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

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
    local node ctld_port slurmd_port srun_base hardware gres_types= node_gres=
    node=baton$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
    ctld_port=$(free_port)
    slurmd_port=$(free_port)
    # srun's own listening ports: a window of this cluster's, below the kernel's ephemeral range, so that
    # a reply that another private cluster on this machine sends to a port it once used never reaches
    # this cluster's srun.
    srun_base=$(( 20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 120 * 100 ))
    # The node's real shape, so that slurmd does not drain itself for "low resources".
    hardware=$(slurmd -C | head -n1 | tr ' ' '\n' | grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=' | tr '\n' ' ')
    mkdir -p "$dir/state" "$dir/spool"
    echo "$node" > "$dir/nodename"
    # Slurm 24.x's slurmd sets up cgroups even with proctrack/linuxproc and task/none, and refuses the
    # hybrid v1 hierarchy of some hosts and clean roots: this test cluster confines nothing, so it turns
    # them off (22.05 does not know the value, and does not need it).
    if [ "$(slurmd -V | awk '{split($2, v, "."); print v[1]}')" -ge 23 ]; then
        echo "CgroupPlugin=disabled" > "$dir/cgroup.conf"
    fi
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
SrunPortRange=$srun_base-$((srun_base + 99))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$dir/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$storage
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=5
MinJobAge=600
InactiveLimit=0
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
    : > "$dir/plugstack.conf"
    for line in "$@"; do printf '%s\n' "$line" >> "$dir/plugstack.conf"; done
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
