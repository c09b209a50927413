"""The arms of the chain benchmark: how each one's chain is submitted (baton, and the three ways people
chain jobs today), the job scripts, and what is read back from the jobs' own output."""

import math
import os
import re
import subprocess

ANCHORS = ["requeue", "singleton", "resubmit"]
HELD = ["afterany", "released"]  # experiments: a successor held from its predecessor's start
RELEASE_LEAD_S = 20
MARGIN_S = 10  # the final checkpoint before the limit, as the plugin's margin for baton's jobs
SIGNAL_LEAD_S = 30  # requeue: --signal=B:USR1@30 (Slurm sends it up to a minute earlier still)

# Every job says when it started, on which node and which run of its job id it is.
PRELUDE = """#!/bin/bash
echo "bench start $(date +%s.%N) $(hostname) run ${SLURM_RESTART_COUNT:-0}"
"""

# The anchors run the training without the plugin: the chain directory and the deadline (the job's own
# end time, as squeue says) are set here, as a user's script would.
ANCHOR_ENV = """export BATON_CHAIN_DIR={chain_dir} BATON_JOB_ID=$SLURM_JOB_ID BATON_KEEP=2
"""
DEADLINE = """end=$(squeue -h -j "$SLURM_JOB_ID" -o %e)
export BATON_DEADLINE=$(date -d "$end" +%s) BATON_DEADLINE_MARGIN={margin}
"""
DONE = """finished() {{ grep -q '^training done' {output}; }}
"""

# submitit's and Lightning's way: a signal before the limit, a final checkpoint, then the job requeues
# itself.
REQUEUE_BODY = """{train} &
child=$!
trap 'echo "bench signal $(date +%s.%N)"; kill -TERM $child' USR1
while kill -0 $child 2>/dev/null; do wait $child; done
if finished; then echo "bench end $(date +%s.%N) done"; exit 0; fi
echo "bench end $(date +%s.%N) requeue"
scontrol requeue "$SLURM_JOB_ID"
sleep 60
"""
# K jobs at once, one after the other by --dependency=singleton; the one that finishes the training
# cancels those still pending.
SINGLETON_BODY = """{train}
echo "bench end $(date +%s.%N)"
if finished; then scancel --state=PENDING --name="$SLURM_JOB_NAME" --user="$(id -un)"; fi
"""
# The successor is submitted at the job's start, held by --dependency=afterany on it; `released` removes
# the dependency RELEASE_LEAD_S before the limit, as a provisioner would. A successor that starts before
# its predecessor has ended waits (at most 60 s, as the plugin's handover wait) for that end, so that it
# restores the final checkpoint.
HELD_BODY = """if [ -n "$BENCH_PREDECESSOR" ]; then
  for _ in $(seq 300); do
    squeue -h -j "$BENCH_PREDECESSOR" -t RUNNING,COMPLETING 2>/dev/null | grep -q . || break
    sleep 0.2
  done
fi
succ=$(sbatch {sbatch_args} --export=ALL,BENCH_PREDECESSOR=$SLURM_JOB_ID --dependency=afterany:$SLURM_JOB_ID {script})
echo "bench successor $succ"
if [ {release} -gt 0 ]; then
  (sleep $(( BATON_DEADLINE - {release} - $(date +%s) )); scontrol update JobId=$succ Dependency=; \\
   echo "bench released $(date +%s.%N)") &
fi
{train}
echo "bench end $(date +%s.%N)"
if finished; then scancel "$succ"; fi
"""
# The script submits its own successor at its end.
RESUBMIT_BODY = """{train}
echo "bench end $(date +%s.%N)"
if ! finished; then sbatch {sbatch_args} {script}; fi
"""


