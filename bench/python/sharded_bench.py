#!/usr/bin/python3
"""Checkpointing a sharded training: baton.torch against torch.distributed.checkpoint (DCP).

`--ranks` processes (gloo on the CPU, one process per rank) train an MLP of `--param-mib` MiB of fp32
parameters (a stack of Linear(1024, 1024) layers with ReLUs, three times that with AdamW's moments)
under FSDP1 (FullyShardedDataParallel, use_orig_params, one FSDP unit per Linear layer). Each arm runs
`--iterations` timed iterations (after `--warmup` untimed ones that create AdamW's state) and
checkpoints the state of every `--interval`-th iteration:

  baton       baton.torch.Checkpointer(model, optimizer, interval=K, chain_dir=...): every rank
              constructs it with the FSDP model and its optimizer as they are (keep=2); the
              checkpoint of iteration k starts at iteration k+1's forward pass; close() at the end
  async_save  dcp.async_save(get_state_dict(model, optimizer)) right after optimizer.step(), at most
              one in flight (the previous future's result() is waited for first, as PyTorch's
              documentation does); its background save runs its collectives on a gloo group of its
              own, so that they cannot interleave with FSDP's on the default group
  dcp_save    dcp.save(get_state_dict(model, optimizer)) right after optimizer.step(), synchronous
  none        no checkpoints: the reference for the stall and the overhead (always run)

async_save's staging: PyTorch 2.6's only option, FileSystemWriter(cache_staged_state_dict=True), keeps
one staging copy in pinned memory, which needs CUDA (pin_memory() raises without it); the default
staging is used, which on the CPU copies nothing: it does not need to, since get_state_dict of an FSDP1
model already returns fresh tensors (it all-gathers every parameter and keeps a copy of this rank's
chunk), so the background save writes the state of the iteration it was asked for.

Every run of an arm is a fresh set of rank processes; the arms alternate, in reversed order every
other run. Figures, median (min-max):

  stall     per checkpoint: the time of the iteration in which the training thread starts the
            checkpoint (baton: iteration k+1, which also waits in optimizer.step() for the snapshot;
            DCP: iteration k, which ends with get_state_dict and the save call), the slowest rank's,
            minus the median iteration time of the `none` arm. The same definition for every arm;
            the checkpoint of the last iteration starts after the loop (baton: in close()) and is
            left out of it.
  overhead  the whole loop (including the wait at its end until the last checkpoint is durable),
            the slowest rank's, over the `none` loop of the same run, minus 1
  durable   from the request (right after the checkpointed iteration's optimizer.step()) until the
            checkpoint is durable on the file system: rank 0 polls from a side thread for baton's
            ckpt-<iteration>/manifest.json and DCP's .metadata, which each writes last and atomically
  restore   into a freshly built FSDP model and optimizer of the same configuration, in fresh
            processes, on `--restore-ranks` ranks (a new process group of that size), the slowest
            rank's: baton: constructing the Checkpointer and restore() from the newest baton
            checkpoint; DCP: get_state_dict (AdamW's state is created by it), dcp.load from the
            newest DCP checkpoint, set_state_dict. Each restored state is checked against the saved
            one (sums over parameters and AdamW moments of all ranks). The page cache holds the files
            (they have just been written) for both.

Targets, printed beside the figures, informational: baton's stall <= 0.2x async_save's, baton's
overhead below async_save's, baton's restore <= dcp.load's. An arm that fails (an exception, a
checkpoint that never commits, a wrong restore) is reported as failed in its row; the exit status is
1 when an arm failed, 0 otherwise. Scratch data lives in a fresh directory (under `--dir`) that is
removed at the end; each run's checkpoints are removed after it, except the newest baton and DCP
checkpoints that the restore timing reads.

    PYTHONPATH=<build>/checkpointer/python python3 bench/python/sharded_bench.py --param-mib 256
"""

import argparse
import collections
import datetime
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

ARMS = ("baton", "async_save", "dcp_save", "none")
DCP_ARMS = ("async_save", "dcp_save")
RESTORE_METHODS = ("baton", "dcp.load")
WIDTH = 1024
# A rank that failed leaves the others in a collective: they are ended after this many seconds.
FAILED_RANK_GRACE_SECONDS = 30
POLL_SECONDS = 0.005


# --- the model ----------------------------------------------------------------------------------------


