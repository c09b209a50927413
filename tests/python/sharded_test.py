#!/usr/bin/python3
"""Sharded training state under baton.torch (CPU, gloo, real processes and process groups): FSDP
(use_orig_params True and False), DTensor parameters on 1-D and 2-D meshes (Shard(0), Shard(1),
Replicate(), uneven shards) and ZeroRedundancyOptimizer (sharded_ranks.py has the modes).

Scenarios (--scenarios, comma-separated):
- kill:MODE:RANKS: a chain killed with SIGKILL (every rank, at a random moment after a few checkpoints)
  twice, relaunched each time: every rank restores the same iteration, never an older one than the
  launch before; the last launch trains to the end and its whole state (parameters and optimizer state,
  gathered by the framework's own full-state API) equals a straight run's bit for bit;
- reshard:MODE:N:MODE:M: N ranks stop with a final checkpoint; M ranks, sharded another way, restore it:
  the restored whole state equals the saved one bit for bit, and the training continues to its end;
- torn:MODE:RANKS: one byte of rank 1's data file in the newest checkpoint flipped: every rank falls back
  to the one before, together.

Needs PyTorch 2.4 or newer (DTensor, FSDP on CPU): exit 77 on older ones (Debian 12's 1.13). Exit 0
passed, 1 failed.
"""

import argparse
import glob
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
except ImportError as missing:
    print(f"skipped: {missing}", file=sys.stderr)
    sys.exit(77)

if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 4):
    print(f"skipped: sharded state needs PyTorch 2.4 or newer (DTensor, FSDP on CPU), this is {torch.__version__}",
          file=sys.stderr)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
RANK_SCRIPT = os.path.join(HERE, "sharded_ranks.py")
DEFAULT_SCENARIOS = ("kill:fsdp:2,kill:hsdp:4,kill:zero:2,reshard:fsdp:4:fsdp:2,reshard:fsdp_flat:2:fsdp_flat:3,"
                     "reshard:dtensor:2:hsdp:4,reshard:fsdp:2:dtensor:3,reshard:zero:2:zero:3,reshard:ddp:2:fsdp:3,"
                     "reshard:fsdp:4:ddp:2,torn:dtensor:2,dcp:fsdp:2:hsdp:4")
STEPS = 60
BATON_CKPT = None  # the baton-ckpt tool that exports (--baton-ckpt); else python3 -m baton.dcp


