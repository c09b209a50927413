"""baton.torch's state blob: plain data only (pickled, loaded without any class lookup), the RNGs of
torch, numpy and ``random``, and the names of tensor types."""

from __future__ import annotations

import functools
import io
import pickle
import random
import sys
import types
from typing import Any, Dict

import torch

try:
    import numpy
except ImportError:  # numpy is optional: its RNG is saved only when it is installed
    numpy = None

from . import _native


def say(message: str) -> None:
    """One line on standard error, as the native checkpointer writes its own."""
    print(f"baton.torch: {message}", file=sys.stderr, flush=True)


class RestoreError(_native.Error):
    """The checkpoint does not fit the model, optimizer, scheduler or sampler it is restored into."""

    __module__ = "baton.torch"  # the public name: baton.torch.RestoreError


# --- plain data in the state blob ---------------------------------------------------------------------


class _PlainUnpickler(pickle.Unpickler):
    # The blob holds plain containers and numbers only, which need no class lookup: refusing every
    # lookup means that loading a checkpoint never runs code from it.
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"checkpoint state refers to {module}.{name}; only plain data is allowed")


def _plain(value: Any, where: str) -> Any:
    """Converts numpy scalars and arrays to Python values; refuses anything that is not plain data."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, dict):
        return {k: _plain(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v, f"{where}[{i}]") for i, v in enumerate(value))
    if numpy is not None and isinstance(value, numpy.generic):
        return value.item()
    if numpy is not None and isinstance(value, numpy.ndarray):
        return value.tolist()
    if isinstance(value, torch.Tensor) and value.dim() == 0 and value.device.type == "cpu":
        return value.item()
    raise TypeError(f"{where}: cannot checkpoint a value of type {type(value).__name__} (plain data only)")


# What a scheduler's constructor builds anew: functions (a LambdaLR's lambdas, a user's curve), bound
# methods (OneCycleLR's anneal_func in PyTorch 1.13) and partials. Objects with a __call__ of their own
# are not among them: they may hold state that leaving them out would lose.
_CODE_TYPES = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.BuiltinMethodType,
               functools.partial)


def _is_code(value: Any) -> bool:
    if isinstance(value, _CODE_TYPES):
        return True
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(isinstance(v, _CODE_TYPES) for v in value)


def _without_code(value: Any) -> Any:
    """`value` with every dict entry that holds a function, a bound method or a list of them left out,
    at any depth (SequentialLR and ChainedScheduler nest their schedulers' state dicts). Scheduler
    load_state_dict() methods update the instance's __dict__, so an entry left out keeps what the
    constructor made; saving the code instead would mean running code from the checkpoint to load it."""
    if isinstance(value, dict):
        return {k: _without_code(v) for k, v in value.items() if not _is_code(v)}
    if isinstance(value, (list, tuple)):
        return type(value)(_without_code(v) for v in value)
    return value


def _scheduler_state(scheduler: Any, where: str) -> Any:
    """The scheduler's state_dict() as plain data, its callables left out (see _without_code)."""
    return _plain(_without_code(scheduler.state_dict()), where)


def _dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=4)


def _loads(data: bytes) -> Any:
    return _PlainUnpickler(io.BytesIO(data)).load()


# --- random number generators -------------------------------------------------------------------------


def _rng_state() -> Dict[str, Any]:
    state: Dict[str, Any] = {
        "torch": bytes(torch.get_rng_state().numpy().tobytes()),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = [bytes(s.numpy().tobytes()) for s in torch.cuda.get_rng_state_all()]
    if numpy is not None:
        name, keys, pos, has_gauss, cached = numpy.random.get_state()
        state["numpy"] = (name, keys.tolist(), int(pos), int(has_gauss), float(cached))
    return state


def _set_rng_state(state: Dict[str, Any]) -> None:
    torch.set_rng_state(torch.tensor(list(state["torch"]), dtype=torch.uint8))
    random.setstate(state["python"])
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available():
        if len(cuda) != torch.cuda.device_count():
            raise RestoreError(f"the checkpoint has RNG states of {len(cuda)} CUDA devices, "
                               f"this process sees {torch.cuda.device_count()}")
        torch.cuda.set_rng_state_all([torch.tensor(list(s), dtype=torch.uint8) for s in cuda])
    if numpy is not None and "numpy" in state:
        name, keys, pos, has_gauss, cached = state["numpy"]
        numpy.random.set_state((name, numpy.array(keys, dtype=numpy.uint32), pos, has_gauss, cached))


# --- tensors as regions -------------------------------------------------------------------------------


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).split(".", 1)[1]


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise RestoreError(f"the checkpoint names an unknown tensor type {name!r}")
    return dtype

