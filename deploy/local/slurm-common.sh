# Sourced by deploy/local/slurm.sh (one node on loopback) and deploy/local/cluster.sh (N nodes in network
# namespaces): what every private test cluster does the same way. The caller defines die().

free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

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

# This machine's real shape (CPUs=... Boards=...), so that slurmd does not drain its node for "low
# resources".
node_hardware() {
    slurmd -C | head -n1 | tr ' ' '\n' | grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=' |
        tr '\n' ' '
}

# A window of srun's own listening ports, below the kernel's ephemeral range, so that a reply that another
# private cluster on this machine sends to a port it once used never reaches this cluster's srun.
srun_port_range() {
    local base=$(( 20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 120 * 100 ))
    echo "$base-$((base + 99))"
}

# Slurm 24.x's slurmd sets up cgroups even with proctrack/linuxproc and task/none, and refuses the hybrid
# v1 hierarchy of some hosts and clean roots: a test cluster confines nothing, so it turns them off
# (22.05 does not know the value, and does not need it).
write_cgroup_conf() { # write_cgroup_conf DIR
    if [ "$(slurmd -V | awk '{split($2, v, "."); print v[1]}')" -ge 23 ]; then
        echo "CgroupPlugin=disabled" > "$1/cgroup.conf"
    fi
}

# The slurm.conf lines that do not depend on the cluster's shape.
common_slurm_conf() { # common_slurm_conf DIR
    cat <<CONF
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$1/state
SlurmctldPidFile=$1/slurmctld.pid
SlurmctldLogFile=$1/slurmctld.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$1/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
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
CONF
}

write_plugstack() { # write_plugstack DIR [LINE ...]
    local dir=$1 line
    shift
    : > "$dir/plugstack.conf"
    for line in "$@"; do printf '%s\n' "$line" >> "$dir/plugstack.conf"; done
}
