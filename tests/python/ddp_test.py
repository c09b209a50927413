#!/usr/bin/python3
"""DDP (CPU, gloo) on the digits example with baton.torch: kills, collective restore, agreed handover.

Every launch starts `--ranks` processes (torch.distributed over gloo, DistributedDataParallel, the
example's model, data and ResumableSampler). The test

1. trains the chain once straight through (checkpointing) for the reference final state;
2. kills a second chain `--kills` times: one random rank with SIGKILL at a random moment while the ranks
   train and checkpoint, the others a few milliseconds later (as srun ends a step whose task died); every
   relaunch must restore the same iteration on every rank (each rank reports it), never an older one
   than the launch before restored; the last launch trains to the end and its final parameters and
   optimizer state must equal the reference bit for bit, on every rank;
3. with the checkpoint policy (no fixed interval), sends SIGUSR1 (checkpoint now) to one rank and then
   SIGTERM (final checkpoint and exit) to one rank only: every rank must take the same checkpoints, stop
   after the same final one (should_exit), and a relaunch resumes from it and ends bit for bit equal to
   the reference.

Exit status: 0 passed, 1 failed, 77 skipped (torch, torch.distributed or scikit-learn missing).
"""

import argparse
import importlib.util
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

try:
    import torch
    import torch.distributed
    import sklearn  # noqa: F401  (the example's data set)
except ImportError as missing:
    print(f"skipped: {missing}", file=sys.stderr)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_EXAMPLE = os.path.join(HERE, "..", "..", "examples", "train_digits.py")


class Failure(Exception):
    pass


# --- one rank -----------------------------------------------------------------------------------------


def ordered_mean(state, bucket):
    tensor = bucket.buffer()
    gathered = [torch.empty_like(tensor) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(gathered, tensor)
    total = gathered[0].clone()
    for other in gathered[1:]:
        total += other
    future = torch.futures.Future()
    future.set_result(total / len(gathered))
    return future



def worker(args):
    import baton.torch
    from torch.nn.parallel import DistributedDataParallel
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    spec = importlib.util.spec_from_file_location("train_digits", args.example)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank,
                                         world_size=args.ranks)
    example.make_deterministic(args.seed)
    train_set, _ = example.load_data(args.seed)
    model = DistributedDataParallel(example.DigitsNet())
    if args.ranks > 2:
        # DDP regroups its gradient buckets after the first iteration of every process, and a ring
        # all-reduce of more than two ranks sums each element in an order that depends on where it lies
        # in its bucket: a resumed process would round differently from the straight run (PyTorch's
        # doing, with or without checkpoints). Summing in rank order makes the average independent of
        # the buckets; two ranks need nothing (a + b == b + a).
        model.register_comm_hook(None, ordered_mean)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.5)
    sampler = baton.torch.ResumableSampler(len(train_set), seed=args.seed)  # shards by rank
    loader = DataLoader(train_set, batch_size=16, sampler=sampler,
                        generator=torch.Generator().manual_seed(args.seed))
    ckpt = baton.torch.Checkpointer(model, optimizer, scheduler, sampler, chain_dir=args.chain_dir,
                                    interval=args.interval or None, keep=3)
    restored = ckpt.restore()
    with open(os.path.join(args.results, f"restored-{args.rank}"), "w") as out:
        json.dump({"restored": restored, "iteration": ckpt.iteration}, out)
    step = ckpt.iteration
    while step < args.steps and not ckpt.should_exit:
        for images, labels in loader:
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if args.slow:
                time.sleep(args.slow)
            if step >= args.steps or ckpt.should_exit:
                break
    finished = step >= args.steps
    if finished:
        ckpt.done()
    ok = ckpt.close()
    torch.save({"step": step, "model": model.module.state_dict(), "optimizer": optimizer.state_dict()},
               os.path.join(args.results, f"final-{args.rank}.pt"))
    with open(os.path.join(args.results, f"exit-{args.rank}"), "w") as out:
        json.dump({"step": step, "finished": finished, "should_exit": ckpt.should_exit, "closed_ok": ok}, out)
    torch.distributed.destroy_process_group()
    return 0


