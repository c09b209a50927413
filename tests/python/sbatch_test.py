#!/usr/bin/python3
"""The digits example as a chain of two Slurm jobs under the SPANK plugin, bit-identical to one run.

Starts a private slurmctld + slurmd with spank_baton.so, submits examples/train_digits.sbatch with a
one-minute limit and a long run: the job must commit a final checkpoint before its deadline and exit
cleanly on its own. A second job of the same chain resumes from that checkpoint and finishes the run.
The chain's loss log must then equal, byte for byte, the log of the same run trained straight through
without checkpoints. Then the same with two ranks under DDP in an `srun -n 2` step (ddp_test.py's
worker): both ranks stop at one two-rank final checkpoint before the deadline, the next job resumes both
and ends bit-identical to a straight two-rank run, and the plugin reports the step's tasks and the
checkpoint's world size.

Exit status: 0 passed, 1 failed, 77 skipped (not root, Slurm absent, torch or scikit-learn missing).
"""

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
    import sklearn  # noqa: F401
except ImportError as missing:
    print(f"skipped: {missing}", file=sys.stderr)
    sys.exit(77)


class Failure(Exception):
    pass


def run(argv, env=None, timeout=300):
    result = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    return result.returncode, result.stdout.decode(errors="replace")


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def job_state(env, job):
    _, text = run(["scontrol", "-o", "show", "job", job], env)
    match = re.search(r"JobState=(\S+)", text)
    return match.group(1) if match else text


def submit(args, env, output, steps, extra=()):
    job_env = dict(env, STEPS=str(steps), PYTHON=sys.executable, TRAIN_SCRIPT=args.example)
    code, text = run(["sbatch", "--wait", "--parsable", f"--output={output}", *extra, args.sbatch_script],
                     job_env, timeout=240)
    job = text.strip().splitlines()[-1].split(";")[0] if text.strip() else ""
    if code != 0:
        raise Failure(f"sbatch exited with {code}:\n{text}\njob output:\n{read(output)}")
    return job, read(output)


def chain_test(args, base, env):
    # A long run that one job cannot finish: it must stop at its final checkpoint.
    first_out = os.path.join(base, "job1.out")
    job, text = submit(args, env, first_out, 1_000_000, ["--time=1", "--baton-margin=20", "--signal=B:USR1@10"])
    stopped = re.search(r"stopped at step (\d+): the final checkpoint of this job has committed", text)
    if not stopped:
        raise Failure(f"job {job} did not stop at a final checkpoint:\n{text}")
    final_step = int(stopped.group(1))
    state = job_state(env, job)
    if state != "COMPLETED":
        raise Failure(f"job {job} ended {state}, not COMPLETED: it should exit before the limit")
    chain = os.path.join(base, "chains", "root", "digits")
    if not os.path.exists(os.path.join(chain, f"ckpt-{final_step:012d}", "manifest.json")):
        raise Failure(f"no committed checkpoint of step {final_step} in {chain}: {os.listdir(chain)}")
    print(f"job {job}: final checkpoint at step {final_step}, exited cleanly", flush=True)

    total = final_step + 40
    second_out = os.path.join(base, "job2.out")
    job, text = submit(args, env, second_out, total, ["--time=2"])
    if f"resumed from step {final_step} " not in text or f"step {total} test accuracy" not in text:
        raise Failure(f"job {job} did not resume from step {final_step} and finish:\n{text}")
    print(f"job {job}: resumed from step {final_step}, finished at step {total}", flush=True)

    reference = os.path.join(base, "reference.log")
    code, text = run([sys.executable, args.example, "--no-checkpoint", "--steps", str(total),
                      "--loss-log", reference], dict(os.environ), timeout=900)
    if code != 0:
        raise Failure(f"the reference run failed:\n{text}")
    with open(reference, "rb") as f:
        expected = f.read()
    with open(os.path.join(chain, "loss.log"), "rb") as f:
        got = f.read()
    if got != expected:
        lines, expected_lines = got.count(b"\n"), expected.count(b"\n")
        raise Failure(f"the chain's loss log ({lines} lines) differs from the straight run's ({expected_lines})")
    print(f"loss log of {total} steps bit-identical to the run without checkpoints", flush=True)


DDP_SCRIPT = """#!/bin/bash
set -euo pipefail
# Two ranks of the digits example under DDP (gloo) in one srun step; the plugin's BATON_* environment
# reaches both tasks and the checkpoint policy's final checkpoint is agreed by them.
srun --ntasks=2 bash -c 'exec "$PYTHON" "$DDP_TEST" --worker --rank "$SLURM_PROCID" --ranks "$SLURM_NTASKS" \\
    --port "$DDP_PORT" --chain-dir "$BATON_CHAIN_DIR" --results "$RESULTS" --steps "$STEPS" --interval 0 \\
    --seed 1 --example "$EXAMPLE" --slow 0.05'
"""