def layer_count(param_mib):
    per_layer = 4 * WIDTH * (WIDTH + 1)  # fp32 weight and bias
    return max(1, -(-(param_mib << 20) // per_layer))


def build_training(config, seed):
    """The FSDP1 model (one unit per Linear layer) and its AdamW optimizer."""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    torch.manual_seed(seed)  # the same on every rank: FSDP1 shards what each rank initialised
    blocks = []
    for _ in range(config["layers"]):
        blocks += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    model = FullyShardedDataParallel(torch.nn.Sequential(*blocks), device_id=torch.device("cpu"),
                                     use_orig_params=True,
                                     auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return model, optimizer


def fingerprint(model, optimizer):
    """Sums over all ranks' shards that any world size yields alike: |p|, p^2, |exp_avg|, exp_avg_sq."""
    import torch
    import torch.distributed as dist

    sums = torch.zeros(4, dtype=torch.float64)
    with torch.no_grad():
        for param in model.parameters():
            values = param.detach().double()
            sums[0] += values.abs().sum()
            sums[1] += values.square().sum()
            state = optimizer.state.get(param, {})
            if "exp_avg" in state:
                sums[2] += state["exp_avg"].double().abs().sum()
            if "exp_avg_sq" in state:
                sums[3] += state["exp_avg_sq"].double().sum()
    dist.all_reduce(sums)
    return sums.tolist()


def same_state(saved, restored):
    return all(abs(a - b) <= 1e-7 * max(abs(a), abs(b), 1e-30) for a, b in zip(saved, restored))


# --- the rank processes -------------------------------------------------------------------------------


class DurabilityWatcher:
    """Rank 0's side thread: when does each requested checkpoint's commit marker appear? It polls only
    while a checkpoint is pending. `on_durable(iteration)` runs in the thread (removing older DCP
    checkpoints there keeps that work off the training thread, as baton's own pruning is)."""

    def __init__(self, on_durable=None):
        self._pending = collections.OrderedDict()  # iteration -> (marker path, requested at)
        self._lock = threading.Condition()
        self._stop = False
        self._on_durable = on_durable
        self.seconds = {}  # iteration -> request until durable
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def expect(self, iteration, marker, requested_at):
        with self._lock:
            self._pending[iteration] = (marker, requested_at)
            self._lock.notify()

    def _run(self):
        while True:
            with self._lock:
                while not self._pending and not self._stop:
                    self._lock.wait()
                if not self._pending:
                    return
                pending = list(self._pending.items())
            for iteration, (marker, requested_at) in pending:
                if os.path.exists(marker):
                    self.seconds[iteration] = time.perf_counter() - requested_at
                    with self._lock:
                        del self._pending[iteration]
                    if self._on_durable is not None:
                        self._on_durable(iteration)
            time.sleep(POLL_SECONDS)

    def close(self, timeout):
        """Waits up to `timeout` seconds for the pending checkpoints; returns the ones never durable."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._pending:
                    break
            time.sleep(POLL_SECONDS)
        with self._lock:
            missing = list(self._pending)
            self._pending.clear()
            self._stop = True
            self._lock.notify()
        self._thread.join()
        return missing


def baton_marker(chain_dir, iteration):
    return os.path.join(chain_dir, f"ckpt-{iteration:012d}", "manifest.json")


def dcp_dir(directory, iteration):
    return os.path.join(directory, f"dcp-{iteration:012d}")


def dcp_marker(directory, iteration):
    return os.path.join(dcp_dir(directory, iteration), ".metadata")


def newest_dcp_checkpoint(directory):
    names = sorted(n for n in os.listdir(directory) if n.startswith("dcp-")
                   and os.path.exists(os.path.join(directory, n, ".metadata")))
    return os.path.join(directory, names[-1]) if names else None


def remove_older_dcp_checkpoints(directory, newest):
    for name in os.listdir(directory):
        if name.startswith("dcp-") and name < os.path.basename(dcp_dir(directory, newest)):
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def own_durable(ckpt):
    last = ckpt.native.last_checkpoint()
    return last.snapshot_seconds + last.persist_seconds if last.finished and last.committed else None


def train(job, rank):
    """One run of one arm on this rank: the per-iteration times, the loop time, rank 0's durability."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    config, arm, directory = job["config"], job["arm"], job["dir"]
    iterations, interval = config["iterations"], config["interval"]
    model, optimizer = build_training(config, seed=0)
    inputs = torch.randn(config["batch"], WIDTH, generator=torch.Generator().manual_seed(100 + rank))

    def step():
        loss = model(inputs).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    for _ in range(config["warmup"]):
        step()

    result = {}
    watcher = None
    if arm != "none" and rank == 0:
        on_durable = None
        if arm in DCP_ARMS:
            on_durable = functools.partial(remove_older_dcp_checkpoints, directory)
        watcher = DurabilityWatcher(on_durable)
    ckpt = None
    save_group = None
    future = None
    baton_own_stalls = []  # baton's own figures, for comparison: starting plus waiting for the snapshot
    baton_own_durable = []  # and its request until commit (snapshot_seconds + persist_seconds)
    if arm == "baton":
        import baton.torch

        ckpt = baton.torch.Checkpointer(model, optimizer, interval=interval, chain_dir=directory, keep=2)
    elif arm == "async_save":
        save_group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=job["timeout"]))

    durations = []
    dist.barrier()
    loop_began = time.perf_counter()
    for iteration in range(1, iterations + 1):
        began = time.perf_counter()
        step()  # baton: the checkpoint of iteration - 1, if any, starts at this forward pass
        checkpoint = iteration % interval == 0
        if checkpoint and watcher is not None:
            marker = (baton_marker(directory, iteration) if arm == "baton" else dcp_marker(directory, iteration))
            watcher.expect(iteration, marker, time.perf_counter())
        if checkpoint and arm in DCP_ARMS:
            model_state, optimizer_state = get_state_dict(model, optimizer)
            state = {"model": model_state, "optim": optimizer_state}
            path = dcp_dir(directory, iteration)
            if arm == "dcp_save":
                dcp.save(state, checkpoint_id=path)
            else:
                if future is not None:
                    future.result()
                future = dcp.async_save(state, checkpoint_id=path, process_group=save_group)
        durations.append(time.perf_counter() - began)
        if ckpt is not None and iteration % interval == 1 and iteration > 1:
            baton_own_stalls.append(ckpt.last_start_seconds + ckpt.native.last_checkpoint().stall_seconds)
        if ckpt is not None and checkpoint and iteration > interval:
            baton_own_durable.append(own_durable(ckpt))  # the previous checkpoint's, before the next starts
    if ckpt is not None:
        ckpt.close()  # starts the last iteration's checkpoint, waits until it has committed
        baton_own_durable.append(own_durable(ckpt))
    if future is not None:
        future.result()
    loop_seconds = time.perf_counter() - loop_began

    if ckpt is not None:
        counters = ckpt.native.counters()
        expected = iterations // interval
        if counters.committed < expected:
            last = ckpt.native.last_checkpoint()
            reason = last.error or ckpt.native.last_error or "no error reported"
            raise RuntimeError(f"baton committed {counters.committed} of {expected} checkpoints: {reason}")
    if watcher is not None:
        missing = watcher.close(timeout=60)
        if missing:
            raise RuntimeError(f"the checkpoint of iteration {missing[0]} never became durable")
        result["durable_seconds"] = [watcher.seconds[i] for i in sorted(watcher.seconds)]
    result.update(iteration_seconds=durations, loop_seconds=loop_seconds, baton_own_stalls=baton_own_stalls,
                  baton_own_durable=[d for d in baton_own_durable if d is not None],
                  fingerprint=fingerprint(model, optimizer), iteration=iterations)
    if save_group is not None:
        dist.destroy_process_group(save_group)
    return result


def restore(job, rank):
    """One restore by one method into a fresh model and optimizer on this world."""
    import torch
    import torch.distributed as dist

    config, method = job["config"], job["method"]
    model, optimizer = build_training(config, seed=1)  # unlike the saved state: restore must overwrite it
    dist.barrier()
    ckpt = None
    began = time.perf_counter()
    if method == "baton":
        import baton.torch

        ckpt = baton.torch.Checkpointer(model, optimizer, interval=config["interval"], chain_dir=job["source"],
                                        keep=2)
        if not ckpt.restore():
            raise RuntimeError("restore() found no checkpoint")
    else:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model_state, optimizer_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optimizer_state}
        dcp.load(state, checkpoint_id=job["source"])
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    elapsed = torch.tensor([time.perf_counter() - began], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    if ckpt is not None and ckpt.iteration != job["iteration"]:
        raise RuntimeError(f"restored iteration {ckpt.iteration}, the newest checkpoint is of {job['iteration']}")
    if not same_state(job["fingerprint"], fingerprint(model, optimizer)):
        raise RuntimeError("the restored state differs from the saved one")
    if ckpt is not None:
        ckpt.close(final_checkpoint=False)
    return {"restore_seconds": elapsed.item()}


def worker_main(job_path, rank):
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    result_path = f"{job['result_prefix']}{rank}.json"
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(job["config"]["threads"])
        dist.init_process_group("gloo", init_method=f"file://{job['init_file']}", rank=rank,
                                world_size=job["world"], timeout=datetime.timedelta(seconds=job["timeout"]))
        result = train(job, rank) if job["phase"] == "train" else restore(job, rank)
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as error:  # noqa: BLE001 - every failure is the arm's result
        traceback.print_exc()
        message = f"{type(error).__name__}: {error}".splitlines()[0][:300]
        result = {"error": message, "failed_at": time.time()}
    with open(result_path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.rename(result_path + ".tmp", result_path)
    return 1 if "error" in result else 0


# --- the driver ---------------------------------------------------------------------------------------


class Failed(Exception):
    pass


class Launcher:
    """Starts one process per rank for a job and collects their results."""

    def __init__(self, scratch, args):
        self.scratch = scratch
        self.args = args
        self.count = 0
        self.logs = os.path.join(scratch, "logs")
        os.makedirs(self.logs)

    def run(self, job, world):
        self.count += 1
        name = f"{self.count:03d}-{job['phase']}-{job.get('arm') or job.get('method')}-{world}"
        job = dict(job, world=world, timeout=self.args.timeout, init_file=os.path.join(self.scratch, f"{name}.init"),
                   result_prefix=os.path.join(self.scratch, f"{name}.rank"))
        job_path = os.path.join(self.scratch, f"{name}.json")
        with open(job_path, "w", encoding="utf-8") as f:
            json.dump(job, f)
        env = dict(os.environ, OMP_NUM_THREADS=str(job["config"]["threads"]))
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # all ranks are on this host
        processes = []
        logs = []
        for rank in range(world):
            log = os.path.join(self.logs, f"{name}-rank{rank}.log")
            logs.append(log)
            with open(log, "wb") as out:
                processes.append(subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), "--worker", job_path, "--rank", str(rank)],
                    stdout=out, stderr=subprocess.STDOUT, env=env))
        killed = set()
        try:
            timed_out = self._wait(processes)
        finally:
            for rank, process in enumerate(processes):
                if process.poll() is None:
                    process.kill()
                    process.wait()
                    killed.add(rank)
        results = []
        for rank in range(world):
            try:
                with open(f"{job['result_prefix']}{rank}.json", encoding="utf-8") as f:
                    results.append(json.load(f))
            except OSError:
                code = processes[rank].returncode
                if rank in killed:
                    why = "killed after the timeout" if timed_out else "killed after another rank failed"
                    results.append({"error": f"ended without a result ({why})", "failed_at": float("inf")})
                else:  # it crashed (an abort in native code): the cause, before any rank that lost it as a peer
                    how = f"signal {-code}" if code < 0 else f"exit status {code}"
                    results.append({"error": f"crashed ({how}): {self._last_error_line(logs[rank])}",
                                    "failed_at": float("-inf")})
        errors = [(r["failed_at"], rank, r["error"]) for rank, r in enumerate(results) if "error" in r]
        if errors:
            _, rank, message = min(errors)  # the first rank to fail: the others usually lost a peer
            self._show_log(logs[rank])
            raise Failed(f"rank {rank}: {message}" if world > 1 else message)
        return results

    @staticmethod
    def _last_error_line(path):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = [line.strip() for line in f if line.strip()]
        except OSError:
            return "no output"
        # A C++ exception that ends the process says what it was in its what() line.
        errors = ([line for line in lines if line.startswith("what():")]
                  or [line for line in lines if "error" in line.lower() or "terminate" in line.lower()])
        return (errors or lines or ["no output"])[-1][:300]

    def _wait(self, processes):
        deadline = time.monotonic() + self.args.timeout
        first_failure = None
        while any(p.poll() is None for p in processes):
            now = time.monotonic()
            if first_failure is None and any(p.poll() not in (None, 0) for p in processes):
                first_failure = now
            if now > deadline or (first_failure is not None and now - first_failure > FAILED_RANK_GRACE_SECONDS):
                return now > deadline
            time.sleep(0.1)
        return False

    @staticmethod
    def _show_log(path):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return
        # PyTorch's deprecation warnings (two lines each: the warning, the source line) say nothing here.
        warnings = {i + d for i, line in enumerate(lines) if "Warning: " in line for d in (0, 1)}
        lines = [line for i, line in enumerate(lines) if i not in warnings]
        print(f"--- the end of the failed rank's output ({os.path.basename(path)}):", file=sys.stderr)
        for line in lines[-15:]:
            print(f"    {line}", file=sys.stderr)


