#!/usr/bin/env bash
# A private multi-node Slurm inside DIR, on one machine: slurmctld here, and N slurmd, each in a network
# namespace of its own (its own address on a private bridge, its own host name), as many hosts would be.
# munge and the file systems are shared by all nodes, as a cluster's shared file system is; each node also
# has a node-local directory, DIR/local/NODE. The nodes reach this machine's slurmctld and each other,
# nothing else: their namespaces have no route beyond the cluster's own subnet. State, logs and pid files
# are in DIR, so that two clusters run side by side. Needs root, iproute2 and util-linux.
#
#   cluster.sh start DIR [--nodes N] [--accounting] [--conf LINE ...] [PLUGSTACK_LINE ...]
#       N nodes (default 2), named node1..nodeN, in partition "debug"; DIR/slurm.conf (each --conf LINE
#       added to it, e.g. SchedulerParameters=...), DIR/plugstack.conf (one line per extra argument).
#       --accounting: an accounting database as production sites have (MariaDB, DIR/mysql, on a Unix
#       socket only, and slurmdbd on this machine's loopback, DIR/slurmdbd.conf); with it Slurm applies
#       priority/multifactor's age factor, which it ignores without slurmdbd. Needs mariadb-server and
#       slurmdbd.
#       Starts the daemons and waits until every node is idle. Prints
#       CONTROLLER=ADDRESS, this machine's address on the cluster's network (the nodes know it as
#       "controller": a service the jobs reach, such as batond, listens there), then
#       SLURM_CONF=DIR/slurm.conf; DIR/env can be sourced to export it. Jobs are not requeued by Slurm
#       unless they ask (--requeue): JobRequeue=0, as at many sites.
#   cluster.sh stop DIR          cancel the jobs, stop every process of the cluster, remove its namespaces
#                                and bridge (also after a killed run); DIR itself, with the logs, stays
#   cluster.sh status DIR        print each node's state; exit 0 if every node is up
#   cluster.sh fail DIR NODE     power loss of NODE: its link goes down and every process in its namespace
#                                is killed; slurmctld marks it DOWN within SlurmdTimeout (8 s) and its
#                                jobs NODE_FAIL
#   cluster.sh revive DIR NODE   power back: link up, slurmd started; waits until NODE is idle again
#   cluster.sh exec DIR NODE COMMAND [ARG...]   run a command on NODE (its network, host name and hosts)
set -euo pipefail

usage() {
    echo "usage: $0 start DIR [--nodes N] [--accounting] [--conf LINE ...] [PLUGSTACK_LINE ...] | stop DIR | status DIR |" \
        "fail DIR NODE | revive DIR NODE | exec DIR NODE COMMAND [ARG...]" >&2
    exit 2
}
die() { echo "cluster.sh: $*" >&2; exit 1; }
[ $# -ge 2 ] || usage
action=$1
dir=$(realpath -m -- "$2")
shift 2
. "$(dirname "$0")/slurm-common.sh"

conf=$dir/slurm.conf
export SLURM_CONF=$conf
slurmd_timeout=8

# DIR/cluster.env names what the cluster owns on this machine (cluster_id, net, nodes). It is written
# before anything is created, so that stop finds all of it, also after a killed start.
load_cluster() {
    [ -f "$dir/cluster.env" ] || die "no cluster in $dir"
    . "$dir/cluster.env"
}
bridge() { echo "bt$cluster_id"; }
netns_of() { echo "baton-$cluster_id-$1"; }      # a node's network namespace
veth_of() { echo "bt$cluster_id${1#node}"; }     # the bridge's end of a node's link
addr_of() { echo "$net.$(( ${1#node} + 1 ))"; }   # node1 is .2; .1 is this machine, on the bridge
node_names() { local i; for ((i = 1; i <= nodes; i++)); do echo "node$i"; done; }
known_node() { [[ $1 =~ ^node[0-9]+$ ]] && [ "${1#node}" -ge 1 ] && [ "${1#node}" -le "$nodes" ] ||
    die "no node '$1' in this cluster (node1..node$nodes)"; }

# A /24 of 10.0.0.0/8 that overlaps no address or route of this machine.
pick_subnet() {
    /usr/bin/python3 - <<'PY'
import ipaddress, json, random, subprocess, sys
def ip_json(*args):
    out = subprocess.run(["ip", "-j", "-4", *args], capture_output=True, text=True, check=True).stdout
    return json.loads(out or "[]")
taken = []
for route in ip_json("route", "show", "table", "all"):
    if route.get("dst", "default") != "default":
        taken.append(ipaddress.ip_network(route["dst"], strict=False))
for link in ip_json("addr"):
    for a in link.get("addr_info", []):
        taken.append(ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False))
for _ in range(1000):
    candidate = ipaddress.ip_network(f"10.{random.randrange(256)}.{random.randrange(256)}.0/24")
    if not any(candidate.overlaps(t) for t in taken):
        print(str(candidate.network_address).rsplit(".", 1)[0])
        sys.exit(0)
sys.exit(1)
PY
}

