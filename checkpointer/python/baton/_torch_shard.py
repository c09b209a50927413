"""Sharded training state as the pieces each rank holds, in place.

A model trained with FSDP (``FullyShardedDataParallel``), with DTensor parameters (FSDP2's
``fully_shard``, tensor parallelism, HSDP's 2-D meshes) or with a ``ZeroRedundancyOptimizer`` holds only
a piece of each tensor on each rank. baton registers that piece where it lies, and tells the native
checkpointer which piece of which global tensor it is (``Checkpointer.set_tensor_piece``): no rank
gathers anything, and a checkpoint written on one mesh restores on another.

What a piece is, by framework:
- a DTensor: its local shard, the box that ``compute_local_shape_and_global_offset`` gives for its
  placements; ranks that differ only along mesh dimensions where it is ``Replicate()`` hold the same
  piece and write equal parts of it;
- FSDP (version 1): a run of the row-major elements of each original parameter inside the rank's flat
  shard (``FlatParameter._shard_param_infos``), for the parameter and for its optimizer state, whether
  the optimizer holds the original parameters (``use_orig_params=True``) or the flat ones;
- ``ZeroRedundancyOptimizer``: each parameter's optimizer state lies whole on the rank that owns it.

Names are the parameters' fully qualified names without the wrappers' prefixes
(``_fsdp_wrapped_module.``, ``_checkpoint_wrapped_module.``, ``_orig_mod.``, DDP's ``module.``), as
``torch.distributed.checkpoint`` names them: ``model/<fqn>`` and ``optimizer/<fqn>/<state key>``, for
unsharded models too, so that a checkpoint restores across DDP, FSDP, DTensor and ZeRO.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

import torch

_WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def clean_name(name: str) -> str:
    """The name of a parameter or module as the unwrapped model names it."""
    for prefix in _WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


class Piece(NamedTuple):
    """A region to register: `memory` (contiguous, the rank's own storage) and how it relates to the
    other ranks: ``layout`` is "box" (a piece of the tensor of ``shape``), "replicated" or "rank"."""
    memory: torch.Tensor
    layout: str
    shape: Tuple[int, ...] = ()
    box_offset: Tuple[int, ...] = ()
    box_length: Tuple[int, ...] = ()
    first: int = 0
    writers: int = 1
    writer: int = 0
    strides: Tuple[int, ...] = ()  # a shard that is a view into a padded buffer: its element strides
    written: bool = True  # False: another rank that holds the same piece writes it

    def key(self) -> tuple:
        """What registering again depends on: the memory's place and size, and the piece."""
        memory = self.memory
        return (memory.data_ptr(), memory.element_size() * memory.numel(), str(memory.device), memory.dtype,
                tuple(memory.shape), self.layout, self.shape, self.box_offset, self.box_length, self.first, self.writers,
                self.writer, self.strides, self.written)

    def describe(self) -> Dict[str, Any]:
        """The piece as the manifest's torch_layout records it (global shape and type)."""
        return {"shape": list(self.shape) if self.layout == "box" else list(self.memory.shape),
                "dtype": str(self.memory.dtype).split(".", 1)[1]}


# --- the frameworks, found without importing what the installed PyTorch lacks ----------------------------


# PyTorch 1.13's distributed modules fail to import on Python 3.11 with a ValueError of dataclasses:
# any failure to import means that the framework is not there to be used.


def _dtensor_type() -> Optional[type]:
    for module in ("torch.distributed.tensor", "torch.distributed._tensor"):
        try:
            return __import__(module, fromlist=["DTensor"]).DTensor
        except Exception:  # noqa: BLE001  (see above)
            continue
    return None


def _fsdp_type() -> Optional[type]:
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
        return FullyShardedDataParallel
    except Exception:  # noqa: BLE001
        return None


def _zero_type() -> Optional[type]:
    try:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer
    except Exception:  # noqa: BLE001
        return None


def is_dtensor(tensor: Any) -> bool:
    dtensor = _dtensor_type()
    return dtensor is not None and isinstance(tensor, dtensor)


def uses_sharding(model: torch.nn.Module, optimizer: Any) -> bool:
    """Whether the model or the optimizer holds sharded state that needs tensor pieces."""
    fsdp, zero = _fsdp_type(), _zero_type()
    if fsdp is not None and any(isinstance(m, fsdp) for m in model.modules()):
        return True
    if zero is not None and isinstance(optimizer, zero):
        return True
    return any(is_dtensor(p) for p in model.parameters())


# --- DTensor -------------------------------------------------------------------------------------------


def _local_box(tensor: Any) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """(offset, length) per dimension of the DTensor's local shard in its global tensor."""
    try:
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    except ImportError:
        from torch.distributed._tensor._utils import compute_local_shape_and_global_offset
    local_shape, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh,
                                                                tensor.placements)
    return tuple(int(o) for o in offset), tuple(int(n) for n in local_shape)