# --- the test -----------------------------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Launch:
    """`ranks` worker processes of one chain, with their own results folder."""

    def __init__(self, args, chain_dir, results, interval, slow=0.0):
        os.makedirs(results, exist_ok=True)
        self.results = results
        self.ranks = args.ranks
        port = free_port()
        env = dict(os.environ, OMP_NUM_THREADS="1")
        self.logs = []
        self.processes = []
        for rank in range(args.ranks):
            log = open(os.path.join(results, f"log-{rank}"), "w")
            self.logs.append(log)
            argv = [sys.executable, os.path.abspath(__file__), "--worker", "--rank", str(rank), "--ranks",
                    str(args.ranks), "--port", str(port), "--chain-dir", chain_dir, "--results", results,
                    "--steps", str(args.steps), "--interval", str(interval), "--seed", "1",
                    "--example", args.example, "--slow", str(slow)]
            self.processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env))

    def wait_restored(self, timeout):
        """Every rank's (restored, iteration) once all have restored."""
        deadline = time.monotonic() + timeout
        while True:
            found = []
            for rank in range(self.ranks):
                try:
                    with open(os.path.join(self.results, f"restored-{rank}")) as f:
                        found.append(json.load(f))
                except (OSError, ValueError):
                    break
            if len(found) == self.ranks:
                return found
            if any(p.poll() not in (None, 0) for p in self.processes) or time.monotonic() > deadline:
                self.kill_all()
                raise Failure(f"not every rank restored: {self.tail()}")
            time.sleep(0.02)

    def kill_one_then_all(self, rng):
        victim = rng.randrange(self.ranks)
        self.processes[victim].send_signal(signal.SIGKILL)
        time.sleep(rng.uniform(0, 0.03))
        self.kill_all()
        return victim

    def kill_all(self):
        for p in self.processes:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        self.wait(30)

    def wait(self, timeout):
        deadline = time.monotonic() + timeout
        for p in self.processes:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill_all()
                raise Failure(f"ranks did not finish within {timeout} s: {self.tail()}")
        for log in self.logs:
            log.close()
        return [p.returncode for p in self.processes]

    def tail(self):
        text = []
        for rank in range(self.ranks):
            try:
                with open(os.path.join(self.results, f"log-{rank}")) as f:
                    text.append(f"--- rank {rank}\n" + f.read()[-3000:])
            except OSError:
                pass
        return "\n".join(text)

    def exits(self):
        out = []
        for rank in range(self.ranks):
            with open(os.path.join(self.results, f"exit-{rank}")) as f:
                out.append(json.load(f))
        return out

    def finals(self):
        return [torch.load(os.path.join(self.results, f"final-{rank}.pt")) for rank in range(self.ranks)]


def same_state(a, b, buffers=True):
    """Parameters, optimizer state and (with `buffers`) the model's buffers equal bit for bit. The ranks'
    batch-norm statistics differ after the last forward pass (DDP broadcasts rank 0's before each one)."""
    if a["step"] != b["step"]:
        return False
    for key in a["model"]:
        if not buffers and ("running_" in key or "num_batches_tracked" in key):
            continue
        if not torch.equal(a["model"][key], b["model"][key]):
            return False
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    if sa.keys() != sb.keys():
        return False
    for index in sa:
        for key, value in sa[index].items():
            other = sb[index][key]
            if isinstance(value, torch.Tensor):
                if not torch.equal(value, other):
                    return False
            elif value != other:
                return False
    return a["optimizer"]["param_groups"] == b["optimizer"]["param_groups"]


def finish(launch, what, timeout):
    codes = launch.wait(timeout)
    if any(codes):
        raise Failure(f"{what}: exit codes {codes}: {launch.tail()}")
    return launch.exits(), launch.finals()