write_config() { # write_config NODES ACCOUNTING(0|1) [CONF_LINE ...]
    local ctld_port slurmd_port dbd_port hardware node nodelist line
    cluster_id=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
    net=$(pick_subnet) || die "no free private subnet in 10.0.0.0/8"
    nodes=$1
    accounting=$2
    shift 2
    printf 'cluster_id=%s\nnet=%s\nnodes=%s\naccounting=%s\n' "$cluster_id" "$net" "$nodes" "$accounting" \
        > "$dir/cluster.env"
    ctld_port=$(free_port)
    slurmd_port=$(free_port)
    hardware=$(node_hardware)
    nodelist=node[1-$nodes]
    [ "$nodes" -gt 1 ] || nodelist=node1
    mkdir -p "$dir/state"
    write_cgroup_conf "$dir"
    {
        echo "ClusterName=baton$cluster_id"
        echo "SlurmctldHost=$(hostname -s)($net.1)"
        echo "SlurmctldPort=$ctld_port"
        echo "SlurmdPort=$slurmd_port"
        echo "SrunPortRange=$(srun_port_range)"
        echo "SlurmdSpoolDir=$dir/spool/%n"
        echo "SlurmdPidFile=$dir/slurmd-%n.pid"
        echo "SlurmdLogFile=$dir/slurmd-%n.log"
        common_slurm_conf "$dir"
        # A node that stops answering is DOWN within seconds, and its jobs end in NODE_FAIL.
        echo "SlurmdTimeout=$slurmd_timeout"
        echo "MessageTimeout=5"
        echo "JobRequeue=0"
        # A job that Slurm requeues waits the credential's lifetime (120 s by default) before it runs
        # again: 30 s here, for the tests' sake.
        echo "AuthInfo=cred_expire=30"
        if [ "$accounting" = 1 ]; then
            dbd_port=$(free_port)
            echo "AccountingStorageType=accounting_storage/slurmdbd"
            echo "AccountingStorageHost=localhost"
            echo "AccountingStoragePort=$dbd_port"
            write_slurmdbd_conf "$dbd_port"
        else
            echo "AccountingStorageType=accounting_storage/none"
        fi
        for node in $(node_names); do
            echo "NodeName=$node NodeHostname=$node NodeAddr=$(addr_of "$node") ${hardware}State=UNKNOWN"
        done
        echo "PartitionName=debug Nodes=$nodelist Default=YES MaxTime=INFINITE State=UP"
        for line in "$@"; do echo "$line"; done
    } > "$conf"
    # The nodes' /etc/hosts: this machine's, "controller" for this machine's address on the cluster's
    # network (e.g. batond's URL in plugstack.conf), and every node's name (jobs resolve their peers,
    # e.g. MASTER_ADDR from `scontrol show hostnames`).
    { cat /etc/hosts; echo "$net.1 controller"; for node in $(node_names); do
        echo "$(addr_of "$node") $node"; done; } > "$dir/hosts"
    echo "export SLURM_CONF=$conf" > "$dir/env"
}

# slurmdbd's configuration: slurmdbd reads slurmdbd.conf beside SLURM_CONF, only if SlurmUser owns it
# and no one else can read it.
write_slurmdbd_conf() { # write_slurmdbd_conf PORT
    install -m 0600 /dev/null "$dir/slurmdbd.conf"
    cat > "$dir/slurmdbd.conf" <<CONF
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$1
SlurmUser=root
AuthType=auth/munge
PidFile=$dir/slurmdbd.pid
LogFile=$dir/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
CONF
}

