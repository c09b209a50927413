#!/usr/bin/python3
"""The digits example as a chain of two Slurm jobs under the SPANK plugin, bit-identical to one run.

Starts a private slurmctld + slurmd with spank_baton.so, submits examples/train_digits.sbatch with a
one-minute limit and a long run: the job must commit a final checkpoint before its deadline and exit
cleanly on its own. A second job of the same chain resumes from that checkpoint and finishes the run.
The chain's loss log must then equal, byte for byte, the log of the same run trained straight through
without checkpoints.

Exit status: 0 passed, 1 failed, 77 skipped (not root, Slurm absent, torch or scikit-learn missing).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import torch  # noqa: F401
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


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sbatch-script", required=True)
    parser.add_argument("--example", required=True)
    parser.add_argument("--spank-plugin", required=True)
    parser.add_argument("--slurm-script", required=True, help="deploy/local/slurm.sh")
    args = parser.parse_args()
    if os.geteuid() != 0 or shutil.which("slurmctld") is None or shutil.which("sbatch") is None:
        print("skipped: needs root and Slurm (slurmctld, slurmd, sbatch)", file=sys.stderr)
        return 77
    args.example = os.path.abspath(args.example)

    base = tempfile.mkdtemp(prefix="baton-sbatch-")
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
        env = dict(os.environ, SLURM_CONF=conf.split("=", 1)[1])
        chain_test(args, base, env)
    except (Failure, subprocess.TimeoutExpired) as failure:
        print(f"FAILED: {failure}", flush=True)
        return 1
    finally:
        run(["bash", args.slurm_script, "stop", cluster], timeout=120)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
