#!/usr/bin/python3
"""An FSDP training as a chain of Slurm jobs under the SPANK plugin: a plain `sbatch --baton` job whose
`srun` step runs 4 ranks (gloo, CPU; sharded_ranks.py's FSDP mode) stops at one four-rank final
checkpoint before its time limit, and the next job of the chain, on 2 ranks, restores it: its whole
state (gathered by FSDP's own full-state API) equals the one the 4 ranks saved, bit for bit, and the
training runs to its end.

Needs PyTorch 2.4 or newer (exit 77 on older ones), root and Slurm. Exit 0 passed, 1 failed.
"""

import argparse
import json
import os
import socket
import subprocess
import sys

try:
    import torch
except ImportError as missing:
    print(f"skipped: {missing}", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sbatch_test import Failure, cannot_run_slurm, job_state, private_slurm, read, run  # noqa: E402

RANKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sharded_ranks.py")

# The script reads its number of ranks from Slurm, as a user's does.
SCRIPT = """#!/bin/bash
set -euo pipefail
srun --overcommit bash -c 'exec "$PYTHON" "$RANKS" --mode fsdp --rank "$SLURM_PROCID" --ranks "$SLURM_NTASKS" \\
    --port "$PORT" --chain-dir "$BATON_CHAIN_DIR" --results "$RESULTS" --steps "$STEPS" --interval 0 --slow "$SLOW"'
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spank-plugin", required=True)
    parser.add_argument("--slurm-script", required=True, help="deploy/local/slurm.sh")
    args = parser.parse_args()
    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 4):
        print(f"skipped: FSDP on the CPU needs PyTorch 2.4 or newer, this is {torch.__version__}", file=sys.stderr)
        return 77
    if cannot_run_slurm():
        print(f"skipped: {cannot_run_slurm()}", file=sys.stderr)
        return 77
    try:
        with private_slurm(args, "baton-sharded-sbatch-") as (base, env):
            script = os.path.join(base, "fsdp.sbatch")
            with open(script, "w") as f:
                f.write(SCRIPT)

            def submit(name, tasks, steps, slow, extra):
                results = os.path.join(base, name)
                os.makedirs(results)
                os.chmod(results, 0o777)
                output = os.path.join(base, f"{name}.out")
                job_env = dict(env, PYTHON=sys.executable, RANKS=RANKS, PORT=str(free_port()), RESULTS=results,
                               STEPS=str(steps), SLOW=str(slow), OMP_NUM_THREADS="1", USE_LIBUV="0")
                code, text = run(["sbatch", "--wait", "--parsable", f"--ntasks={tasks}", "--overcommit",
                                  "--baton=fsdp", f"--output={output}", *extra, script], job_env, timeout=300)
                job = text.strip().splitlines()[-1].split(";")[0] if text.strip() else ""
                if code != 0:
                    raise Failure(f"sbatch of {name} exited with {code}:\n{text}\njob output:\n{read(output)[-4000:]}")
                exits = []
                for rank in range(tasks):
                    with open(os.path.join(results, f"exit-{rank}.json")) as e, \
                            open(os.path.join(results, f"restored-{rank}.json")) as r:
                        exits.append({**json.load(e), "restored": json.load(r)["iteration"]})
                return job, exits, results

            job, exits, first = submit("fsdp4", 4, 1_000_000, 0.05, ["--time=1", "--baton-margin=25"])
            stops = {e["iteration"] for e in exits}
            if len(stops) != 1 or not all(e["should_exit"] and not e["finished"] for e in exits):
                raise Failure(f"job {job}: the 4 ranks did not stop together at the final checkpoint: {exits}")
            stop = stops.pop()
            if job_state(env, job) != "COMPLETED":
                raise Failure(f"job {job} ended {job_state(env, job)}, not COMPLETED")
            chain = os.path.join(base, "chains", "root", "fsdp")
            with open(os.path.join(chain, f"ckpt-{stop:012d}", "manifest.json")) as f:
                manifest = json.load(f)
            if manifest["format_version"] != 3 or manifest["world_size"] != 4 or not manifest["final"]:
                raise Failure(f"the final checkpoint is not one four-rank checkpoint of tensor pieces: "
                              f"{ {k: manifest.get(k) for k in ('format_version', 'world_size', 'final')} }")
            print(f"job {job}: 4 FSDP ranks stopped at the four-rank final checkpoint of iteration {stop}", flush=True)

            total = stop + 20
            job, exits, second = submit("fsdp2", 2, total, 0, ["--time=2"])
            if {e["restored"] for e in exits} != {stop} or not all(e["finished"] for e in exits):
                raise Failure(f"job {job} did not resume its 2 ranks from iteration {stop} and finish: {exits}")
            saved = torch.load(os.path.join(first, f"state-end-{stop}.pt"), weights_only=True)
            restored = torch.load(os.path.join(second, f"state-restored-{stop}.pt"), weights_only=True)
            if sorted(saved) != sorted(restored) or not all(torch.equal(saved[k], restored[k]) for k in saved):
                raise Failure("the state restored on 2 ranks differs from the one 4 ranks saved")
            print(f"job {job}: 2 ranks restored the 4 ranks' state bit-equal at iteration {stop} and trained "
                  f"to {total}", flush=True)
    except (Failure, subprocess.TimeoutExpired) as failure:
        print(f"FAILED: {failure}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
