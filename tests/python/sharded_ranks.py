"""One rank of a sharded training (CPU, gloo) checkpointed by baton.torch, for sharded_test.py.

The model is a small MLP whose layer sizes do not divide by 2, 3 or 4, so that every shard is uneven.
How it is sharded (--mode):
- fsdp:       FullyShardedDataParallel (version 1), one unit per Linear, use_orig_params=True, AdamW;
              every rank trains on its own samples (data parallel);
- fsdp_flat:  the same with use_orig_params=False (the optimizer holds FSDP's flat parameters);
- dtensor:    every parameter a DTensor on a 1-D mesh: the first weight Shard(0), the second Shard(1),
              the third Replicate(), biases Shard(0); every rank trains on the same samples (as tensor
              parallel ranks do);
- hsdp:       a 2-D mesh (2 x ranks/2): every parameter [Replicate(), Shard(0)] or [Replicate(), Shard(1)];
- zero:       DistributedDataParallel with a ZeroRedundancyOptimizer (AdamW): each rank holds the
              optimizer state of the parameters it owns;
- ddp:        DistributedDataParallel with AdamW: nothing sharded (restored into and from the others).

The rank reports what it restored (restored-<rank>.json) and, on rank 0, the whole state as global
tensors (state-<label>.pt: the parameters and the optimizer state by parameter name, gathered through
the framework's own full-state API) right after restore() and at the end.
"""

import argparse
import faulthandler
import json
import os
import sys
import time

import torch
import torch.distributed
import torch.nn.functional as F

IN, HIDDEN, MIDDLE, OUT = 13, 23, 17, 5
SAMPLES, BATCH = 96, 8


def build_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, MIDDLE),
                               torch.nn.Tanh(), torch.nn.Linear(MIDDLE, OUT))


class DTensorMLP(torch.nn.Module):
    """The MLP's parameters as DTensors with the mode's placements, under the Sequential's names (0, 2,
    4). Every rank sees the same samples: gradients() computes them on the gathered parameters and hands
    each parameter the shards of its gradient (PyTorch 2.6 cannot differentiate through the gathering
    on a 2-D mesh)."""

    def __init__(self, model: torch.nn.Module, mesh, placements):
        super().__init__()
        from torch.distributed.tensor import distribute_tensor
        self.names = []
        for index, (name, layer) in enumerate((n, m) for n, m in model.named_children()
                                              if isinstance(m, torch.nn.Linear)):
            weight_placement, bias_placement = placements(index)
            wrapped = torch.nn.Module()
            wrapped.weight = torch.nn.Parameter(distribute_tensor(layer.weight.detach(), mesh, weight_placement))
            wrapped.bias = torch.nn.Parameter(distribute_tensor(layer.bias.detach(), mesh, bias_placement))
            self.add_module(name, wrapped)
            self.names.append(name)

    def forward(self, x, whole=None):
        for index, name in enumerate(self.names):
            layer = getattr(self, name)
            weight, bias = whole[name] if whole else (layer.weight.full_tensor(), layer.bias.full_tensor())
            x = F.linear(x, weight, bias)
            if index + 1 < len(self.names):
                x = torch.tanh(x)
        return x

    def gradients(self, x, y):
        from torch.distributed.tensor import distribute_tensor
        whole = {name: tuple(p.full_tensor().detach().requires_grad_()
                             for p in (getattr(self, name).weight, getattr(self, name).bias)) for name in self.names}
        F.mse_loss(self(x, whole), y).backward()
        for name in self.names:
            layer = getattr(self, name)
            for param, gathered in zip((layer.weight, layer.bias), whole[name]):
                param.grad = distribute_tensor(gathered.grad, param.device_mesh, param.placements)


def sharded(mode: str, ranks: int, seed: int):
    """(model, optimizer, data-parallel: whether each rank draws its own samples)."""
    model = build_model(seed)
    if mode in ("fsdp", "fsdp_flat"):
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        model = FullyShardedDataParallel(model, device_id=torch.device("cpu"), use_orig_params=mode == "fsdp",
                                         auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}))
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2), True
    if mode in ("dtensor", "hsdp"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard
        if mode == "dtensor":
            mesh = init_device_mesh("cpu", (ranks,))
            layouts = [([Shard(0)], [Shard(0)]), ([Shard(1)], [Shard(0)]), ([Replicate()], [Shard(0)])]
        else:
            # HSDP: replicated over the first mesh dimension, sharded (dim 0, as FSDP2 does) over the second.
            mesh = init_device_mesh("cpu", (2, ranks // 2), mesh_dim_names=("replicate", "shard"))
            layouts = [([Replicate(), Shard(0)], [Replicate(), Shard(0)]),
                       ([Replicate(), Shard(0)], [Replicate(), Replicate()]),
                       ([Replicate(), Shard(0)], [Replicate(), Shard(0)])]
        model = DTensorMLP(model, mesh, lambda index: layouts[index])
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False), False
    if mode in ("zero", "ddp"):
        from torch.distributed.optim import ZeroRedundancyOptimizer
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model)
        if mode == "ddp":
            return model, torch.optim.AdamW(model.parameters(), lr=1e-2), True
        return model, ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-2), True
    raise SystemExit(f"unknown mode {mode}")