def write_script(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


class Chain:
    """One chain of one arm, started at a probe moment."""

    def __init__(self, arm, name, phase, iterations):
        self.arm, self.name, self.phase, self.iterations = arm, name, phase, iterations
        self.submitted_at = None
        self.job_ids = set()  # every job id submitted for it (the baton arm: from the chain document)
        self.doc = None


class Submitter:
    """Submits chains as `user` on the benchmark's cluster; `as_user` wraps a command to run as it."""

    def __init__(self, app, work, chains_root, chain_job, limit_min, as_user, batonctl, url_of):
        self.app, self.work, self.chains_root = app, work, chains_root
        self.chain_job, self.limit_min = chain_job, limit_min
        self.as_user, self.batonctl, self.url_of = as_user, batonctl, url_of

    def output(self, chain):
        return f"{self.work}/{chain.name}-%j.out"

    def job_args(self, chain):
        return [f"--time={self.limit_min}", "--nodes=1", "--ntasks=1", "--exclusive",
                f"--job-name={chain.name}", f"--output={self.output(chain)}", f"--chdir={self.work}"]

    def train(self, chain):
        return f"{self.chain_job} --total-iterations={chain.iterations}"

    def anchor_prelude(self, chain, deadline):
        text = PRELUDE + ANCHOR_ENV.format(chain_dir=f"{self.chains_root}/{chain.name}")
        if deadline:
            text += DEADLINE.format(margin=MARGIN_S)
        return text + DONE.format(output=f"{self.work}/{chain.name}-$SLURM_JOB_ID.out")

    def sbatch(self, chain, script, extra):
        result = subprocess.run(self.as_user(["sbatch", "--parsable", *self.job_args(chain), *extra, script]),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        if result.returncode != 0:
            raise RuntimeError(f"sbatch for {chain.name} failed: {result.stdout}")
        chain.job_ids.add(int(result.stdout.strip().split(";")[0]))

    def submit(self, chain, now, per_job_training_s):
        chain.submitted_at = now
        script = f"{self.app}/{chain.name}.sh"
        if chain.arm.startswith("baton"):
            write_script(script, PRELUDE + f"exec {self.train(chain)}\n")
            result = subprocess.run(self.as_user(
                [self.batonctl, "submit", "--chain", chain.name, "--policy", chain.arm[len("baton-"):],
                 "--workdir", self.work, "--server", self.url_of(), script, "--", *self.job_args(chain)]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, timeout=60)
            if result.returncode != 0:
                raise RuntimeError(f"batonctl submit {chain.name} failed: {result.stdout}")
        elif chain.arm == "requeue":
            write_script(script, self.anchor_prelude(chain, deadline=False)
                         + REQUEUE_BODY.format(train=self.train(chain)))
            self.sbatch(chain, script, ["--requeue", f"--signal=B:USR1@{SIGNAL_LEAD_S}", "--open-mode=append"])
        elif chain.arm == "singleton":
            write_script(script, self.anchor_prelude(chain, deadline=True)
                         + SINGLETON_BODY.format(train=self.train(chain)))
            for _ in range(singleton_jobs(chain.iterations, per_job_training_s)):
                self.sbatch(chain, script, ["--dependency=singleton"])
        elif chain.arm == "resubmit":
            args = " ".join(self.job_args(chain) + ["--parsable"])
            write_script(script, self.anchor_prelude(chain, deadline=True)
                         + RESUBMIT_BODY.format(train=self.train(chain), sbatch_args=args, script=script))
            self.sbatch(chain, script, [])
        elif chain.arm in HELD:
            args = " ".join(self.job_args(chain) + ["--parsable"])
            release = RELEASE_LEAD_S if chain.arm == "released" else 0
            write_script(script, self.anchor_prelude(chain, deadline=True)
                         + HELD_BODY.format(train=self.train(chain), sbatch_args=args, script=script,
                                            release=release))
            self.sbatch(chain, script, [])
        else:
            raise ValueError(chain.arm)


def singleton_jobs(iterations, per_job_training_s, iteration_s=0.05):
    """K: the jobs the training needs at the training a job holds, and one to spare."""
    return math.ceil(iterations * iteration_s / per_job_training_s) + 1


class Run:
    """One run of a job (a requeued job runs more than once), read from its output."""

    def __init__(self, job_id, start, node):
        self.job_id, self.start, self.node = job_id, start, node
        self.end = None
        self.restored = None  # iteration restored, None for a fresh start
        self.trained_from = None  # (iteration, time)
        self.final = None  # (iteration, time, training done)
        self.done_at_restore = False


RUN_LINES = [
    (re.compile(r"^restored iteration (\d+) verified$"), "restored"),
    (re.compile(r"^training from iteration (\d+) at ([0-9.]+)$"), "from"),
    (re.compile(r"^final checkpoint iteration (\d+) committed at (\d+)( \(training done\))?$"), "final"),
    (re.compile(r"^training done at iteration (\d+) committed$"), "done"),
    (re.compile(r"^bench end ([0-9.]+)"), "end"),
]


def read_runs(path, job_id):
    runs = []
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return runs
    for line in text.splitlines():
        m = re.match(r"^bench start ([0-9.]+) (\S+)", line)
        if m:
            runs.append(Run(job_id, float(m.group(1)), m.group(2)))
            continue
        if not runs:
            continue
        r = runs[-1]
        for pattern, kind in RUN_LINES:
            m = pattern.match(line)
            if not m:
                continue
            if kind == "restored":
                r.restored = int(m.group(1))
            elif kind == "from":
                r.trained_from = (int(m.group(1)), float(m.group(2)))
            elif kind == "final":
                r.final = (int(m.group(1)), float(m.group(2)), bool(m.group(3)))
            elif kind == "done":
                r.done_at_restore = r.final is None
            elif kind == "end":
                r.end = float(m.group(1))
    return runs
