#!/usr/bin/python3
"""Training stall per checkpoint: baton.torch versus torch.save versus no checkpointing.

For the digits example's CNN and for a synthetic MLP (512 MiB of parameters by default, so 1.5 GiB with
Adam's two moments), one training loop per mode in one run, all writing to the same directory:

  none        no checkpoints: the clean iteration time
  baton       baton.torch.Checkpointer every K iterations (snapshot overlapped, persist in background)
  torch.save  torch.save({model, optimizer} state_dicts) every K iterations to a temporary file, fsync,
              rename: the same durability as baton's commit, done synchronously by the training loop

Columns: `stall` is the time the training thread spends in checkpoint code per checkpoint, median and
mean over the run's checkpoints (baton: collecting the state and starting the checkpoint, plus waiting
in optimizer.step() until the snapshot has copied the weights; torch.save: the whole save); `iter` is
the median iteration time of the mode (the background persist competes for CPU and memory bandwidth);
`persist` is the time until the checkpoint is durable; `cost ms` is the loop's extra time per checkpoint
against the loop without checkpoints (on a GPU, where the training stream waits for the snapshot's copy
instead of the host, this is the figure that counts). Ratios are against torch.save of the same model.
Target: baton's stall <= 1/10 of torch.save's. `--device cuda` runs the same on the first GPU (each
iteration ends with a synchronize, as a loss.item() would).
"""

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time

import torch

import baton.torch

HERE = os.path.dirname(os.path.abspath(__file__))


def load_example(path):
    spec = importlib.util.spec_from_file_location("train_digits", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Workload:
    """A model, its Adam optimizer and a function that runs one training iteration."""

    def __init__(self, name, model, batch, device):
        self.name = name
        self.device = device
        self.model = model.to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4)
        self.batch = tuple(t.to(device) for t in batch)
        self.step()  # Adam creates its state at the first step: measure with the whole state present

    def step(self):
        inputs, targets = self.batch
        loss = torch.nn.functional.cross_entropy(self.model(inputs), targets)
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        self.optimizer.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def state_bytes(self):
        total = sum(t.numel() * t.element_size() for t in self.model.state_dict().values())
        for values in self.optimizer.state_dict()["state"].values():
            total += sum(v.numel() * v.element_size() for v in values.values() if isinstance(v, torch.Tensor))
        return total


def digits_workload(example, device):
    torch.manual_seed(0)
    model = example.DigitsNet()
    images = torch.rand(32, 1, 8, 8)
    labels = torch.randint(0, 10, (32,))
    return Workload("digits CNN", model, (images, labels), device)


def synthetic_workload(param_mib, device, width=4096):
    layers = max(1, round(param_mib * 2**20 / 4 / (width * width)))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
    rows = 4 if device.type == "cpu" else 4096  # a GPU step long enough to overlap a snapshot with
    inputs = torch.randn(rows, width)
    targets = torch.randint(0, width, (rows,))
    return Workload(f"synthetic MLP {layers}x{width}x{width}", model, (inputs, targets), device)


def run_none(work, iterations, every, directory):
    times = []
    for _ in range(iterations):
        begin = time.perf_counter()
        work.step()
        times.append(time.perf_counter() - begin)
    return {"times": times, "blocked": [], "persist": [], "checkpoints": 0}