def ddp_chain_test(args, base, env):
    """`srun -n 2` jobs of one chain: the first commits a two-rank checkpoint before its deadline and both
    ranks stop there; the second restores it on both ranks and finishes bit-identical to a straight
    two-rank run."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import ddp_test

    script = os.path.join(base, "ddp.sbatch")
    with open(script, "w") as f:
        f.write(DDP_SCRIPT)

    def submit_ddp(name, steps, extra):
        results = os.path.join(base, name)
        os.makedirs(results)
        output = os.path.join(base, f"{name}.out")
        job_env = dict(env, PYTHON=sys.executable, DDP_TEST=ddp_test.__file__, DDP_PORT=str(ddp_test.free_port()),
                       RESULTS=results, STEPS=str(steps), EXAMPLE=args.example, OMP_NUM_THREADS="1")
        code, text = run(["sbatch", "--wait", "--parsable", "--ntasks=2", "--baton=ddp", f"--output={output}",
                          *extra, script], job_env, timeout=240)
        job = text.strip().splitlines()[-1].split(";")[0] if text.strip() else ""
        if code != 0:
            raise Failure(f"sbatch of {name} exited with {code}:\n{text}\njob output:\n{read(output)}")
        ranks = []
        for rank in range(2):
            with open(os.path.join(results, f"restored-{rank}")) as r, open(os.path.join(results, f"exit-{rank}")) as e:
                ranks.append({"restored": json.load(r), "exit": json.load(e)})
        return job, ranks, results

    job, ranks, _ = submit_ddp("ddp1", 1_000_000, ["--time=1", "--baton-margin=20"])
    steps = {r["exit"]["step"] for r in ranks}
    if len(steps) != 1 or not all(r["exit"]["should_exit"] and not r["exit"]["finished"] for r in ranks):
        raise Failure(f"job {job}: the ranks did not stop together at the final checkpoint: {ranks}")
    final_step = steps.pop()
    if job_state(env, job) != "COMPLETED":
        raise Failure(f"job {job} ended {job_state(env, job)}, not COMPLETED")
    chain = os.path.join(base, "chains", "root", "ddp")
    with open(os.path.join(chain, f"ckpt-{final_step:012d}", "manifest.json")) as f:
        manifest = json.load(f)
    if manifest["format_version"] != 2 or manifest["world_size"] != 2 or not manifest["final"]:
        raise Failure(f"the final checkpoint is not one two-rank checkpoint: {manifest}")
    print(f"job {job}: both ranks stopped at the two-rank final checkpoint of step {final_step}", flush=True)

    total = final_step + 40
    job, ranks, results = submit_ddp("ddp2", total, ["--time=2"])
    if {r["restored"]["iteration"] for r in ranks} != {final_step} or not all(r["exit"]["finished"] for r in ranks):
        raise Failure(f"job {job} did not resume both ranks from step {final_step} and finish: {ranks}")
    finals = [torch.load(os.path.join(results, f"final-{rank}.pt")) for rank in range(2)]

    differs = ddp_test.compare_with_straight_run(args.example, total, base, finals)
    if differs:
        raise Failure(differs)
    print(f"job {job}: both ranks resumed from step {final_step}; {total} steps bit-identical to a straight run",
          flush=True)

    # The plugin's reports (spooled: no batond here) name the step's two tasks and the checkpoint's layout.
    exits = [e for e in map(json.loads, read(os.path.join(chain, ".baton-spool", "events.jsonl")).splitlines())
             if e["kind"] == "task_exit" and e["step"] == "0" and e["checkpoint"]]
    if not exits or not all(e["tasks"] == 2 and e["checkpoint"]["world_size"] == 2
                            and e["checkpoint"]["region_layouts"].get("replicated", 0) > 0 for e in exits):
        raise Failure(f"the step's reports do not name two tasks and a two-rank checkpoint: {exits}")
    print("the plugin reported the step's 2 tasks and the checkpoint's world size and layouts", flush=True)


@contextlib.contextmanager
def private_slurm(args, prefix):
    """A private slurmctld + slurmd with the plugin (args.spank_plugin, started by args.slurm_script), the
    chains under BASE/chains/<user>: yields (BASE, the environment that reaches it); stops and removes it all."""
    base = tempfile.mkdtemp(prefix=prefix)
    os.chmod(base, 0o755)
    os.mkdir(os.path.join(base, "chains"), 0o1777)
    cluster = os.path.join(base, "slurm")
    plugstack = (f"required {args.spank_plugin} chain_root={base}/chains/%u allowed_prefixes={base} "
                 "url=http://127.0.0.1:1 report_timeout=1")
    code, text = run(["bash", args.slurm_script, "start", cluster, plugstack], timeout=120)
    conf = text.strip().splitlines()[-1] if text.strip() else ""
    try:
        if code != 0 or not conf.startswith("SLURM_CONF="):
            raise Failure(f"cannot start Slurm:\n{text}")
        yield base, dict(os.environ, SLURM_CONF=conf.split("=", 1)[1])
    finally:
        run(["bash", args.slurm_script, "stop", cluster], timeout=120)
        shutil.rmtree(base, ignore_errors=True)


def cannot_run_slurm():
    """Why this machine cannot host a private Slurm, or None."""
    if os.geteuid() != 0 or shutil.which("slurmctld") is None or shutil.which("sbatch") is None:
        return "needs root and Slurm (slurmctld, slurmd, sbatch)"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sbatch-script", required=True)
    parser.add_argument("--example", required=True)
    parser.add_argument("--spank-plugin", required=True)
    parser.add_argument("--slurm-script", required=True, help="deploy/local/slurm.sh")
    args = parser.parse_args()
    if cannot_run_slurm():
        print(f"skipped: {cannot_run_slurm()}", file=sys.stderr)
        return 77
    args.example = os.path.abspath(args.example)
    try:
        with private_slurm(args, "baton-sbatch-") as (base, env):
            chain_test(args, base, env)
            ddp_chain_test(args, base, env)
    except (Failure, subprocess.TimeoutExpired) as failure:
        print(f"FAILED: {failure}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