# MariaDB for slurmdbd: its own data directory and a Unix socket in DIR/mysql (owned by the mysql user,
# closed to others), no network; root of this machine connects through the socket without a password.
# slurmdbd's client library finds the socket through MYSQL_UNIX_PORT. Its temporary files go to DIR/mysql/tmp:
# in a shared /tmp, clusters set up at the same time collide on their names (mariadb-install-db fails).
mysql_dir() { echo "$dir/mysql"; }
mariadb_answers() { mariadb-admin --no-defaults --socket="$(mysql_dir)/socket" ping >/dev/null 2>&1; }
cluster_registered() {
    timeout 10 sacctmgr -n -P list cluster format=cluster 2>/dev/null | grep -qx "baton$cluster_id"
}
start_accounting() {
    local m
    m=$(mysql_dir)
    export MYSQL_UNIX_PORT=$m/socket
    command -v mariadbd >/dev/null && command -v slurmdbd >/dev/null ||
        die "--accounting needs mariadb-server and slurmdbd (run deploy/bootstrap.sh)"
    if [ ! -d "$m/data" ]; then
        install -d -o mysql -g mysql -m 0700 "$m" "$m/tmp"
        runuser -u mysql -- test -w "$m" ||
            die "the mysql user cannot reach $m: every directory above it must be searchable by others"
        mariadb-install-db --no-defaults --user=mysql --datadir="$m/data" --tmpdir="$m/tmp" --skip-test-db \
            >"$dir/mysql-install.log" 2>&1 || die "mariadb-install-db failed; see $dir/mysql-install.log"
    fi
    if ! pid_alive "$m/pid"; then
        mariadbd --no-defaults --user=mysql --datadir="$m/data" --tmpdir="$m/tmp" --socket="$m/socket" \
            --skip-networking --pid-file="$m/pid" --log-error="$m/error.log" >/dev/null 2>&1 &
        for _ in $(seq 300); do mariadb_answers && break; sleep 0.1; done
        mariadb_answers || die "MariaDB did not start; see $m/error.log"
    fi
    pid_alive "$dir/slurmdbd.pid" || slurmdbd || die "slurmdbd did not start; see $dir/slurmdbd.log"
    # slurmctld registers with slurmdbd only as a cluster the database knows.
    for _ in $(seq 100); do
        cluster_registered && return
        timeout 10 sacctmgr -i -n add cluster "baton$cluster_id" >/dev/null 2>&1 || sleep 0.2
    done
    cluster_registered || die "slurmdbd does not answer; see $dir/slurmdbd.log"
}

stop_accounting() {
    stop_pid "$dir/slurmdbd.pid"
    stop_pid "$(mysql_dir)/pid"
}

create_network() {
    local node ns veth
    ip link show "$(bridge)" >/dev/null 2>&1 || ip link add "$(bridge)" type bridge
    ip addr replace "$net.1/24" dev "$(bridge)"
    ip link set "$(bridge)" up
    for node in $(node_names); do
        ns=$(netns_of "$node")
        veth=$(veth_of "$node")
        [ -e "/run/netns/$ns" ] || ip netns add "$ns"
        ip link show "$veth" >/dev/null 2>&1 || ip link add "$veth" type veth peer name eth0 netns "$ns"
        ip link set "$veth" master "$(bridge)" up
        ip -n "$ns" addr replace "$(addr_of "$node")/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
    done
}

# Runs a command on a node: in its network namespace, with its host name and the cluster's hosts file
# (in a mount namespace of its own, which still sees what is mounted on this machine later).
on_node() { # on_node NODE COMMAND [ARG...]
    local node=$1
    shift
    nsenter --net="/run/netns/$(netns_of "$node")" unshare --mount --uts --propagation slave \
        bash -c 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"' on-node \
        "$dir/hosts" "$node" "$@"
}

start_node() { # start_node NODE
    local node=$1
    pid_alive "$dir/slurmd-$node.pid" && return
    mkdir -p "$dir/spool/$node" "$dir/local/$node"
    chmod 1777 "$dir/local/$node" # a scratch disk: every user makes a directory of their own
    on_node "$node" slurmd -N "$node" || die "slurmd of $node did not start; see $dir/slurmd-$node.log"
}

node_states() { timeout 10 sinfo -h -N -o '%N %t' 2>/dev/null | sort -u || true; }

node_up() { # node_up NODE: idle, mixed or allocated
    case $(timeout 10 sinfo -h -n "$1" -o %t 2>/dev/null) in idle|mix|alloc) return 0 ;; *) return 1 ;; esac
}

wait_up() { # wait_up NODE...
    local node
    for _ in $(seq 120); do
        for node in "$@"; do node_up "$node" || { sleep 0.5; continue 2; }; done
        return 0
    done
    die "nodes not idle within 60 s: $(node_states | tr '\n' ' '); see $dir/slurmctld.log and $dir/slurmd-*.log"
}

