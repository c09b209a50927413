"""baton.torch's view of the world: the resumable sampler and the coordinator of the checkpointer's
collectives over torch.distributed."""

from __future__ import annotations

import datetime
import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
import torch.utils.data

from . import _native
from ._torch_state import RestoreError


# --- the sampler --------------------------------------------------------------------------------------


class ResumableSampler(torch.utils.data.Sampler):
    """A deterministic, sharded sample order that resumes from (epoch, position) without replay.

    Epoch e visits the indices of ``[0, size)`` in the order of a bijection keyed by (seed, e), computed
    by the native sampler. Rank r of R takes the positions r, r + R, ... (``num_replicas`` and ``rank``
    default to torch.distributed's world when it is initialized). The position counts the indices this
    sampler has handed out; a Checkpointer that tracks the DataLoader (``_torch_loader``) saves the
    position of the batches the training has taken instead, so that batches its workers prefetched do
    not count as taken.

    ``load_state_dict`` accepts the state of another world size (a DDP checkpoint restored on another
    number of ranks hands every rank rank 0's state): the saved ranks took the epoch's first
    ``offset + position * ranks`` positions in lockstep; this world shares the rest of that epoch (rank
    r takes the next positions r, r + R, ...), then continues with whole epochs.
    """

    def __init__(self, data_source_or_size, seed: int = 0, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, drop_last: bool = False):
        size = data_source_or_size if isinstance(data_source_or_size, int) else len(data_source_or_size)
        if num_replicas is None or rank is None:
            distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
            if num_replicas is None:
                num_replicas = torch.distributed.get_world_size() if distributed else 1
            if rank is None:
                rank = torch.distributed.get_rank() if distributed else 0
        try:
            self._native = _native.ResumableSampler(size, seed, num_replicas, rank, drop_last)
        except ValueError as error:
            raise ValueError(f"ResumableSampler: {error}") from None
        self._boundary: Optional[Callable[[], None]] = None  # set by a Checkpointer
        self._pass_began: Optional[Callable[["SamplerPass"], None]] = None  # set by a loader tracker

    def __len__(self) -> int:
        return self._native.samples_per_epoch

    def __iter__(self) -> Iterator[int]:
        # Lazy: the remaining count is taken when the first index is asked for, so that an iterator
        # created before a restore still continues from the restored position. The native sampler
        # moves to the next epoch at an epoch's end, so an epoch never starts here at its end.
        native = self._native
        remaining = native.samples_in_epoch - native.position
        if self._pass_began is not None:
            self._pass_began(SamplerPass(dict(native.state), remaining))
        for _ in range(remaining):
            if self._boundary is not None:
                self._boundary()
            yield native.next()

    @property
    def epoch(self) -> int:
        return self._native.epoch

    @property
    def position(self) -> int:
        return self._native.position

    def set_epoch(self, epoch: int) -> None:
        """Starts `epoch` from its beginning (DistributedSampler's method)."""
        self._native.seek(epoch, 0)

    def state_dict(self) -> Dict[str, Any]:
        return dict(self._native.state)

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        try:
            self._native.resume(state)
        except ValueError as error:
            raise RestoreError(f"the checkpoint's sampler state does not fit this one: {error}") from None


class SamplerPass:
    """One pass of a sampler's iterator over the rest of an epoch: where it began, and how many indices
    it hands out."""

    def __init__(self, state: Dict[str, Any], length: int):
        self.state = state
        self.length = length
        self.epoch = state["epoch"]

    def state_after(self, taken: int) -> Dict[str, Any]:
        """The sampler state once `taken` of the pass's indices are taken (the next epoch's start after
        the last)."""
        if taken < self.length:
            return dict(self.state, position=self.state["position"] + taken)
        native = _native.ResumableSampler.from_state(self.state)
        native.seek(self.epoch + 1, 0)
        return dict(native.state)


# --- torch.distributed ----------------------------------------------------------------------------------


def _distributed_world() -> int:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def _coordination_timeout() -> datetime.timedelta:
    text = os.environ.get("BATON_COORD_TIMEOUT", "600")
    try:
        seconds = int(text)
    except ValueError:
        seconds = -1
    if not 1 <= seconds <= 86400:
        raise _native.ConfigError(f"BATON_COORD_TIMEOUT={text!r} is not a whole number of seconds from 1 to 86400")
    return datetime.timedelta(seconds=seconds)


def launcher_grace() -> Optional[Tuple[float, str]]:
    """(seconds, why) that torchrun (torch.distributed.elastic's agent) gives this rank after it forwards
    a SIGTERM, before its SIGKILL; None when no elastic agent started this process. 30 s unless the
    release reads TORCH_ELASTIC_SHUTDOWN_TIMEOUT (LaunchConfig.shutdown_timeout) and it is set."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return None
    try:
        from torch.distributed.launcher.api import LaunchConfig
        settable = "shutdown_timeout" in getattr(LaunchConfig, "__dataclass_fields__", {})
    except ImportError:
        settable = False
    if not settable:
        return 30.0, f"PyTorch {torch.__version__} has no setting for it"
    text = os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "30")
    try:
        return float(text), f"TORCH_ELASTIC_SHUTDOWN_TIMEOUT={text}"
    except ValueError:
        return 30.0, f"TORCH_ELASTIC_SHUTDOWN_TIMEOUT={text!r} is no number"


def _is_job_chain(chain_dir: Optional[str]) -> bool:
    """Whether `chain_dir` is None or the chain directory the job's environment names (BATON_CHAIN_DIR)."""
    if chain_dir is None:
        return True
    job_dir = os.environ.get("BATON_CHAIN_DIR")
    return bool(job_dir) and os.path.realpath(job_dir) == os.path.realpath(os.fspath(chain_dir))


def _torch_coordinator() -> tuple:
    """(checkpoint group, decision group, native coordinator) over torch.distributed.

    Two dedicated gloo groups, created collectively here: the checkpointer's collectives run on the
    first, also from its persist thread, and never interleave with the training's (NCCL or gloo) nor
    with the per-iteration agreement on the second, which the training thread runs."""
    dist = torch.distributed
    timeout = _coordination_timeout()
    group = dist.new_group(backend="gloo", timeout=timeout)
    decisions = dist.new_group(backend="gloo", timeout=timeout)
    rank, size = dist.get_rank(), dist.get_world_size()

    def all_gather(key: str, data: bytes) -> List[bytes]:
        gathered: List[Any] = [None] * size
        dist.all_gather_object(gathered, (key, bytes(data)), group=group)
        for other, (other_key, _) in enumerate(gathered):
            if other_key != key:
                raise RuntimeError(f"rank {other} is at checkpoint step {other_key!r}, rank {rank} at {key!r}")
        return [item for _, item in gathered]

    return group, decisions, _native.CallbackCoordinator(rank, size, all_gather)
