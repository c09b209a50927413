#!/usr/bin/python3
"""Kill-and-resume test of the PyTorch example: bit-identical training after `kill -9`.

Trains the digits example straight through without checkpointing (the reference). Then, for each of
several random kill points, trains it with checkpoints, sends SIGKILL once the loss log reaches the kill
step (a checkpoint may be in flight), restarts it from the chain and lets it finish. The final
parameters, optimizer and scheduler state and the whole loss curve must equal the reference bit for
bit. A last scenario kills the same chain several times in a row.

Exit status: 0 passed, 1 failed, 77 skipped (torch or scikit-learn missing).
"""

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

try:
    import torch
    import sklearn  # noqa: F401  (the example's data set)
except ImportError as missing:
    print(f"skipped: {missing}", file=sys.stderr)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_EXAMPLE = os.path.join(HERE, "..", "..", "examples", "train_digits.py")


class Failure(Exception):
    pass


def run_example(args, chain_dir, loss_log, final_state, kill_at=None, interval=None):
    """Runs the example to the end, or kills it once `kill_at` steps are logged. Returns its output and
    whether it was killed before finishing."""
    argv = [sys.executable, args.example, "--steps", str(args.steps), "--loss-log", loss_log,
            "--final-state", final_state]
    if chain_dir is None:
        argv.append("--no-checkpoint")
    else:
        argv += ["--chain-dir", chain_dir]
    if interval is not None:
        argv += ["--checkpoint-every", str(interval)]
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        killed = False
        deadline = time.monotonic() + args.timeout
        while process.poll() is None:
            if time.monotonic() > deadline:
                process.kill()
                process.wait()
                raise Failure(f"{' '.join(argv)} did not finish within {args.timeout} s")
            if kill_at is not None and logged_steps(loss_log) >= kill_at:
                process.send_signal(signal.SIGKILL)
                process.wait()
                killed = True
                break
            time.sleep(0.002)
        out.seek(0)
        output = out.read().decode(errors="replace")
    if not killed and process.returncode != 0:
        raise Failure(f"{' '.join(argv)} exited with {process.returncode}:\n{output}")
    return output, killed


def logged_steps(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def resumed_step(output):
    for line in output.splitlines():
        if line.startswith("resumed from step "):
            return int(line.split()[3])
    return 0


def same_bits(a, b, where):
    """Raises Failure naming the first difference; floats compare by their bytes (NaN, -0.0)."""
    if type(a) is not type(b):
        raise Failure(f"{where}: {type(a).__name__} != {type(b).__name__}")
    if isinstance(a, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape:
            raise Failure(f"{where}: {a.dtype}{list(a.shape)} != {b.dtype}{list(b.shape)}")
        if a.contiguous().numpy().tobytes() != b.contiguous().numpy().tobytes():
            raise Failure(f"{where}: tensors differ (max abs diff {(a.double() - b.double()).abs().max().item()})")
    elif isinstance(a, dict):
        if a.keys() != b.keys():
            raise Failure(f"{where}: keys {sorted(map(str, a))} != {sorted(map(str, b))}")
        for key in a:
            same_bits(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            raise Failure(f"{where}: length {len(a)} != {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            same_bits(x, y, f"{where}[{i}]")
    elif isinstance(a, float):
        if a.hex() != b.hex():
            raise Failure(f"{where}: {a!r} != {b!r}")
    elif a != b:
        raise Failure(f"{where}: {a!r} != {b!r}")


def compare(reference, candidate, what):
    with open(reference["log"], "rb") as f:
        expected_log = f.read()
    with open(candidate["log"], "rb") as f:
        got_log = f.read()
    if got_log != expected_log:
        expected, got = expected_log.splitlines(), got_log.splitlines()
        first = next((i for i, (x, y) in enumerate(zip(expected, got)) if x != y), min(len(expected), len(got)))
        raise Failure(f"{what}: loss log differs from line {first + 1} "
                      f"({len(got)} lines, reference {len(expected)})")
    same_bits(torch.load(reference["state"]), torch.load(candidate["state"]), what)


def paths(work, name):
    return {"chain": os.path.join(work, name, "chain"), "log": os.path.join(work, name, "loss.log"),
            "state": os.path.join(work, name, "final.pt")}


def scenario(args, work, name, kill_points, interval):
    """Kills one chain at each of `kill_points` in turn, then lets it finish. Returns the steps it
    resumed from. `interval` None: the checkpointer's policy places the checkpoints."""
    p = paths(work, name)
    os.makedirs(os.path.dirname(p["log"]))
    resumed = []
    for number, kill_at in enumerate(kill_points):
        output, killed = run_example(args, p["chain"], p["log"], p["state"], kill_at, interval)
        if not killed:
            raise Failure(f"{name}: the run finished before the kill at step {kill_at}:\n{output}")
        if number > 0:
            resumed.append(resumed_step(output))
    output, _ = run_example(args, p["chain"], p["log"], p["state"], None, interval)
    resumed.append(resumed_step(output))
    return p, resumed


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--example", default=DEFAULT_EXAMPLE)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--interval", type=int, default=20, help="checkpoint every this many steps")
    parser.add_argument("--kills", type=int, default=5, help="independent kill points (at least 5)")
    parser.add_argument("--chain-kills", type=int, default=3, help="successive kills of one chain")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("BATON_TEST_SEED", "20")))
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"seed {args.seed}, {args.steps} steps, checkpoint every {args.interval}", flush=True)

    with tempfile.TemporaryDirectory(prefix="baton-kill-resume-") as work:
        reference = paths(work, "reference")
        os.makedirs(os.path.dirname(reference["log"]))
        run_example(args, None, reference["log"], reference["state"])
        if logged_steps(reference["log"]) != args.steps:
            raise Failure(f"the reference run logged {logged_steps(reference['log'])} steps, not {args.steps}")

        failures = 0
        resumed_any = False
        plans = [([rng.randrange(2, args.steps - 10)], args.interval) for _ in range(args.kills)]
        # Successive kills of one chain, one per segment, so that each run gets further than the last.
        segment = (args.steps - 10) // args.chain_kills
        # That chain leaves the checkpoints' placement to the policy: wherever they land, the result
        # must be the same.
        plans.append(([j * segment + rng.randrange(segment // 2, segment) for j in range(args.chain_kills)], None))
        for number, (plan, interval) in enumerate(plans):
            name = f"kill-{number}" if interval else f"kill-{number}-policy"
            try:
                candidate, resumed = scenario(args, work, name, plan, interval)
                compare(reference, candidate, name)
                resumed_any = resumed_any or any(resumed)
                print(f"{name}: killed at steps {plan}, resumed from {resumed}: bit-identical", flush=True)
            except Failure as failure:
                failures += 1
                print(f"{name}: killed at steps {plan}: FAILED: {failure}", flush=True)
        if not resumed_any and not failures:
            print("FAILED: no run resumed from a checkpoint, so nothing was tested", flush=True)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failure as failure:
        print(f"FAILED: {failure}", flush=True)
        sys.exit(1)