class Failure(Exception):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Launch:
    """The ranks of one job of a chain."""

    def __init__(self, mode, ranks, chain, results, steps=STEPS, stop_at=0, from_dcp=None):
        os.makedirs(results, exist_ok=True)
        for stale in glob.glob(os.path.join(results, "restored-*.json")):
            os.remove(stale)
        self.results = results
        self.logs = [open(os.path.join(results, f"log-{r}.txt"), "w+") for r in range(ranks)]
        port = free_port()
        self.ranks = [subprocess.Popen(
            [sys.executable, RANK_SCRIPT, "--mode", mode, "--rank", str(r), "--ranks", str(ranks), "--port", str(port),
             "--chain-dir", chain, "--results", results, "--steps", str(steps), "--stop-at", str(stop_at)]
            + (["--from-dcp", from_dcp] if from_dcp else []),
            stdout=self.logs[r], stderr=subprocess.STDOUT) for r in range(ranks)]

    def wait(self, timeout=300):
        deadline = time.monotonic() + timeout
        codes = []
        for rank in self.ranks:
            try:
                codes.append(rank.wait(max(1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                self.kill()
                raise Failure(f"a rank did not finish in {timeout} s: {self.tail()}")
        return codes

    def kill(self):
        for rank in self.ranks:
            if rank.poll() is None:
                rank.send_signal(signal.SIGKILL)
        for rank in self.ranks:
            rank.wait()

    def running(self):
        return all(rank.poll() is None for rank in self.ranks)

    def restored(self):
        """Each rank's restored iteration (None where a rank did not report)."""
        iterations = []
        for r in range(len(self.ranks)):
            try:
                with open(os.path.join(self.results, f"restored-{r}.json")) as f:
                    iterations.append(json.load(f)["iteration"])
            except (OSError, ValueError):
                iterations.append(None)
        return iterations

    def tail(self):
        text = []
        for r, log in enumerate(self.logs):
            log.flush()
            log.seek(0)
            text.append(f"--- rank {r}:\n" + "".join(log.readlines()[-int(os.environ.get("SHARDED_TAIL", "15")):]))
        return "\n".join(text)

    def expect_success(self, what):
        codes = self.wait()
        if any(codes):
            raise Failure(f"{what}: ranks exited {codes}\n{self.tail()}")


def newest_checkpoint(chain):
    names = [n for n in os.listdir(chain) if n.startswith("ckpt-")] if os.path.isdir(chain) else []
    return max((int(n[5:]) for n in names if os.path.exists(os.path.join(chain, n, "manifest.json"))), default=0)


def load_state(results, label):
    matches = glob.glob(os.path.join(results, f"state-{label}.pt"))
    if len(matches) != 1:
        raise Failure(f"no state-{label}.pt in {results}")
    return torch.load(matches[0], weights_only=True)


def same_state(a, b, what):
    if sorted(a) != sorted(b):
        raise Failure(f"{what}: the tensors differ by name: {sorted(set(a) ^ set(b))}")
    for name in a:
        if a[name].shape != b[name].shape or a[name].dtype != b[name].dtype or not torch.equal(a[name], b[name]):
            raise Failure(f"{what}: {name} differs")


def scenario_kill(base, mode, ranks):
    reference = os.path.join(base, "reference")
    straight = Launch(mode, int(ranks), os.path.join(reference, "chain"), os.path.join(reference, "results"))
    straight.expect_success("the straight run")
    expected = load_state(os.path.join(reference, "results"), f"end-{STEPS}")
    chain = os.path.join(base, "chain")
    previous = 0
    for kill in range(2):
        launch = Launch(mode, int(ranks), chain, os.path.join(base, f"results-{kill}"))
        deadline = time.monotonic() + 240
        # Kill once every rank has restored and the training has checkpointed a few times beyond that.
        while launch.running() and None in launch.restored() and time.monotonic() < deadline:
            time.sleep(0.02)
        began = max([i for i in launch.restored() if i is not None], default=previous)
        while launch.running() and newest_checkpoint(chain) < began + 9 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(random.uniform(0, 0.3))
        launch.kill()
        restored = launch.restored()
        if None in restored or len(set(restored)) != 1:
            raise Failure(f"launch {kill}: the ranks restored {restored}\n{launch.tail()}")
        if restored[0] < previous:
            raise Failure(f"launch {kill} restored iteration {restored[0]}, older than {previous}")
        previous = restored[0]
    last = Launch(mode, int(ranks), chain, os.path.join(base, "results-last"))
    last.expect_success("the last launch")
    restored = last.restored()
    if len(set(restored)) != 1 or restored[0] < previous or restored[0] == 0:
        raise Failure(f"the last launch restored {restored} after {previous}")
    same_state(expected, load_state(os.path.join(base, "results-last"), f"end-{STEPS}"),
               "the killed chain's end against the straight run")
    return f"kills restored {previous}, then {restored[0]}; the end equals the straight run"


def scenario_reshard(base, mode, ranks, new_mode, new_ranks):
    chain = os.path.join(base, "chain")
    stop = 20
    first = Launch(mode, int(ranks), chain, os.path.join(base, "first"), stop_at=stop)
    first.expect_success(f"{ranks} ranks ({mode}) until the final checkpoint")
    saved = load_state(os.path.join(base, "first"), f"end-{stop}")
    second = Launch(new_mode, int(new_ranks), chain, os.path.join(base, "second"))
    second.expect_success(f"{new_ranks} ranks ({new_mode}) after {ranks} ({mode})")
    if set(second.restored()) != {stop}:
        raise Failure(f"{new_ranks} ranks restored {second.restored()}, not {stop}")
    same_state(saved, load_state(os.path.join(base, "second"), f"restored-{stop}"),
               f"restored on {new_ranks} ranks ({new_mode}) against the state {ranks} ranks ({mode}) saved")
    load_state(os.path.join(base, "second"), f"end-{STEPS}")
    return f"{ranks} ({mode}) -> {new_ranks} ({new_mode}): the whole state equal, trained on to {STEPS}"


def scenario_torn(base, mode, ranks):
    chain = os.path.join(base, "chain")
    first = Launch(mode, int(ranks), chain, os.path.join(base, "first"), stop_at=6)  # checkpoints 3 and 6
    first.expect_success("the first job")
    data = os.path.join(chain, "ckpt-000000000006", "data-r1.bin")
    with open(data, "r+b") as f:
        f.seek(os.path.getsize(data) // 3)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x20]))
    second = Launch(mode, int(ranks), chain, os.path.join(base, "second"))
    second.expect_success("the job after the torn checkpoint")
    if set(second.restored()) != {3}:
        raise Failure(f"after a torn piece the ranks restored {second.restored()}, not 3 together")
    return "a torn piece of rank 1: every rank restored iteration 3"


def scenario_dcp(base, mode, ranks, new_mode, new_ranks):
    """Export to DCP: DCP's own reader gives the tensors saved; a new chain on another mesh starts from
    the export at its iteration, with the state saved."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    chain = os.path.join(base, "chain")
    stop = 20
    first = Launch(mode, int(ranks), chain, os.path.join(base, "first"), stop_at=stop)
    first.expect_success(f"{ranks} ranks ({mode})")
    saved = load_state(os.path.join(base, "first"), f"end-{stop}")
    exported = os.path.join(base, "dcp")
    checkpoint = os.path.join(chain, f"ckpt-{stop:012d}")
    command = ([BATON_CKPT, "export", "--format", "dcp", checkpoint, exported] if BATON_CKPT
               else [sys.executable, "-m", "baton.dcp", "export", checkpoint, exported])
    export = subprocess.run(command, capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, BATON_PYTHON=sys.executable))
    if export.returncode != 0:
        raise Failure(f"the export failed: {export.stderr[-2000:]}")
    torch_save = os.path.join(base, "dcp.pt")
    dcp_to_torch_save(exported, torch_save)
    loaded = torch.load(torch_save, weights_only=False)
    read = {f"model.{name}": t for name, t in loaded["model"].items()}
    read.update({f"optim.{name}.{key}": torch.as_tensor(value) for name, values in loaded["optimizer"]["state"].items()
                 for key, value in values.items()})
    same_state(saved, read, "DCP's reading of the export against the state saved")
    if loaded["baton"]["iteration"] != stop:
        raise Failure(f"the export says iteration {loaded['baton']['iteration']}, not {stop}")
    second = Launch(new_mode, int(new_ranks), os.path.join(base, "new-chain"), os.path.join(base, "second"),
                    from_dcp=exported)
    second.expect_success(f"{new_ranks} ranks ({new_mode}) from the DCP checkpoint")
    if set(second.restored()) != {stop}:
        raise Failure(f"started from DCP at {second.restored()}, not {stop}")
    same_state(saved, load_state(os.path.join(base, "second"), f"restored-{stop}"),
               f"{new_ranks} ranks ({new_mode}) started from the export against the state saved")
    return (f"{ranks} ({mode}) -> DCP ({export.stdout.strip().split(': ', 1)[-1]}) read back equal -> "
            f"{new_ranks} ({new_mode}) started from it at {stop}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenarios", default=DEFAULT_SCENARIOS)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--baton-ckpt", help="the baton-ckpt tool, for its export --format dcp")
    args = parser.parse_args()
    global BATON_CKPT
    BATON_CKPT = args.baton_ckpt
    random.seed(args.seed)
    print(f"seed {args.seed} (--seed to repeat the kill moments)")
    failed = []
    with tempfile.TemporaryDirectory(prefix="baton-sharded-") as base:
        for number, scenario in enumerate(args.scenarios.split(",")):
            kind, *params = scenario.split(":")
            run = {"kill": scenario_kill, "reshard": scenario_reshard, "torn": scenario_torn, "dcp": scenario_dcp}[kind]
            began = time.monotonic()
            try:
                outcome = run(os.path.join(base, str(number)), *params)
                print(f"ok      {scenario} ({time.monotonic() - began:.0f} s): {outcome}", flush=True)
            except Failure as failure:
                failed.append(scenario)
                print(f"FAILED  {scenario} ({time.monotonic() - began:.0f} s): {failure}", flush=True)
    if failed:
        print(f"{len(failed)} failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
