#!/usr/bin/python3
"""A torchrun training in an `srun` step, handed over by batond's request and TERM and by the deadline,
each final checkpoint taking longer than torchrun's 30 s grace, and resumed bit-identical.

Starts a private slurmctld + slurmd with spank_baton.so. Each job runs one `srun` task that is
torchrun (`torch.distributed.run --nproc_per_node=2`, static rendezvous) over ddp_test.py's worker:
two DDP ranks (gloo) whose every final checkpoint sleeps 35 s before it starts, as a large model's
would take that long. torchrun forwards a SIGTERM to its ranks and SIGKILLs them 30 s later.
1. The first job is handed over as batond does it: the request in the chain directory
   (.baton-handover-request naming the job's seq and id), then `scancel --signal=TERM` of its steps
   30 s later (batond's handover_signal_delay_seconds). Both ranks must stop at one two-rank final
   checkpoint that commits after the TERM, unkilled.
2. The second job resumes it and is stopped by its deadline (a two-minute limit, BATON_DEADLINE_MARGIN
   95 s): its final checkpoint, slowed too, commits before the limit; the job completes.
3. The third finishes the training; both ranks' final state must equal a straight two-rank run's.

Exit status: 0 passed, 1 failed, 77 skipped (not root, Slurm absent, torch or scikit-learn missing).
"""

import argparse
import json
import os
import subprocess
import sys
import time

try:
    import torch
    import sklearn  # noqa: F401