kill_node_processes() { # kill_node_processes NODE SIGNAL
    local ns pids
    ns=$(netns_of "$1")
    [ -e "/run/netns/$ns" ] || return 0
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] || kill -"$2" $pids 2>/dev/null || true
}

stop_pid() { # stop_pid PIDFILE: TERM, then KILL after 10 s
    local pid
    pid_alive "$1" || return 0
    pid=$(cat "$1")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
}

case $action in
start)
    [ "$(id -u)" -eq 0 ] || die "must run as root"
    command -v slurmctld >/dev/null || die "Slurm not installed (run deploy/bootstrap.sh)"
    command -v ip >/dev/null && command -v nsenter >/dev/null || die "needs iproute2 and util-linux"
    count=2
    if [ "${1:-}" = --nodes ]; then
        [[ ${2:-} =~ ^[1-9][0-9]?$ ]] || die "--nodes takes 1 to 99, not '${2:-}'"
        count=$2
        shift 2
    fi
    with_accounting=0
    if [ "${1:-}" = --accounting ]; then
        with_accounting=1
        shift
    fi
    conf_lines=()
    while [ "${1:-}" = --conf ]; do
        [ $# -ge 2 ] || die "--conf takes a slurm.conf line"
        conf_lines+=("$2")
        shift 2
    done
    mkdir -p "$dir"
    chmod 0755 "$dir" # every user of the cluster reads slurm.conf (a caller's temporary dir is 0700)
    if [ -f "$dir/cluster.env" ]; then
        load_cluster
        [ "$nodes" -eq "$count" ] || die "$dir holds a cluster of $nodes nodes, not $count"
        [ "${accounting:-0}" -eq "$with_accounting" ] ||
            die "$dir holds a cluster with accounting=${accounting:-0}"
    else
        write_config "$count" "$with_accounting" ${conf_lines[@]+"${conf_lines[@]}"}
    fi
    write_plugstack "$dir" "$@"
    create_network
    ensure_munge
    [ "${accounting:-0}" = 0 ] || start_accounting
    pid_alive "$dir/slurmctld.pid" || slurmctld -i || die "slurmctld did not start; see $dir/slurmctld.log"
    for node in $(node_names); do start_node "$node"; done
    wait_up $(node_names)
    echo "CONTROLLER=$net.1"
    echo "SLURM_CONF=$conf"
    ;;
stop)
    [ -f "$dir/cluster.env" ] || exit 0
    load_cluster
    if pid_alive "$dir/slurmctld.pid"; then
        # Cancel the jobs while the nodes' slurmd can still end their steps.
        timeout 10 scancel --partition=debug >/dev/null 2>&1 || true
        for _ in $(seq 100); do
            [ -z "$(timeout 5 squeue -h -t running,completing -o %i 2>/dev/null)" ] && break
            sleep 0.1
        done
    fi
    for node in $(node_names); do kill_node_processes "$node" TERM; done
    sleep 0.5
    for node in $(node_names); do kill_node_processes "$node" KILL; done
    # A killed process is gone only once it has been reaped: wait for that before the namespaces go.
    for _ in $(seq 100); do
        for node in $(node_names); do
            ns=$(netns_of "$node")
            [ ! -e "/run/netns/$ns" ] || [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] || { sleep 0.1; continue 2; }
        done
        break
    done
    stop_pid "$dir/slurmctld.pid"
    [ "${accounting:-0}" = 0 ] || stop_accounting
    # A namespace is torn down by the kernel later: its link goes with this machine's end, at once.
    for node in $(node_names); do
        ns=$(netns_of "$node")
        ! ip link show "$(veth_of "$node")" >/dev/null 2>&1 || ip link delete "$(veth_of "$node")"
        [ ! -e "/run/netns/$ns" ] || ip netns delete "$ns"
    done
    ! ip link show "$(bridge)" >/dev/null 2>&1 || ip link delete "$(bridge)"
    ;;
status)
    load_cluster
    node_states
    for node in $(node_names); do node_up "$node" || exit 1; done
    ;;
fail)
    [ $# -eq 1 ] || usage
    load_cluster
    known_node "$1"
    ip link set "$(veth_of "$1")" down
    kill_node_processes "$1" KILL
    ;;
revive)
    [ $# -eq 1 ] || usage
    load_cluster
    known_node "$1"
    ip link set "$(veth_of "$1")" up
    start_node "$1"
    wait_up "$1"
    ;;
exec)
    [ $# -ge 2 ] || usage
    load_cluster
    known_node "$1"
    on_node "$@"
    ;;
*) usage ;;
esac