def run_torch_save(work, iterations, every, directory):
    times, blocked = [], []
    path = os.path.join(directory, "torch-save.pt")
    for i in range(1, iterations + 1):
        begin = time.perf_counter()
        work.step()
        if i % every == 0:
            save_begin = time.perf_counter()
            temporary = path + ".tmp"
            with open(temporary, "wb") as f:
                torch.save({"model": work.model.state_dict(), "optimizer": work.optimizer.state_dict()}, f)
                f.flush()
                os.fsync(f.fileno())
            os.rename(temporary, path)
            fd = os.open(directory, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            blocked.append(time.perf_counter() - save_begin)
        times.append(time.perf_counter() - begin)
    os.remove(path)
    return {"times": times, "blocked": blocked, "persist": list(blocked), "checkpoints": len(blocked)}


def run_baton(work, iterations, every, directory):
    chain = os.path.join(directory, "baton-chain")
    ckpt = baton.torch.Checkpointer(work.model, work.optimizer, chain_dir=chain, interval=every, keep=1)
    times, starts, blocked, persist, start_times = [], {}, [], [], []

    def collect():
        stats = ckpt.native.last_checkpoint()
        if stats.finished and stats.committed and stats.iteration in starts:
            # starting it, plus the wait in optimizer.step() until its snapshot had copied the weights
            blocked.append(starts.pop(stats.iteration) + stats.stall_seconds)
            persist.append(stats.persist_seconds)

    for _ in range(iterations):
        begin = time.perf_counter()
        requested = ckpt.native.counters().requested
        iteration = ckpt.iteration
        work.step()  # the checkpoint of the previous iteration starts at this forward pass
        if ckpt.native.counters().requested != requested:
            starts[iteration] = ckpt.last_start_seconds
            start_times.append(ckpt.last_start_seconds)
        times.append(time.perf_counter() - begin)
        collect()
    ckpt.close(final_checkpoint=False)
    collect()
    counters = ckpt.native.counters()
    ckpt.native.close()
    for name in os.listdir(chain):
        _remove_tree(os.path.join(chain, name))
    return {"times": times, "blocked": blocked, "persist": persist, "checkpoints": counters.committed,
            "dropped": counters.dropped_requests, "start_times": start_times}


def _remove_tree(path):
    if os.path.isdir(path):
        for name in os.listdir(path):
            _remove_tree(os.path.join(path, name))
        os.rmdir(path)
    else:
        os.remove(path)


def mean_ms(values):
    return statistics.mean(values) * 1e3 if values else float("nan")


def median_ms(values):
    return statistics.median(values) * 1e3 if values else 0.0


def measure(work, iterations, every, directory):
    rows = []
    clean = None
    for mode, run in (("none", run_none), ("baton", run_baton), ("torch.save", run_torch_save)):
        r = run(work, iterations, every, directory)
        clean = clean if clean is not None else sum(r["times"])
        cost = (sum(r["times"]) - clean) / r["checkpoints"] * 1e3 if r["checkpoints"] else 0.0
        rows.append({"mode": mode, "iter": median_ms(r["times"]), "ckpts": r["checkpoints"], "cost": cost,
                     "stall": median_ms(r["blocked"]), "stall_mean": mean_ms(r["blocked"]) if r["blocked"] else 0.0,
                     "persist": median_ms(r["persist"]), "dropped": r.get("dropped", 0),
                     "start_times": r.get("start_times", []),
                     "slowest": sorted(enumerate(r["times"], 1), key=lambda x: -x[1])[:3]})
    return rows


def print_table(sections):
    header = (f"{'model':<28} {'state MiB':>9} {'mode':<10} {'iter ms':>8} {'ckpts':>5} {'stall ms':>9} "
              f"{'vs save':>8} {'mean ms':>9} {'vs save':>8} {'persist ms':>10} {'cost ms':>9} {'vs save':>8}")
    print(header)
    print("-" * len(header))
    for name, mib, rows in sections:
        save = next(r for r in rows if r["mode"] == "torch.save")
        for r in rows:
            checkpointing = r["mode"] != "none"
            ratio = f"{r['stall'] / save['stall']:.3f}" if checkpointing else "-"
            ratio_mean = f"{r['stall_mean'] / save['stall_mean']:.3f}" if checkpointing else "-"
            ratio_cost = f"{r['cost'] / save['cost']:.3f}" if checkpointing and save["cost"] > 0 else "-"
            print(f"{name:<28} {mib:>9.1f} {r['mode']:<10} {r['iter']:>8.2f} {r['ckpts']:>5} {r['stall']:>9.2f} "
                  f"{ratio:>8} {r['stall_mean']:>9.2f} {ratio_mean:>8} {r['persist']:>10.2f} {r['cost']:>9.2f} "
                  f"{ratio_cost:>8}")
    print()
    for name, _, rows in sections:
        by = {r["mode"]: r for r in rows}
        ratio = by["baton"]["stall"] / by["torch.save"]["stall"]
        print(f"{name}: baton stalls training {ratio:.3f} x as long as torch.save per checkpoint (median; "
              f"target <= 0.1: {'met' if ratio <= 0.1 else 'NOT met'}); "
              f"{by['baton']['dropped']} baton requests dropped while one was in flight")
        for mode in ("none", "baton"):
            slowest = ", ".join(f"{i}: {t * 1e3:.1f} ms" for i, t in by[mode]["slowest"])
            print(f"{name}: slowest iterations of {mode}: {slowest}")
        first = by["baton"]["start_times"][:1]
        rest = by["baton"]["start_times"][1:]
        if first:
            print(f"{name}: starting a baton checkpoint took {first[0] * 1e3:.2f} ms the first time, "
                  f"{median_ms(rest):.2f} ms (median) after that")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="directory that both baton and torch.save write to (default: a new "
                        "temporary directory under $TMPDIR)")
    parser.add_argument("--example", default=os.path.join(HERE, "..", "..", "examples", "train_digits.py"))
    parser.add_argument("--synthetic-mib", type=float, default=512, help="parameters of the synthetic model")
    parser.add_argument("--digits-iterations", type=int, default=300)
    parser.add_argument("--digits-every", type=int, default=20)
    parser.add_argument("--synthetic-iterations", type=int, default=24)
    parser.add_argument("--synthetic-every", type=int, default=6)
    parser.add_argument("--models", default="digits,synthetic", help="comma-separated subset to measure")
    parser.add_argument("--device", default="cpu", help="where the model trains: cpu (default) or cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("SKIP: --device cuda, but PyTorch sees no usable CUDA device")
        return 77

    torch.set_num_threads(1)
    example = load_example(args.example)
    parent = args.dir or tempfile.gettempdir()
    with tempfile.TemporaryDirectory(prefix="baton-torch-bench-", dir=parent) as directory:
        where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
        print(f"writing to {directory}; torch {torch.__version__} on {where}, {torch.get_num_threads()} training "
              "thread", flush=True)
        sections = []
        workloads = {
            "digits": (lambda: digits_workload(example, device), args.digits_iterations, args.digits_every),
            "synthetic": (lambda: synthetic_workload(args.synthetic_mib, device), args.synthetic_iterations,
                          args.synthetic_every),
        }
        for key in args.models.split(","):
            if key not in workloads:
                parser.error(f"unknown model {key!r}: choose from {', '.join(workloads)}")
            make, iterations, every = workloads[key]
            work = make()
            mib = work.state_bytes() / 2**20
            print(f"{work.name}: {mib:.1f} MiB of parameters and Adam state, checkpoint every {every} of "
                  f"{iterations} iterations", flush=True)
            sections.append((work.name, mib, measure(work, iterations, every, directory)))
            del work
        print()
        print_table(sections)
    return 0


if __name__ == "__main__":
    sys.exit(main())