def spread(values, scale=1.0, digits=1):
    """'median (min-max)'."""
    if not values:
        return "-"
    values = [v * scale for v in values]
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def slowest(results, key):
    """Per iteration (or checkpoint), the slowest rank's figure."""
    return [max(column) for column in zip(*(r[key] for r in results))]


def baton_importable():
    try:
        import baton.torch  # noqa: F401
    except Exception as error:  # noqa: BLE001 - any import failure makes the arm fail
        return f"baton.torch not importable: {type(error).__name__}: {error}".splitlines()[0]
    return None


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--param-mib", type=int, default=256, help="MiB of fp32 parameters (default 256)")
    parser.add_argument("--batch", type=int, default=32, help="samples per rank and iteration")
    parser.add_argument("--iterations", type=int, default=60,
                        help="timed iterations per run, rounded up to a multiple of --interval")
    parser.add_argument("--interval", type=int, default=10, help="checkpoint every this many iterations")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations first (AdamW's state)")
    parser.add_argument("--runs", type=int, default=3, help="runs of every arm, and restores of every method")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"a subset of {','.join(ARMS)}")
    parser.add_argument("--restore-ranks", default=None,
                        help="world sizes to restore on (default: --ranks and half of it)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per rank (default: cores / ranks)")
    parser.add_argument("--dir", default=None, help="where the scratch directory is made (default: the temp dir)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds one run of one arm may take")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or not arms:
        parser.error(f"--arms: unknown {','.join(unknown) or '(none given)'}; choose from {','.join(ARMS)}")
    if "none" not in arms:
        arms.append("none")  # the stall and the overhead are measured against it
    args.arms = list(dict.fromkeys(arms))
    if min(args.ranks, args.interval, args.iterations, args.runs, args.param_mib) < 1 or args.warmup < 1:
        parser.error("--ranks, --interval, --iterations, --runs, --param-mib and --warmup must be at least 1")
    args.iterations = -(-args.iterations // args.interval) * args.interval  # the last checkpoint: the final state
    if args.restore_ranks is None:
        args.restore_ranks = list(dict.fromkeys([args.ranks, max(1, args.ranks // 2)]))
    else:
        args.restore_ranks = [int(n) for n in args.restore_ranks.split(",") if n]
    if args.threads is None:
        args.threads = max(1, (os.cpu_count() or 1) // args.ranks)
    return args


def main(argv):
    args = parse_args(argv)
    if args.worker is not None:
        return worker_main(args.worker, args.rank)
    import torch
    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 4):
        print(f"skipped: FSDP on the CPU and DCP's async_save need PyTorch 2.4 or newer, this is {torch.__version__}")
        return 77
    config = {"layers": layer_count(args.param_mib), "batch": args.batch, "iterations": args.iterations,
              "interval": args.interval, "warmup": args.warmup, "threads": args.threads}
    failures = {}  # arm or restore method -> reason
    if "baton" in args.arms:
        reason = baton_importable()
        if reason:
            failures["baton"] = reason
    scratch = tempfile.mkdtemp(prefix="sharded-bench-", dir=args.dir)
    try:
        launcher = Launcher(scratch, args)
        runs = collections.defaultdict(list)  # arm -> per run: the ranks' results
        kept = {}  # arm -> (directory, results) of its newest run: what the restores read
        for run in range(args.runs):
            order = args.arms if run % 2 == 0 else args.arms[::-1]
            for arm in order:
                if arm in failures:
                    continue
                directory = os.path.join(scratch, f"{arm}-{run}")
                os.makedirs(directory)
                print(f"run {run + 1}/{args.runs}: {arm}", file=sys.stderr, flush=True)
                try:
                    results = launcher.run({"phase": "train", "arm": arm, "config": config, "dir": directory},
                                           args.ranks)
                except Failed as error:
                    failures[arm] = str(error)
                    shutil.rmtree(directory, ignore_errors=True)
                    continue
                runs[arm].append(results)
                if arm in ("baton",) + DCP_ARMS:
                    if arm in kept:
                        shutil.rmtree(kept[arm][0], ignore_errors=True)
                    kept[arm] = (directory, results)
                else:
                    shutil.rmtree(directory, ignore_errors=True)
        dcp_source = next((arm for arm in ("dcp_save", "async_save") if arm in kept), None)
        for arm in DCP_ARMS:
            if arm in kept and arm != dcp_source:
                shutil.rmtree(kept.pop(arm)[0], ignore_errors=True)

        restores = collections.defaultdict(list)  # (method, world) -> seconds
        restore_failures = {}  # (method, world) -> reason
        sources = {}
        if "baton" in kept:
            sources["baton"] = (kept["baton"][0], kept["baton"][1][0])
        if dcp_source is not None:
            sources["dcp.load"] = (newest_dcp_checkpoint(kept[dcp_source][0]), kept[dcp_source][1][0])
        for world in args.restore_ranks:
            for run in range(args.runs):
                order = RESTORE_METHODS if run % 2 == 0 else RESTORE_METHODS[::-1]
                for method in order:
                    if method not in sources or (method, world) in restore_failures:
                        continue
                    source, saved = sources[method]
                    print(f"restore {run + 1}/{args.runs} on {world} ranks: {method}", file=sys.stderr, flush=True)
                    try:
                        results = launcher.run({"phase": "restore", "method": method, "config": config,
                                                "source": source, "iteration": saved["iteration"],
                                                "fingerprint": saved["fingerprint"]}, world)
                    except Failed as error:
                        restore_failures[(method, world)] = str(error)
                        continue
                    restores[(method, world)].append(results[0]["restore_seconds"])
        report(args, config, scratch, runs, failures, restores, restore_failures, dcp_source)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failures or restore_failures else 0


def report(args, config, scratch, runs, failures, restores, restore_failures, dcp_source):
    layers = config["layers"]
    param_mib = layers * 4 * WIDTH * (WIDTH + 1) / 2**20
    print(f"FSDP1 (use_orig_params, one unit per layer), {args.ranks} ranks, gloo on the CPU "
          f"({os.cpu_count()} cores, {args.threads} torch thread(s) per rank); MLP of {layers} x "
          f"Linear({WIDTH}, {WIDTH}): {param_mib:.1f} MiB of fp32 parameters, {3 * param_mib:.1f} MiB with "
          f"AdamW; batch {args.batch} per rank; a checkpoint every {args.interval} of {args.iterations} "
          f"iterations; {args.runs} run(s) per arm, alternating; scratch under {os.path.dirname(scratch)}")
    print(f"stall: over the {args.iterations // args.interval - 1} checkpoint(s) per run before the last; "
          "overhead: over the none loop of the same run; restore: into a fresh model in fresh processes")

    # The reference: the none arm's iterations (slowest rank) over all its runs, and its loop per run.
    none_iterations = [t for results in runs.get("none", []) for t in slowest(results, "iteration_seconds")]
    none_median = statistics.median(none_iterations) if none_iterations else None
    none_loops = [max(r["loop_seconds"] for r in results) for results in runs.get("none", [])]
    figures = {}  # arm -> (stalls, overheads, durables) in seconds and fractions
    for arm in args.arms:
        if arm in failures or arm not in runs:
            continue
        stalls, overheads, durables = [], [], []
        for run, results in enumerate(runs[arm]):
            iterations = slowest(results, "iteration_seconds")
            # The iteration (1-based) that starts the checkpoint of iteration k, for k below the last.
            checkpointed = range(args.interval, args.iterations, args.interval)
            starting = [k + 1 if arm == "baton" else k for k in checkpointed]
            if arm != "none" and none_median is not None:
                stalls += [iterations[i - 1] - none_median for i in starting]
            if run < len(none_loops):
                overheads.append(max(r["loop_seconds"] for r in results) / none_loops[run] - 1)
            durables += results[0].get("durable_seconds", [])
        figures[arm] = (stalls, overheads, durables)

    print()
    header = f"{'arm':<11}  {'stall per checkpoint, ms':<26}  {'loop overhead, %':<24}  {'request to durable, ms':<24}"
    print(header)
    print("-" * len(header))
    for arm in args.arms:
        if arm in failures:
            print(f"{arm:<11}  failed: {failures[arm]}")
            continue
        stalls, overheads, durables = figures.get(arm, ([], [], []))
        if arm == "none":
            print(f"{arm:<11}  {'-':<26}  {'(the reference)':<24}  -")
            continue
        print(f"{arm:<11}  {spread(stalls, 1000):<26}  {spread(overheads, 100):<24}  {spread(durables, 1000, 0):<24}")
    if none_median is not None:
        print(f"none: iteration {none_median * 1000:.1f} ms (median, slowest rank), loop {spread(none_loops, 1, 2)} s")
    if "baton" in runs and "baton" not in failures:
        own_stalls = [s for results in runs["baton"] for s in slowest(results, "baton_own_stalls")]
        own_durable = [d for results in runs["baton"] for d in results[0]["baton_own_durable"]]
        print(f"baton's own figures: starting a checkpoint plus waiting for its snapshot {spread(own_stalls, 1000)} ms "
              f"(slowest rank), snapshot plus persist {spread(own_durable, 1000, 0)} ms (rank 0)")

    print()
    worlds = args.restore_ranks
    header = f"{'restore, ms':<11}" + "".join(f"  {f'{w} ranks':<26}" for w in worlds)
    print(header + (f"  (DCP checkpoint written by {dcp_source})" if dcp_source else ""))
    print("-" * len(header))
    for method in RESTORE_METHODS:
        if method == "baton" and "baton" not in args.arms:
            continue
        if method == "dcp.load" and not any(arm in args.arms for arm in DCP_ARMS):
            continue
        if method == "baton" and "baton" in failures:
            print(f"{method:<11}  failed: no baton checkpoint (the arm failed)")
            continue
        if method == "dcp.load" and dcp_source is None:
            print(f"{method:<11}  - (no DCP checkpoint: the DCP arms failed)")
            continue
        cells = []
        for world in worlds:
            if (method, world) in restore_failures:
                cells.append(f"failed: {restore_failures[(method, world)]}")
            else:
                cells.append(spread(restores.get((method, world), []), 1000))
        print(f"{method:<11}" + "".join(f"  {c:<26}" for c in cells))

    print()
    print("ratios (targets informational)")

    def median_of(arm, index):
        values = figures.get(arm, ([], [], []))[index]
        return statistics.median(values) if values and arm not in failures else None

    def ratio_line(label, numerator, denominator, target=None, met=None):
        if numerator is None or denominator is None or denominator == 0:
            value = "n/a"
            met = None
        else:
            value = f"{numerator / denominator:.3f}"
        verdict = "" if target is None else f"   target {target}: " + {None: "-", True: "met", False: "missed"}[met]
        print(f"  {label:<44} {value:>8}{verdict}")

    baton_stall, async_stall, sync_stall = median_of("baton", 0), median_of("async_save", 0), median_of("dcp_save", 0)
    met = None if baton_stall is None or async_stall is None else baton_stall <= 0.2 * async_stall
    ratio_line("baton stall / async_save stall", baton_stall, async_stall, "<= 0.2", met)
    ratio_line("baton stall / dcp_save stall", baton_stall, sync_stall)
    baton_overhead, async_overhead = median_of("baton", 1), median_of("async_save", 1)
    if baton_overhead is None or async_overhead is None:
        print(f"  {'baton overhead - async_save overhead, points':<44} {'n/a':>8}   target < 0: -")
    else:
        difference = (baton_overhead - async_overhead) * 100
        print(f"  {'baton overhead - async_save overhead, points':<44} {difference:>8.1f}   target < 0: "
              + ("met" if difference < 0 else "missed"))
    ratio_line("baton durable / async_save durable", median_of("baton", 2), median_of("async_save", 2))
    for world in worlds:
        baton_restore = restores.get(("baton", world))
        dcp_restore = restores.get(("dcp.load", world))
        b = statistics.median(baton_restore) if baton_restore else None
        d = statistics.median(dcp_restore) if dcp_restore else None
        ratio_line(f"baton restore / dcp.load, {world} ranks", b, d, "<= 1",
                   None if b is None or d is None else b <= d)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
