#!/usr/bin/env bash
# Records the JSON documents of the Slurm installed here, for the readers' tests: `squeue --json --all
# --states=all` (as batond runs it), `scontrol --json show job` (23.02 and later) and `sinfo --json`, taken from a private
# one-node cluster (deploy/local/slurm.sh, with one stand-in GPU) that holds a job of each kind the
# readers must know: completed, failed, cancelled while running, cancelled while pending, held, running,
# an array job, a job asking for a GPU by --gres, a requeued job and a job whose node failed. Jobs are
# nobody's; the chain comments have the form batond writes. Files are named after the release, e.g.
# squeue_2411.json for Slurm 24.11. Where slurmdbd and mariadb-server are installed, the cluster keeps
# accounting and `sacct --json` of the same jobs is recorded too (sacct_2411.json; BATON_MARIADB_SOCKET
# names another MariaDB server's socket to use, see deploy/local/slurm.sh). Run as root, on a machine
# (or clean root) with that Slurm installed.
#   tests/data/record-slurm-json.sh OUTDIR
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
tree=$(cd "$(dirname "$0")/../.." && pwd)
out=$(realpath -m "$1")
mkdir -p "$out"
dir=$(mktemp -d /tmp/baton-record.XXXXXX)
trap '"$tree/deploy/local/slurm.sh" stop "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
accounting=0
if command -v slurmdbd >/dev/null && { [ -n "${BATON_MARIADB_SOCKET:-}" ] || command -v mariadbd >/dev/null; }; then
    accounting=1
fi
BATON_SLURM_DBD=$accounting BATON_SLURM_GPU=1 "$tree/deploy/local/slurm.sh" start "$dir" >/dev/null
. "$dir/env"
node=$(cat "$dir/nodename")
release=$(sinfo --version | awk '{print $2}')
tag=$(echo "$release" | awk -F. '{printf "%s%02d", $1, $2}')
work=$dir/work
mkdir -p "$work" && chmod 0777 "$work"

submit() { runuser -u nobody -- sbatch --parsable --chdir="$work" -o /dev/null -c 1 "$@"; }
state() { squeue -h --states=all -j "$1" -o %T 2>/dev/null | head -n1; }
wait_state() { # wait_state JOB STATE...
    local job=$1 s
    shift
    for _ in $(seq 240); do
        s=$(state "$job")
        for want in "$@"; do [ "$s" = "$want" ] && return 0; done
        sleep 0.25
    done
    echo "record: job $job is $s, not $*" >&2
    exit 1
}

completed=$(submit -J completed --comment "baton:3:1:0123456789abcdef0123456789abcdef" --wrap true)
failed=$(submit -J failed --wrap 'exit 3')
wait_state "$completed" COMPLETED
wait_state "$failed" FAILED

running=$(submit -J cancelled-running -t 10 --wrap 'sleep 300')
wait_state "$running" RUNNING
scancel "$running"
wait_state "$running" CANCELLED

# The node fails under a job that may not be requeued: NODE_FAIL.
lost=$(submit -J node-failed --no-requeue --wrap 'sleep 300')
wait_state "$lost" RUNNING
scontrol update nodename="$node" state=down reason=recorded-node-failure
wait_state "$lost" NODE_FAIL
# (With ReturnToService=2 the node may be back already, and then RESUME is refused.)
scontrol update nodename="$node" state=resume 2>/dev/null || true
for _ in $(seq 120); do sinfo -h -n "$node" -o %t | grep -qE '^(idle|mix)$' && break; sleep 0.5; done

requeued=$(submit -J requeued --requeue --wrap 'sleep 300')
wait_state "$requeued" RUNNING
scontrol requeue "$requeued"
wait_state "$requeued" PENDING

# Two CPUs at most are busy from here on: the running job and the GPU job; the rest pends.
live=$(submit -J running -t 30 --comment "baton:3:2:0123456789abcdef0123456789abcdef" --wrap 'sleep 300')
gpu=$(submit -J gpu --gres=gpu:1 -t 1:00:00 --wrap 'sleep 300')
wait_state "$live" RUNNING
wait_state "$gpu" RUNNING PENDING
array=$(submit -J array --array=0-2 --wrap 'sleep 300')
held=$(submit -J held --hold -t 2-0 --wrap true)
later=$(submit -J cancelled-pending --begin=now+1hour --wrap true)
scancel "$later"
wait_state "$later" CANCELLED
sleep 1

squeue --json --all --states=all > "$out/squeue_$tag.json"
# scontrol has --json from 23.02 on.
scontrol --json show job > "$out/scontrol_job_$tag.json" 2>/dev/null || rm -f "$out/scontrol_job_$tag.json"
sinfo --json > "$out/sinfo_$tag.json"
if [ "$accounting" = 1 ]; then
    # slurmctld hands job records to slurmdbd in the background: wait until the last one is there.
    for _ in $(seq 60); do
        sacct -n -X -a -j "$later" -o state 2>/dev/null | grep -q CANCELLED && break
        sleep 0.5
    done
    sacct --json -a -S "$(date -d '-1 day' +%Y-%m-%dT%H:%M:%S)" > "$out/sacct_$tag.json"
else
    echo "record: no slurmdbd and mariadb-server here: sacct_$tag.json not recorded" >&2
fi
echo "record: Slurm $release: completed=$completed failed=$failed cancelled-running=$running node-failed=$lost" \
    "requeued=$requeued running=$live gpu=$gpu array=$array held=$held cancelled-pending=$later"
ls -l "$out"/*_"$tag".json