except ImportError as missing:
    print(f"skipped: {missing}", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_test  # noqa: E402  (after the skip)
from sbatch_test import Failure, cannot_run_slurm, job_state, private_slurm, read, run  # noqa: E402

FINAL_SLEEP = 35  # seconds: more than torchrun's 30 s between its SIGTERM and its SIGKILL
SIGNAL_DELAY = 30  # batond's handover_signal_delay_seconds, its default

SCRIPT = """#!/bin/bash
set -euo pipefail
# One srun task: torchrun, which starts the two ranks and stands between Slurm's signals and them. Its
# rendezvous is the static one on a port of the test's. (--redirects/--tee 1: PyTorch 1.13's torchrun
# cannot parse their default 0 on Python 3.11; torchrun_without_libuv.py: 2.6's ignores USE_LIBUV=0.)
export USE_LIBUV=0
srun --ntasks=1 bash -c 'exec "$PYTHON" "$TORCHRUN" --nnodes=1 --nproc_per_node=2 --master_addr=127.0.0.1 \\
    --master_port="$DDP_PORT" --redirects=1 --tee=1 --log_dir="$RESULTS/torchrun" \\
    "$DDP_TEST" --worker --chain-dir "$BATON_CHAIN_DIR" --results "$RESULTS" --steps "$STEPS" --interval 0 \\
    --seed 1 --example "$EXAMPLE" --slow 0.05 --final-sleep "$FINAL_SLEEP"'
"""


class Jobs:
    def __init__(self, args, base, env):
        self.args, self.base, self.env = args, base, env
        self.script = os.path.join(base, "torchrun.sbatch")
        with open(self.script, "w") as f:
            f.write(SCRIPT)
        self.chain = os.path.join(base, "chains", "root", "torchrun")

    def submit(self, name, steps, extra):
        """Submits one job of the chain; (job id, its results folder, its output file)."""
        results = os.path.join(self.base, name)
        os.makedirs(results)
        output = os.path.join(self.base, f"{name}.out")
        job_env = dict(self.env, PYTHON=sys.executable, DDP_TEST=ddp_test.__file__, RESULTS=results,
                       TORCHRUN=os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchrun_without_libuv.py"),
                       DDP_PORT=str(ddp_test.free_port()),
                       STEPS=str(steps), EXAMPLE=self.args.example, FINAL_SLEEP=str(FINAL_SLEEP),
                       OMP_NUM_THREADS="1")
        code, text = run(["sbatch", "--parsable", "--ntasks=1", "--baton=torchrun", f"--output={output}", *extra,
                          self.script], job_env, timeout=60)
        if code != 0:
            raise Failure(f"sbatch of {name} exited with {code}:\n{text}")
        return text.strip().splitlines()[-1].split(";")[0], results, output

    def wait_end(self, job, output, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            state = job_state(self.env, job)
            if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
                return state
            time.sleep(1)
        raise Failure(f"job {job} still {job_state(self.env, job)} after {timeout} s:\n{read(output)}")

    def wait_restored(self, job, results, output, timeout):
        end = time.monotonic() + timeout
        while not os.path.exists(os.path.join(results, "restored-0")):
            state = job_state(self.env, job)
            if time.monotonic() > end or state not in ("PENDING", "CONFIGURING", "RUNNING"):
                raise Failure(f"job {job} ({state}) did not start its training:\n{read(output)}")
            time.sleep(0.5)

    def ranks(self, job, results, output):
        found = []
        for rank in range(2):
            try:
                with open(os.path.join(results, f"restored-{rank}")) as r, \
                        open(os.path.join(results, f"exit-{rank}")) as e:
                    found.append({"restored": json.load(r), "exit": json.load(e)})
            except FileNotFoundError:
                raise Failure(f"job {job}: rank {rank} did not exit on its own (killed?):\n{read(output)}")
        return found

    def final_checkpoint(self, job, ranks, output):
        """The step of the two-rank final checkpoint both ranks stopped at, slowed by FINAL_SLEEP."""
        steps = {r["exit"]["step"] for r in ranks}
        if len(steps) != 1 or not all(r["exit"]["should_exit"] and not r["exit"]["finished"] for r in ranks):
            raise Failure(f"job {job}: the ranks did not stop together at a final checkpoint: {ranks}\n{read(output)}")
        step = steps.pop()
        with open(os.path.join(self.chain, f"ckpt-{step:012d}", "manifest.json")) as f:
            manifest = json.load(f)
        if manifest["world_size"] != 2 or not manifest["final"]:
            raise Failure(f"job {job}: the checkpoint of step {step} is not one two-rank final checkpoint")
        for r in ranks:
            stage = r["exit"]["final_stage"]
            if stage.get("iteration") != step or stage["staged_unix"] - stage["began_unix"] < FINAL_SLEEP:
                raise Failure(f"job {job}: the final checkpoint of step {step} was not the slowed one: {stage}")
        return step




def handover_by_request_and_term(jobs):
    job, results, output = jobs.submit("handover", 1_000_000, ["--time=5"])
    jobs.wait_restored(job, results, output, 120)
    time.sleep(3)  # a few steps of training
    with open(os.path.join(results, "restored-0")) as f:
        seq = int(json.load(f)["chain_seq"])
    # What batond writes (as the chain's owner) before it signals a handover's predecessor.
    request = os.path.join(jobs.chain, ".baton-handover-request")
    asked = time.time()
    with open(request + ".tmp", "w") as f:
        json.dump({"version": 1, "seq": seq, "job_id": int(job), "time_unix": int(asked)}, f)
    os.rename(request + ".tmp", request)
    time.sleep(SIGNAL_DELAY)
    code, text = run(["scancel", "--signal=TERM", job], jobs.env, timeout=60)
    termed = time.time()
    if code != 0:
        raise Failure(f"scancel --signal=TERM {job}: {text}")
    jobs.wait_end(job, output, 180)
    ranks = jobs.ranks(job, results, output)
    step = jobs.final_checkpoint(job, ranks, output)
    committed = max(r["exit"]["time_unix"] for r in ranks)
    if committed < termed:
        raise Failure(f"job {job}: the ranks ended before the TERM: the final checkpoint was not cut short")
    os.unlink(request)  # batond's successor would find its own seq in it, not this one
    print(f"job {job}: asked at 0 s, TERM at {termed - asked:.0f} s; both ranks committed the two-rank final "
          f"checkpoint of step {step} ({FINAL_SLEEP} s slower) at {committed - asked:.0f} s, after the TERM, "
          "unkilled", flush=True)
    return step


def handover_by_deadline(jobs, previous):
    # The final checkpoint is due 95 s before the limit (after ~25 s of training) and takes 35 s.
    job, results, output = jobs.submit("deadline", 1_000_000, ["--time=2", "--baton-margin=95"])
    state = jobs.wait_end(job, output, 240)
    ranks = jobs.ranks(job, results, output)
    if {r["restored"]["iteration"] for r in ranks} != {previous}:
        raise Failure(f"job {job} did not resume both ranks from step {previous}: {ranks}")
    step = jobs.final_checkpoint(job, ranks, output)
    if state != "COMPLETED":
        raise Failure(f"job {job} ended {state}, not COMPLETED: it should stop before its limit\n{read(output)}")
    print(f"job {job}: resumed from step {previous}; the deadline's final checkpoint of step {step} "
          f"({FINAL_SLEEP} s slower) committed before the limit; the job completed", flush=True)
    return step


def finish(jobs, previous, base):
    total = previous + 40
    job, results, output = jobs.submit("finish", total, ["--time=3"])
    state = jobs.wait_end(job, output, 240)
    ranks = jobs.ranks(job, results, output)
    if state != "COMPLETED" or {r["restored"]["iteration"] for r in ranks} != {previous} \
            or not all(r["exit"]["finished"] for r in ranks):
        raise Failure(f"job {job} ({state}) did not resume both ranks from step {previous} and finish: {ranks}")
    finals = [torch.load(os.path.join(results, f"final-{rank}.pt")) for rank in range(2)]
    differs = ddp_test.compare_with_straight_run(jobs.args.example, total, base, finals)
    if differs:
        raise Failure(differs)
    print(f"job {job}: resumed from step {previous}; {total} steps bit-identical to a straight two-rank run",
          flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--example", required=True)
    parser.add_argument("--spank-plugin", required=True)
    parser.add_argument("--slurm-script", required=True, help="deploy/local/slurm.sh")
    args = parser.parse_args()
    if cannot_run_slurm():
        print(f"skipped: {cannot_run_slurm()}", file=sys.stderr)
        return 77
    args.example = os.path.abspath(args.example)
    started = time.monotonic()
    try:
        with private_slurm(args, "baton-torchrun-") as (base, env):
            jobs = Jobs(args, base, env)
            step = handover_by_request_and_term(jobs)
            step = handover_by_deadline(jobs, step)
            finish(jobs, step, base)
    except (Failure, subprocess.TimeoutExpired) as failure:
        print(f"FAILED: {failure}", flush=True)
        return 1
    print(f"ok in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
