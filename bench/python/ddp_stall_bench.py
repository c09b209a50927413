#!/usr/bin/python3
"""Training time lost per checkpoint per rank under DDP: baton.torch versus torch.save on rank 0 plus a
barrier (the common pattern) versus no checkpointing.

`--ranks` processes (gloo on the CPU) train a synthetic MLP (`--mib` MiB of parameters, three times that
with Adam's moments) under DistributedDataParallel for `--iterations` iterations per mode, checkpointing
every `--every` iterations:

  none        no checkpoints: the clean loop time
  baton       baton.torch.Checkpointer(interval=every): the ranks write one checkpoint together, the
              replicated state once, split across the ranks, in the background
  torch.save  rank 0 torch.saves {model, optimizer} to a temporary file, fsyncs and renames it; then
              every rank waits in a barrier

`stall` is the time a rank's training thread spends in checkpoint code per checkpoint, the mean over the
run's checkpoints, the slowest rank's (baton: collecting the state and starting the checkpoint, which
includes waiting for the previous one, plus waiting in optimizer.step() until the snapshot has copied
the weights; torch.save: the save on rank 0 and the barrier, on every rank); the target is baton <= 1/10
of torch.save. `loop` is the whole loop, for reference. Best of `--repeat`.

    PYTHONPATH=build/checkpointer/python /usr/bin/python3 bench/python/ddp_stall_bench.py --mib 64
"""

import argparse
import os
import shutil
import socket
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(mib):
    width = 1024
    layers = max(1, (mib << 20) // (width * width * 4))
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width, bias=False), torch.nn.ReLU()]
    return torch.nn.Sequential(*blocks)


def loop(mode, args, rank, directory):
    import baton.torch
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = DistributedDataParallel(make_model(args.mib))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    inputs = torch.randn(args.batch, 1024)
    ckpt = None
    if mode == "baton":
        ckpt = baton.torch.Checkpointer(model, optimizer, chain_dir=os.path.join(directory, "chain"),
                                        interval=args.every, keep=1)

    def step():
        loss = model(inputs).square().mean()
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()

    step()  # Adam's state exists from here on; the first checkpoint holds all of it
    dist.barrier()
    start = time.perf_counter()
    checkpoints = 0
    stalls = []
    for iteration in range(1, args.iterations + 1):
        step()
        if ckpt is not None and iteration % args.every == 1 and iteration > 1:
            # The checkpoint of iteration - 1 started at this iteration's forward pass; this
            # iteration's step waited for its snapshot.
            stats = ckpt.native.last_checkpoint()
            stalls.append(ckpt.last_start_seconds + stats.stall_seconds)
        if mode == "torch.save" and iteration % args.every == 0:
            begin = time.perf_counter()
            if rank == 0:
                path = os.path.join(directory, "state.pt")
                with open(path + ".tmp", "wb") as f:
                    torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}, f)
                    f.flush()
                    os.fsync(f.fileno())
                os.rename(path + ".tmp", path)
            dist.barrier()
            stalls.append(time.perf_counter() - begin)
        if iteration % args.every == 0:
            checkpoints += 1
    if ckpt is not None:
        ckpt._boundary()  # the last iteration's checkpoint starts at its boundary
        ckpt.wait()
    elapsed = time.perf_counter() - start
    if ckpt is not None:
        counters = ckpt.native.counters()
        if counters.committed < checkpoints:
            raise RuntimeError(f"baton committed {counters.committed} of {checkpoints} checkpoints: "
                               f"{ckpt.native.last_error}")
        ckpt.close(final_checkpoint=False)
    dist.barrier()
    return elapsed, checkpoints, (sum(stalls) / len(stalls) if stalls else 0.0)


def rank_main(rank, args, port, directory, results):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    os.environ.setdefault("USE_LIBUV", "0")  # Debian's PyTorch 2.6 has no libuv for its TCP store
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.ranks)
    for mode in ("none", "baton", "torch.save"):
        best = None
        for repeat in range(args.repeat):
            place = os.path.join(directory, f"{mode}-{repeat}")
            if rank == 0:
                os.makedirs(place, exist_ok=True)
            dist.barrier()
            elapsed, checkpoints, stall = loop(mode, args, rank, place)
            if best is None or stall < best[2]:
                best = (elapsed, checkpoints, stall)
        results[(rank, mode)] = best
    dist.destroy_process_group()


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--mib", type=int, default=64, help="parameter MiB (default 64)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--dir", default=None, help="file system to write to (default: the temporary directory)")
    args = parser.parse_args(argv)
    directory = tempfile.mkdtemp(prefix="baton-ddp-stall-", dir=args.dir)
    try:
        manager = mp.Manager()
        results = manager.dict()
        mp.spawn(rank_main, args=(args, free_port(), directory, results), nprocs=args.ranks)
        state_mib = 3 * args.mib
        print(f"DDP, {args.ranks} ranks (gloo, CPU, {os.cpu_count()} cores), {args.mib} MiB of parameters "
              f"({state_mib} MiB with Adam), checkpoint every {args.every} of {args.iterations} iterations, "
              f"best of {args.repeat}, in {directory}")
        stall = {}
        for mode in ("none", "baton", "torch.save"):
            elapsed = max(results[(r, mode)][0] for r in range(args.ranks))
            stall[mode] = max(results[(r, mode)][2] for r in range(args.ranks))
            print(f"{mode:<11} loop {elapsed:7.3f} s   stall per checkpoint per rank {stall[mode] * 1000:8.1f} ms")
        if stall["torch.save"] > 0:
            print(f"baton / torch.save: {stall['baton'] / stall['torch.save']:.3f} (target <= 0.1)")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
