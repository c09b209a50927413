#!/usr/bin/python3
"""DDP (CPU, gloo) on the digits example with baton.torch: kills, collective restore, agreed handover,
and a chain that continues on another number of ranks.

Every launch starts its ranks (torch.distributed over gloo, DistributedDataParallel, the example's
model, data and ResumableSampler) from a launcher (a zygote) that imported torch, baton and the example
once, before any torch thread pool existed, and forks each rank: a launch then costs the ranks' setup
(gloo, data, model, restore) instead of a Python and torch start-up per rank, which is what lets the
test kill 50 launches. A forked rank is the real process: SIGKILL hits it alone, and the test (the
ranks' subreaper) waits for it and sees how it ended.

The kill test (default)

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

`--reshard N:M[,N:M...]`: a chain of N ranks stops in the middle of an epoch with a final checkpoint;
the next launch has M ranks: every rank must restore that iteration, train to the end, and the samples
of the interrupted epoch that the N ranks drew and the M ranks drew must be that epoch's order exactly
once (the positions the sampler pads with, which wrap to the epoch's first ones, twice; there are fewer
than M). Bit identity with an uninterrupted run cannot hold across world sizes (the gradients of
another number of ranks are averaged in another grouping and round differently) and is not tested.

Exit status: 0 passed, 1 failed, 77 skipped (torch, torch.distributed or scikit-learn missing).
"""

import argparse
import json
import os
import random
import signal
import socket
import statistics
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

from ddp_ranks import Failure, Launcher, load_example, worker, zygote  # noqa: E402  (after the skip)

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_EXAMPLE = os.path.join(HERE, "..", "..", "examples", "train_digits.py")


def compare_with_straight_run(example, steps, base, finals):
    """Runs the same training straight through on two local ranks (no Slurm, no restarts) in `base`;
    None if each rank's final state equals `finals[rank]` bit for bit, else why not."""
    launcher = Launcher(example)
    try:
        reference = Launch(argparse.Namespace(ranks=2, steps=steps, example=example), launcher,
                           os.path.join(base, "ddp-reference"), os.path.join(base, "ddp-reference-results"),
                           interval=1_000_000)
        codes = reference.wait(600)
    finally:
        launcher.close()
    if any(codes):
        return f"the straight two-rank run failed: {reference.tail()}"
    for rank, expected in enumerate(reference.finals()):
        if not same_state(expected, finals[rank]):
            return f"rank {rank}: the chain's final state differs from the straight two-rank run"
    return None