def full_state(mode: str, model, optimizer) -> dict:
    """The parameters and optimizer state as whole tensors by parameter name (on rank 0; {} elsewhere)."""
    if mode in ("zero", "ddp"):
        if mode == "zero":
            optimizer.consolidate_state_dict(to=0)
        if torch.distributed.get_rank() != 0:
            return {}
        names = [name for name, _ in model.module.named_parameters()]
        state = {f"model.{name}": t.detach().clone() for name, t in model.module.state_dict().items()}
        for index, values in optimizer.state_dict()["state"].items():
            for key, value in values.items():
                state[f"optim.{names[index]}.{key}"] = torch.as_tensor(value).clone()
        return state
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    model_state, optim_state = get_state_dict(model, optimizer,
                                              options=StateDictOptions(full_state_dict=True))
    if torch.distributed.get_rank() != 0:
        return {}
    state = {f"model.{name}": t.detach().clone() for name, t in model_state.items()}
    for name, values in optim_state["state"].items():
        for key, value in values.items():
            state[f"optim.{name}.{key}"] = torch.as_tensor(value).clone()
    return state


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--master-addr", default="127.0.0.1", help="rank 0's address (another node's)")
    parser.add_argument("--chain-dir", required=True)
    parser.add_argument("--results", required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--interval", type=int, default=3, help="0: the checkpoint policy decides")
    parser.add_argument("--slow", type=float, default=0, help="seconds each iteration sleeps (a job's deadline)")
    parser.add_argument("--stop-at", type=int, default=0, help="a final checkpoint at this iteration, then exit")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--from-dcp", help="a DCP checkpoint that a chain without a checkpoint starts from")
    args = parser.parse_args()
    # A rank that hangs shows where (the test kills it after its own timeout).
    faulthandler.dump_traceback_later(int(os.environ.get("SHARDED_HANG_SECONDS", "240")), exit=True)

    os.environ.setdefault("USE_LIBUV", "0")  # Debian's PyTorch 2.6 has no libuv
    torch.distributed.init_process_group("gloo", init_method=f"tcp://{args.master_addr}:{args.port}", rank=args.rank,
                                         world_size=args.ranks)
    import baton.torch
    torch.use_deterministic_algorithms(True)
    model, optimizer, data_parallel = sharded(args.mode, args.ranks, args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    inputs = torch.randn(SAMPLES, IN, generator=generator)
    targets = torch.randn(SAMPLES, OUT, generator=generator)
    sampler = (baton.torch.ResumableSampler(SAMPLES, seed=args.seed) if data_parallel
               else baton.torch.ResumableSampler(SAMPLES, seed=args.seed, num_replicas=1, rank=0))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(inputs, targets), batch_size=BATCH,
                                         sampler=sampler)
    ckpt = baton.torch.Checkpointer(model, optimizer, sampler=loader, chain_dir=args.chain_dir,
                                    interval=args.interval or None, keep=3)
    restored = ckpt.restore(from_dcp=args.from_dcp)
    report = {"restored": restored, "iteration": ckpt.iteration, "pid": os.getpid()}
    with open(os.path.join(args.results, f"restored-{args.rank}.json"), "w") as out:
        json.dump(report, out)
    state = full_state(args.mode, model, optimizer)
    if args.rank == 0:
        torch.save(state, os.path.join(args.results, f"state-restored-{ckpt.iteration}.pt"))
    stop = args.stop_at or args.steps
    while ckpt.iteration < stop and not ckpt.should_exit:
        for x, y in loader:
            optimizer.zero_grad()
            if isinstance(model, DTensorMLP):
                model.gradients(x, y)
            else:
                F.mse_loss(model(x), y).backward()
            optimizer.step()
            time.sleep(args.slow)
            if ckpt.iteration >= stop or ckpt.should_exit:
                break
    should_exit = ckpt.should_exit
    if ckpt.iteration >= args.steps:
        ckpt.done()
    ok = ckpt.close()
    with open(os.path.join(args.results, f"exit-{args.rank}.json"), "w") as out:
        json.dump({"iteration": ckpt.iteration, "should_exit": should_exit, "finished": ckpt.iteration >= args.steps},
                  out)
    state = full_state(args.mode, model, optimizer)
    if args.rank == 0:
        torch.save(state, os.path.join(args.results, f"state-end-{ckpt.iteration}.pt"))
    return 0 if ok else 1


if __name__ == "__main__":
    # No destroy_process_group(): with the sub-groups of a 2-D mesh it waits, now and then, for peers
    # that have left (PyTorch 2.6, gloo). Everything of the rank's is written and closed at this point.
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