def run(args):
    rng = random.Random(args.seed)
    base = tempfile.mkdtemp(prefix="baton-ddp-test-")
    print(f"seed {args.seed}, {args.ranks} ranks, {args.steps} steps, {args.kills} kills, in {base}", flush=True)

    started = time.monotonic()
    reference_launch = Launch(args, os.path.join(base, "reference"), os.path.join(base, "r-reference"), args.interval)
    reference_launch.wait_restored(args.timeout)
    _, finals_reference = finish(reference_launch, "reference", args.timeout)
    finals = finals_reference
    reference = finals[0]
    if not all(same_state(reference, f, buffers=False) for f in finals):
        raise Failure("the reference ranks ended with different states")
    print(f"reference: {reference['step']} steps in {time.monotonic() - started:.1f} s", flush=True)

    chain = os.path.join(base, "killed")
    previous = -1
    for kill in range(args.kills + 1):
        last = kill == args.kills
        launch = Launch(args, chain, os.path.join(base, f"r-kill-{kill}"), args.interval,
                        slow=0.0 if last else args.slow)
        restored = launch.wait_restored(args.timeout)
        iterations = {r["iteration"] for r in restored}
        if len(iterations) != 1 or len({r["restored"] for r in restored}) != 1:
            launch.kill_all()
            raise Failure(f"launch {kill}: the ranks restored different checkpoints: {restored}")
        iteration = iterations.pop()
        if iteration < previous:
            launch.kill_all()
            raise Failure(f"launch {kill}: restored iteration {iteration} after {previous}")
        previous = iteration
        if last:
            exits, finals = finish(launch, "the last launch", args.timeout)
            if not all(e["finished"] for e in exits):
                raise Failure(f"the last launch did not finish: {exits}")
            for rank, final in enumerate(finals):
                if not same_state(finals_reference[rank], final):
                    raise Failure(f"rank {rank}: the final state after {args.kills} kills differs from the reference")
            print(f"launch {kill}: all ranks restored {iteration}, finished bit-identical to the reference",
                  flush=True)
            break
        time.sleep(rng.uniform(0.05, args.kill_window))
        victim = launch.kill_one_then_all(rng)
        print(f"launch {kill}: all ranks restored {iteration}; killed rank {victim}", flush=True)

    # Handover, the policy picking the interval: SIGUSR1 (checkpoint now) to one rank, then SIGTERM
    # (final checkpoint and exit, as batond and Slurm send it) to one rank only.
    chain = os.path.join(base, "handover")
    # Slow enough that the signals arrive well before the end.
    launch = Launch(args, chain, os.path.join(base, "r-handover-0"), 0, slow=0.03)
    launch.wait_restored(args.timeout)
    time.sleep(rng.uniform(0.3, 0.8))
    launch.processes[rng.randrange(args.ranks)].send_signal(signal.SIGUSR1)
    time.sleep(rng.uniform(0.3, 0.8))
    victim = rng.randrange(args.ranks)
    launch.processes[victim].send_signal(signal.SIGTERM)
    exits, _ = finish(launch, "the signalled launch", args.timeout)
    steps = {e["step"] for e in exits}
    if len(steps) != 1 or not all(e["should_exit"] and not e["finished"] for e in exits):
        raise Failure(f"after SIGTERM to rank {victim} the ranks did not stop together: {exits}")
    stopped = steps.pop()
    launch = Launch(args, chain, os.path.join(base, "r-handover-1"), 0)
    restored = launch.wait_restored(args.timeout)
    if {r["iteration"] for r in restored} != {stopped}:
        launch.kill_all()
        raise Failure(f"the next launch restored {restored}, the final checkpoint was at {stopped}")
    exits, finals = finish(launch, "the resumed launch", args.timeout)
    for rank, final in enumerate(finals):
        if not same_state(finals_reference[rank], final):
            raise Failure(f"rank {rank}: the state after the handover differs from the reference")
    print(f"handover: SIGTERM to rank {victim} stopped every rank at step {stopped}; resumed bit-identical",
          flush=True)
    subprocess.run(["rm", "-rf", base], check=False)
    print(f"ok in {time.monotonic() - started:.1f} s", flush=True)
    return 0


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--example", default=DEFAULT_EXAMPLE)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--interval", type=int, default=3, help="checkpoint every N steps (0: the policy)")
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--kill-window", type=float, default=1.2, help="seconds after restore to kill within")
    parser.add_argument("--slow", type=float, default=0.01, help="extra seconds per step in killed launches")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--rank", type=int)
    parser.add_argument("--port", type=int)
    parser.add_argument("--chain-dir")
    parser.add_argument("--results")
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.seed is None:
        args.seed = int(os.environ.get("BATON_TEST_SEED", random.randrange(1 << 30)))
    try:
        return run(args)
    except Failure as failure:
        print(f"FAILED (seed {args.seed}): {failure}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