def dtensor_piece(name: str, tensor: Any) -> Piece:
    """The piece of a DTensor this rank holds."""
    mesh, placements = tensor.device_mesh, tensor.placements
    writers, writer = 1, 0
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        raise ValueError(f"{name}: this rank is not in the DTensor's device mesh")
    for dim, placement in enumerate(placements):
        kind = type(placement).__name__
        if kind == "Replicate":
            # The ranks along this mesh dimension hold the same piece: each writes its part.
            writer = writer * mesh.size(dim) + coordinate[dim]
            writers *= mesh.size(dim)
        elif kind != "Shard":  # Partial (a pending reduction), _StridedShard (FSDP2 over TP)
            raise ValueError(f"{name}: a DTensor placed {placement} cannot be checkpointed as a piece of "
                             "its tensor (supported: Shard(d), Replicate())")
    local = tensor._local_tensor if hasattr(tensor, "_local_tensor") else tensor.to_local()
    offset, length = _local_box(tensor)
    if tuple(local.shape) != length:
        raise ValueError(f"{name}: the local shard has shape {tuple(local.shape)}, its placements give {length}")
    if local.is_contiguous() or local.numel() == 0:
        return Piece(local.contiguous() if local.numel() == 0 else local, "box", tuple(tensor.shape), offset, length,
                     0, writers, writer)
    # An uneven Shard(d) for d > 0 leaves the shard a view into a buffer padded to equal shards: the region
    # is the memory from its first element to its last, and the piece says where the elements lie in it.
    strides = tuple(local.stride())
    if strides[-1] != 1 or any(s < 0 for s in strides):
        raise ValueError(f"{name}: a local shard of strides {strides} cannot be checkpointed in place "
                         "(its last dimension must be contiguous)")
    span = 1 + sum((n - 1) * s for n, s in zip(local.shape, strides))
    return Piece(local.as_strided((span,), (1,)), "box", tuple(tensor.shape), offset, length, 0, writers, writer,
                 strides)


# --- FSDP (version 1) ------------------------------------------------------------------------------------


class _FlatPart(NamedTuple):
    fqn: str
    shape: Tuple[int, ...]
    offset_in_shard: int  # where the run starts in the rank's flat shard
    numel: int  # elements of the run (0: the parameter is not in this rank's shard)
    first: int  # the run's first element in the parameter's row-major order


def _flat_parts(flat_param: Any, prefix: str) -> List[_FlatPart]:
    parts = []
    for fqn, shape, info in zip(flat_param._fqns, flat_param._shapes, flat_param._shard_param_infos):
        name = clean_name(f"{prefix}{fqn}")
        if info.in_shard:
            parts.append(_FlatPart(name, tuple(shape), info.offset_in_shard, info.numel_in_shard,
                                   info.intra_param_start_idx))
        else:
            parts.append(_FlatPart(name, tuple(shape), 0, 0, 0))
    return parts


def _run_piece(memory: torch.Tensor, part: _FlatPart, writers: Tuple[int, int] = (1, 0)) -> Piece:
    return Piece(memory.narrow(0, part.offset_in_shard, part.numel) if part.numel else memory.new_empty(0),
                 "box", part.shape, (0,) * len(part.shape), part.shape, part.first, *writers)


def _replicas(module: Any) -> Tuple[int, int]:
    """(writers, writer) of an FSDP unit's shard: the ranks that hold the same flat shard, and this
    rank's place among them (NO_SHARD: every rank; HYBRID_SHARD: one per node group)."""
    strategy = getattr(module, "sharding_strategy", None)
    name = getattr(strategy, "name", "")
    if name == "NO_SHARD":
        return torch.distributed.get_world_size(), torch.distributed.get_rank()
    if name in ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"):
        group = module._inter_node_pg
        return group.size(), group.rank()
    return 1, 0


