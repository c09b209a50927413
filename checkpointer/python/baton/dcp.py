"""baton checkpoints to and from PyTorch Distributed Checkpoint (DCP, ``torch.distributed.checkpoint``).

    python3 -m baton.dcp export CHAIN_DIR/ckpt-000000001200 OUT_DIR     # (or baton-ckpt export --format dcp)
    ckpt.restore(from_dcp="OUT_DIR")                                   # a new chain starts from a DCP checkpoint

The export writes, with DCP's own writer (``dcp.save``), the state dict that
``torch.distributed.checkpoint.state_dict.get_state_dict`` gives for the model and optimizer, under the
keys ``model`` and ``optimizer`` (the tensors whole, by parameter name; the optimizer's parameter groups
by parameter name), plus ``baton`` (the iteration): torchtitan, a DCP-to-Hugging-Face converter or any
``dcp.load`` reads it on any number of ranks and any sharding. Each tensor is read whole from the pieces
of every rank (verified) into the exporting process, which therefore needs memory for the whole state.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List, Optional

import torch

from . import _native
from ._torch_shard import clean_name
from ._torch_state import _dtype, _loads

TENSORS_FIELD = "torch_tensors"  # manifest: every tensor's global shape and type, by region or blob name
PARAMETERS_FIELD = "torch_parameters"  # manifest: the optimizer's parameters by name, in its order
STATE_BLOB = "baton.torch/state"


def _model_name(name: str) -> str:
    """A parameter's name as get_state_dict gives it: without the wrappers' prefixes (DDP's included)."""
    name = clean_name(name)
    return name[len("module."):] if name.startswith("module.") else name


def _types_by_key(tensors: Dict[str, Any]) -> Dict[str, str]:
    """An optimizer state key's type, whichever parameter it belongs to (with a ZeroRedundancyOptimizer
    the manifest's field, rank 0's, names only rank 0's parameters)."""
    return {name.rsplit("/", 1)[-1]: spec["dtype"] for name, spec in tensors.items() if name.startswith("optimizer/")}


def read_state(checkpoint: str) -> Dict[str, Any]:
    """The checkpoint's state as get_state_dict() shapes it: {"model": {fqn: tensor}, "optimizer":
    {"state": {fqn: {key: value}}, "param_groups": [...]}, "baton": {"iteration": n}}."""
    reader = _native.CheckpointReader(os.fspath(checkpoint))
    manifest = reader.manifest
    tensors: Dict[str, Any] = manifest.get(TENSORS_FIELD) or {}
    if not tensors:
        raise _native.Error(f"{checkpoint} was not written by a baton.torch that records its tensors' types "
                            f"(no {TENSORS_FIELD} in its manifest)")
    parameters: List[str] = manifest.get(PARAMETERS_FIELD) or []
    by_key = _types_by_key(tensors)
    model: Dict[str, torch.Tensor] = {}
    optimizer_state: Dict[str, Dict[str, Any]] = {}

    def optimizer_name(name: str) -> str:
        # Data-parallel checkpoints name optimizer state by the parameter's index in the optimizer.
        return parameters[int(name)] if name.isdigit() and int(name) < len(parameters) else _model_name(name)

    for region in reader.regions():
        name = region["name"]
        kind, rest = name.split("/", 1)
        spec = tensors.get(name) or {}
        dtype_name = spec.get("dtype") or (by_key.get(rest.rsplit("/", 1)[-1]) if kind == "optimizer" else None)
        if dtype_name is None:
            raise _native.Error(f"{checkpoint}: the type of {name} is not recorded")
        shape = region["shape"] if region["shape"] or region["element_size"] else spec.get("shape", [])
        tensor = torch.empty(shape, dtype=_dtype(dtype_name))
        if tensor.numel() * tensor.element_size() != region["bytes"]:
            raise _native.Error(f"{checkpoint}: {name} has {region['bytes']} bytes, its shape {shape} "
                                f"and type {dtype_name} give {tensor.numel() * tensor.element_size()}")
        reader.read_region(name, tensor if tensor.numel() else bytearray())
        if kind == "model":
            model[_model_name(rest)] = tensor
        elif kind == "optimizer":
            fqn, key = rest.rsplit("/", 1)
            optimizer_state.setdefault(optimizer_name(fqn), {})[key] = tensor
    for name, spec in tensors.items():  # buffers: rank 0's blobs
        if name.startswith("model/") and name not in model and _model_name(name[len("model/"):]) not in model:
            data = bytearray(reader.read_blob(name, 0))
            model[_model_name(name[len("model/"):])] = (torch.frombuffer(data, dtype=_dtype(spec["dtype"]))
                                                        .reshape(spec["shape"]) if data else
                                                        torch.empty(spec["shape"], dtype=_dtype(spec["dtype"])))
    state = _loads(reader.read_blob(STATE_BLOB, 0))
    groups = []
    for group in state["optimizer"]["param_groups"]:
        groups.append({**group, "params": [parameters[i] if i < len(parameters) else str(i) for i in group["params"]]})
    for name, values in state["optimizer"]["state"].items():
        optimizer_state.setdefault(optimizer_name(str(name)), {}).update(values)
    return {"model": model, "optimizer": {"state": optimizer_state, "param_groups": groups},
            "baton": {"iteration": int(manifest["iteration"])}}


def export(checkpoint: str, destination: str) -> Dict[str, Any]:
    """Writes the baton checkpoint `checkpoint` (a ckpt-<iteration> directory) as a DCP checkpoint in
    `destination`; returns what it wrote (iteration, tensors, bytes)."""
    import torch.distributed.checkpoint as dcp
    state = read_state(checkpoint)
    os.makedirs(destination, exist_ok=True)
    dcp.save(state, storage_writer=dcp.FileSystemWriter(os.fspath(destination)))  # one process: no process group
    tensors = [t for t in state["model"].values()] + [v for s in state["optimizer"]["state"].values()
                                                      for v in s.values() if isinstance(v, torch.Tensor)]
    return {"iteration": state["baton"]["iteration"], "tensors": len(tensors),
            "bytes": sum(t.numel() * t.element_size() for t in tensors)}


def load_into(directory: str, model: torch.nn.Module, optimizer: Any) -> Optional[int]:
    """Loads a DCP checkpoint (keys "model" and, where present, "optimizer", as get_state_dict names
    them) into the model and optimizer on every rank, resharded by DCP; returns its "baton" iteration
    (None where it has none). Collective under torch.distributed."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    reader = dcp.FileSystemReader(os.fspath(directory))
    keys = {key.split(".", 1)[0] for key in reader.read_metadata().state_dict_metadata}
    if "model" not in keys:
        raise _native.Error(f"{directory} is not a DCP checkpoint of a model (no 'model' key; it has "
                            f"{', '.join(sorted(keys)) or 'none'})")
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state: Dict[str, Any] = {"model": model_state}
    if "optimizer" in keys:
        state["optimizer"] = optimizer_state
    if "baton" in keys:
        state["baton"] = {"iteration": 0}
    dcp.load(state, storage_reader=reader)
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state.get("optimizer", optimizer_state))
    return int(state["baton"]["iteration"]) if "baton" in state else None


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m baton.dcp", description=__doc__.split("\n\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("export", help="write a baton checkpoint as a DCP checkpoint")
    command.add_argument("checkpoint", help="a checkpoint directory (ckpt-<iteration>)")
    command.add_argument("destination", help="the DCP checkpoint directory to write")
    args = parser.parse_args(argv)
    try:
        written = export(args.checkpoint, args.destination)
    except (_native.Error, OSError, ValueError) as error:
        print(f"baton.dcp: {error}", file=sys.stderr)
        return 1
    print(f"{args.destination}: iteration {written['iteration']}, {written['tensors']} tensors, "
          f"{written['bytes']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