def free_port():
    """A free port below the ephemeral range: one the kernel hands out (bind to port 0) may be taken by an
    outgoing connection of another process before the ranks bind it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    chooser = random.Random()  # not the test's seeded one: the ports need not repeat
    for _ in range(200):
        port = chooser.randrange(10000, max(ephemeral_low, 10001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise Failure("no free port below the ephemeral range")


class Launch:
    """`ranks` worker processes of one chain, with their own results folder."""

    def __init__(self, args, launcher, chain_dir, results, interval, slow=0.0, ranks=None, stop_at=0):
        os.makedirs(results, exist_ok=True)
        self.results = results
        self.ranks = ranks or args.ranks
        self.started = time.monotonic()
        self.setup_seconds = None  # from the first fork request to every rank having restored
        port = free_port()
        self.processes = []
        for rank in range(self.ranks):
            argv = ["--rank", str(rank), "--ranks", str(self.ranks), "--port", str(port), "--chain-dir",
                    chain_dir, "--results", results, "--steps", str(args.steps), "--interval", str(interval),
                    "--seed", "1", "--example", args.example, "--slow", str(slow), "--stop-at", str(stop_at)]
            self.processes.append(launcher.fork(argv, os.path.join(results, f"log-{rank}")))

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
                self.setup_seconds = time.monotonic() - self.started
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

    def read(self, name):
        out = []
        for rank in range(self.ranks):
            with open(os.path.join(self.results, f"{name}-{rank}")) as f:
                out.append(json.load(f))
        return out

    def exits(self):
        return self.read("exit")

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


def kill_test(args, launcher, rng, base):
    started = time.monotonic()
    reference_launch = Launch(args, launcher, os.path.join(base, "reference"), os.path.join(base, "r-reference"),
                              args.interval)
    reference_launch.wait_restored(args.timeout)
    _, finals_reference = finish(reference_launch, "reference", args.timeout)
    finals = finals_reference
    reference = finals[0]
    if not all(same_state(reference, f, buffers=False) for f in finals):
        raise Failure("the reference ranks ended with different states")
    print(f"reference: {reference['step']} steps in {time.monotonic() - started:.1f} s", flush=True)

    chain = os.path.join(base, "killed")
    previous = -1
    setups = []
    kills_started = time.monotonic()
    for kill in range(args.kills + 1):
        last = kill == args.kills
        launch = Launch(args, launcher, chain, os.path.join(base, f"r-kill-{kill}"), args.interval,
                        slow=0.0 if last else args.slow)
        restored = launch.wait_restored(args.timeout)
        setups.append(launch.setup_seconds)
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
        if iteration >= args.steps:
            # The kills must land while the ranks train and checkpoint, not after the training's end.
            launch.kill_all()
            raise Failure(f"launch {kill}: the chain reached step {args.steps} before the last kill; "
                          f"raise --steps or lower --kill-window")
        time.sleep(rng.uniform(0.05, args.kill_window))
        victim = launch.kill_one_then_all(rng)
        print(f"launch {kill}: all ranks restored {iteration}; killed rank {victim}", flush=True)
    print(f"{args.kills} kills and the last launch in {time.monotonic() - kills_started:.1f} s; a launch's setup (fork to every rank "
          f"restored): median {statistics.median(setups):.2f} s, max {max(setups):.2f} s", flush=True)

    # Handover, the policy picking the interval: SIGUSR1 (checkpoint now) to one rank, then SIGTERM
    # (final checkpoint and exit, as batond and Slurm send it) to one rank only.
    chain = os.path.join(base, "handover")
    # Slow enough that the signals arrive well before the end.
    launch = Launch(args, launcher, chain, os.path.join(base, "r-handover-0"), 0, slow=0.03)
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
    launch = Launch(args, launcher, chain, os.path.join(base, "r-handover-1"), 0)
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


def reshard_test(args, launcher, base, before, after):
    """`before` ranks stop mid-epoch at step args.stop_at with a final checkpoint; `after` ranks
    continue the chain to args.steps. The interrupted epoch's samples are checked against its order."""
    from baton import _native

    chain = os.path.join(base, f"reshard-{before}-{after}")
    first = Launch(args, launcher, chain, os.path.join(base, f"r-reshard-{before}-{after}-0"), args.interval,
                   ranks=before, stop_at=args.stop_at)
    first.wait_restored(args.timeout)
    exits, _ = finish(first, f"the {before}-rank launch", args.timeout)
    if {e["step"] for e in exits} != {args.stop_at} or any(e["finished"] or not e["closed_ok"] for e in exits):
        raise Failure(f"the {before} ranks did not stop at step {args.stop_at} with a final checkpoint: {exits}")
    with open(os.path.join(chain, f"ckpt-{args.stop_at:012d}", "manifest.json")) as f:
        manifest = json.load(f)
    if not manifest["final"] or manifest.get("world_size") != before:
        raise Failure(f"the checkpoint of step {args.stop_at} is not the {before} ranks' final one: "
                      f"final {manifest['final']}, world size {manifest.get('world_size')}")
    saved = exits[0]["sampler"]
    epoch, size = saved["epoch"], saved["size"]
    if saved["position"] == 0:
        raise Failure(f"step {args.stop_at} is at an epoch boundary ({saved}): pick a step inside an epoch")

    second = Launch(args, launcher, chain, os.path.join(base, f"r-reshard-{before}-{after}-1"), args.interval,
                    ranks=after)
    restored = second.wait_restored(args.timeout)
    if any(not r["restored"] or r["iteration"] != args.stop_at for r in restored):
        second.kill_all()
        raise Failure(f"the {after} ranks did not all restore iteration {args.stop_at}: {restored}")
    consumed = saved["offset"] + saved["position"] * before
    for rank, r in enumerate(restored):
        if (r["sampler"]["epoch"], r["sampler"]["offset"], r["sampler"]["position"]) != (epoch, consumed, 0):
            second.kill_all()
            raise Failure(f"rank {rank} of {after} resumed its sampler at {r['sampler']}, not at epoch {epoch} "
                          f"after its first {consumed} positions")
    exits, _ = finish(second, f"the {after}-rank launch", args.timeout)
    if not all(e["finished"] for e in exits):
        raise Failure(f"the {after}-rank launch did not finish the training: {exits}")

    seen = {}
    drawn = 0
    for launch in (first, second):
        for rank_drawn in launch.read("drawn"):
            for e, index in rank_drawn:
                if e == epoch:
                    seen[index] = seen.get(index, 0) + 1
                    drawn += 1
    # Padding: the new ranks take ceil((size - consumed) / after) positions each; those past the epoch's
    # end wrap to its first positions, which are seen twice.
    each = -(-(size - consumed) // after)
    twice = consumed + each * after - size
    if drawn != consumed + each * after or not 0 <= twice < after:
        raise Failure(f"epoch {epoch}: {drawn} samples drawn, expected {consumed} + {after} x {each}")
    for position in range(size):
        index = _native.permuted_index(position, size, saved["seed"], epoch)
        expected = 2 if position < twice else 1
        if seen.get(index, 0) != expected:
            raise Failure(f"epoch {epoch}: index {index} (position {position}) seen {seen.get(index, 0)} times, "
                          f"expected {expected}")
    print(f"reshard {before} -> {after}: stopped at step {args.stop_at} (epoch {epoch}, {consumed} of {size} "
          f"samples drawn), every rank restored it; the epoch's samples each seen once ({twice} padded), "
          f"trained to step {args.steps}", flush=True)


def run(args):
    rng = random.Random(args.seed)
    base = tempfile.mkdtemp(prefix="baton-ddp-test-")
    started = time.monotonic()
    launcher = Launcher(args.example)
    try:
        if args.reshard:
            print(f"seed {args.seed}, reshard {args.reshard}, {args.steps} steps, in {base}", flush=True)
            for pair in args.reshard.split(","):
                before, after = (int(n) for n in pair.split(":"))
                reshard_test(args, launcher, base, before, after)
        else:
            print(f"seed {args.seed}, {args.ranks} ranks, {args.steps} steps, {args.kills} kills, in {base}",
                  flush=True)
            kill_test(args, launcher, rng, base)
    finally:
        launcher.close()
    subprocess.run(["rm", "-rf", base], check=False)
    print(f"ok in {time.monotonic() - started:.1f} s", flush=True)
    return 0


def argument_parser():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--example", default=DEFAULT_EXAMPLE)
    parser.add_argument("--ranks", type=int, default=2)
    # A killed launch trains ~5 steps net (a mean 0.4 s at about 0.07 s a step, mostly the sleep, so
    # that the progress hardly depends on the machine's speed): 50 kills take about 250 of 400 steps.
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--interval", type=int, default=3, help="checkpoint every N steps (0: the policy)")
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--kill-window", type=float, default=0.8, help="seconds after restore to kill within")
    parser.add_argument("--slow", type=float, default=0.05, help="extra seconds per step in killed launches")
    parser.add_argument("--reshard", default="", help="N:M[,N:M...]: continue an N-rank chain on M ranks")
    parser.add_argument("--stop-at", type=int, default=0,
                        help="with --reshard: the step the first ranks stop at (inside an epoch)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--zygote", action="store_true", help=argparse.SUPPRESS)
    # One rank in a process of its own, as `srun -n N` starts them (sbatch_test.py's DDP chain).
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--master-addr", default="127.0.0.1", help=argparse.SUPPRESS)  # rank 0's host
    parser.add_argument("--final-sleep", type=float, default=0, help=argparse.SUPPRESS)  # torchrun_test.py
    parser.add_argument("--chain-dir", help=argparse.SUPPRESS)
    parser.add_argument("--results", help=argparse.SUPPRESS)
    return parser


def main(argv):
    args = argument_parser().parse_args(argv)
    if args.zygote:
        return zygote(args, argument_parser())
    if args.worker:
        return worker(args, load_example(args.example))
    if args.seed is None:
        args.seed = int(os.environ.get("BATON_TEST_SEED", random.randrange(1 << 30)))
    if args.reshard and args.stop_at <= 0:
        args.stop_at = 31  # inside an epoch with 2 and 4 ranks, and not on the interval: close() writes it
    try:
        return run(args)
    except Failure as failure:
        print(f"FAILED (seed {args.seed}): {failure}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