class ShardedState:
    """The model's parameters and its optimizer's state by parameter name, as the pieces this rank holds
    (whole and replicated where nothing shards them: DDP, one process), and its buffers.

    Built once per checkpoint (cheap: it walks the modules and the optimizer's state, copying nothing)."""

    def __init__(self, model: torch.nn.Module, optimizer: Any):
        self.model = model
        self.optimizer = optimizer
        zero = _zero_type()
        self.zero = zero is not None and isinstance(optimizer, zero)

    # -- names --

    def _flat_params(self) -> Dict[int, Tuple[Any, List[_FlatPart], Tuple[int, int]]]:
        """Every FSDP flat parameter by id, with the runs of original parameters in this rank's shard and
        the replicas of that shard."""
        fsdp = _fsdp_type()
        found: Dict[int, Tuple[Any, List[_FlatPart], Tuple[int, int]]] = {}
        if fsdp is None:
            return found
        for module_name, module in self.model.named_modules():
            if not isinstance(module, fsdp) or getattr(module, "_handle", None) is None:
                continue
            handle = module._handle
            flat_param = handle.flat_param
            prefix = f"{module_name}." if module_name else ""
            found[id(flat_param)] = (flat_param, _flat_parts(flat_param, prefix), _replicas(module))
        return found

    def parameter_names(self) -> Dict[int, str]:
        """id(parameter) -> fully qualified name, for the parameters an optimizer may hold."""
        return {id(p): clean_name(name) for name, p in self._named().named_parameters()}

    def _named(self) -> torch.nn.Module:
        """The module whose names are the parameters' names: DDP's wrapped module (its `module.` prefix
        is a wrapper's, as FSDP's are)."""
        return self.model.module if isinstance(self.model, torch.nn.parallel.DistributedDataParallel) else self.model

    # -- the model --

    def model_pieces(self) -> Tuple[Dict[str, Piece], Dict[str, torch.Tensor]]:
        """(parameters as pieces, buffers) by region or blob name."""
        pieces: Dict[str, Piece] = {}
        flat = self._flat_params()
        for flat_param, parts, replicas in flat.values():
            shard = _local_shard(flat_param)
            for part in parts:
                pieces[f"model/{part.fqn}"] = _run_piece(shard, part, replicas)
        flat_ids = {id(p) for p, _, _ in flat.values()}
        for name, param in self._named().named_parameters():
            if id(param) in flat_ids:
                continue
            name = clean_name(name)
            if f"model/{name}" in pieces:  # an original parameter of a flat one (use_orig_params)
                continue
            pieces[f"model/{name}"] = (dtensor_piece(name, param) if is_dtensor(param)
                                       else Piece(param.data, "replicated"))
        buffers = {f"model/{clean_name(name)}": b for name, b in self._named().named_buffers() if b is not None}
        return pieces, buffers

    # -- the optimizer --

    def optimizer_pieces(self) -> Dict[str, Piece]:
        """The optimizer's tensors by region name ``optimizer/<fqn>/<key>``."""
        pieces: Dict[str, Piece] = {}
        flat = self._flat_params()
        names = self.parameter_names()
        original = {}  # fqn -> its run in the flat shard and the shard's replicas (use_orig_params=True)
        for _, parts, replicas in flat.values():
            for part in parts:
                original[part.fqn] = (part, replicas)
        for param, state in self.states():
            entry = flat.get(id(param))
            for key, value in state.items():
                if not isinstance(value, torch.Tensor):
                    continue
                if entry is not None:  # the optimizer holds FSDP's flat parameters
                    for part in entry[1]:
                        pieces[f"optimizer/{part.fqn}/{key}"] = (_run_piece(value, part, entry[2]) if value.dim() > 0
                                                                 else Piece(value, "replicated"))
                    continue
                fqn = names.get(id(param))
                if fqn is None:
                    raise ValueError("the optimizer holds a parameter that is not the model's")
                name = f"optimizer/{fqn}/{key}"
                if value.dim() == 0 and not is_dtensor(value):
                    # A step counter: the same on every rank that steps the parameter. ZeRO: its owner alone;
                    # FSDP: the ranks holding a part of it (the one with its first element writes it).
                    if self.zero:
                        pieces[name] = Piece(value, "box")
                    elif fqn in original:
                        part = original[fqn][0]
                        pieces[name] = Piece(value, "box", written=part.numel > 0 and part.first == 0)
                    else:
                        pieces[name] = Piece(value, "replicated")
                elif is_dtensor(value):
                    pieces[name] = dtensor_piece(name, value)
                elif fqn in original and value.numel() == original[fqn][0].numel:
                    part, replicas = original[fqn]
                    pieces[name] = _run_piece(value.reshape(-1), part._replace(offset_in_shard=0), replicas)
                elif self.zero:
                    # Whole, on the rank that owns the parameter.
                    pieces[name] = Piece(value, "box", tuple(value.shape), (0,) * value.dim(), tuple(value.shape))
                else:
                    pieces[name] = Piece(value, "replicated")
        return pieces

    def states(self) -> Iterator[Tuple[Any, Dict[str, Any]]]:
        """(parameter, state) of every parameter whose state this rank holds."""
        optimizer = self.optimizer.optim if self.zero else self.optimizer
        for group in optimizer.param_groups:
            for param in group["params"]:
                state = optimizer.state.get(param)
                if state:
                    yield param, state

    def prepare_optimizer_state(self, layout: Dict[str, Any], dtype_of: Any) -> None:
        """Creates the optimizer state that the checkpoint's `layout` (optimizer/<fqn>/<key> -> global
        shape and type) names, for the parameters whose state this rank holds, so that restore writes
        into it: a tensor like its parameter (a DTensor like a DTensor, a flat shard like the flat one),
        or a step counter."""
        by_name = self.owned_by_name()
        runs = {part.fqn for _, parts, _ in self._flat_params().values() for part in parts}
        for name, spec in layout.items():
            if not name.startswith("optimizer/") or "/" not in name[len("optimizer/"):]:
                continue
            fqn, key = name[len("optimizer/"):].rsplit("/", 1)
            param = by_name.get(fqn)
            if param is None:
                continue  # another rank's (ZeRO), or a parameter this model lacks: strict restore says so
            state = self.state_of(param)
            if isinstance(state.get(key), torch.Tensor):
                continue
            dtype = dtype_of(spec["dtype"])
            if not spec["shape"]:
                state[key] = torch.zeros((), dtype=dtype)  # a step counter stays on the CPU, as optimizers keep it
            elif is_dtensor(param) or fqn in runs:
                # This rank's shard of it: like the parameter's (a DTensor, FSDP's run or flat shard).
                state[key] = torch.zeros_like(param, dtype=dtype, memory_format=torch.contiguous_format)
            else:
                state[key] = torch.zeros(spec["shape"], dtype=dtype, device=param.device)

    def owned_by_name(self) -> Dict[str, Any]:
        """fqn -> the parameter the optimizer holds it as (a flat one holds several), for the parameters
        whose optimizer state this rank holds."""
        by_name: Dict[str, Any] = {}
        names = self.parameter_names()
        flat = self._flat_params()
        for param in self.owned_parameters():
            entry = flat.get(id(param))
            if entry is not None:
                for part in entry[1]:
                    by_name[part.fqn] = param
            elif id(param) in names:
                by_name[names[id(param)]] = param
        return by_name

    def owned_parameters(self) -> List[Any]:
        """The parameters whose optimizer state this rank holds (all, but with ZeRO)."""
        optimizer = self.optimizer.optim if self.zero else self.optimizer
        return [p for group in optimizer.param_groups for p in group["params"]]

    def state_of(self, param: Any) -> Dict[str, Any]:
        optimizer = self.optimizer.optim if self.zero else self.optimizer
        return optimizer.state[param]


def _local_shard(flat_param: Any) -> torch.Tensor:
    """The rank's flat shard: its own storage, which FSDP keeps while the parameter is gathered for the
    forward and backward passes that a snapshot overlaps."""
    shard = getattr(flat_param, "_local_shard", None)
    return shard if shard is not None else flat_param.data
