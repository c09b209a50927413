"""Exact resume through a DataLoader over a ResumableSampler, with worker processes or without.

A resumed DataLoader differs from the uninterrupted run in three ways unless they are closed, and
each is closed here:

- Prefetch. Workers are handed indices ahead of the batches the training has taken (``prefetch_factor``
  batches per worker), so the sampler's own position counts them as taken. What is saved instead is
  the position of the batches taken by the end of the last iteration: the iterator's count of yielded
  batches times the batch size, from where its pass over the epoch began.
- The seed draw. Creating an iterator draws the workers' base seed from the loader's generator, or
  from torch's global RNG without one. An iterator created again after restore() would draw a second
  time: the global RNG would drift from the uninterrupted run and the workers would get other seeds.
  The first iterator after restore() replays the draw of the iterator whose epoch it continues, and
  leaves the generator and the global RNG as the checkpoint restored them.
- Worker RNG. A worker's RNGs advance with every sample it loads, and a worker started anew begins at
  its seed, so random transforms would differ after a resume in mid-epoch (and, with
  ``persistent_workers``, in every later epoch). In a worker, each batch is therefore loaded with
  torch's, ``random``'s and numpy's RNGs seeded from the base seed and the batch's indices: a batch
  draws the same randomness whichever worker loads it and whatever that worker loaded before.
"""

from __future__ import annotations

import gc
import hashlib
import random
import struct
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.utils.data

from ._torch_state import RestoreError
from ._torch_world import ResumableSampler

try:
    import numpy
except ImportError:  # numpy is optional for torch
    numpy = None


def _sampler_of(loader: torch.utils.data.DataLoader) -> Optional[ResumableSampler]:
    """The loader's ResumableSampler: its sampler, or the sampler inside its batch sampler."""
    for candidate in (getattr(loader, "sampler", None),
                      getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        if isinstance(candidate, ResumableSampler):
            return candidate
    return None


def loaders_of(sampler: ResumableSampler) -> List[torch.utils.data.DataLoader]:
    """The DataLoaders that draw from `sampler`, found among the objects that refer to it (directly, or
    through a batch sampler), so that a loader passed nowhere but built on the sampler is tracked too."""
    found: List[torch.utils.data.DataLoader] = []
    seen = set()
    pending: List[Any] = [sampler]
    for _ in range(3):  # sampler <- [instance dict <-] batch sampler <- [instance dict <-] loader
        holders = []
        for referrer in gc.get_referrers(*pending):
            owners = gc.get_referrers(referrer) if isinstance(referrer, dict) else [referrer]
            for owner in owners:
                if getattr(owner, "__dict__", None) is not referrer and owner is not referrer:
                    continue
                if isinstance(owner, torch.utils.data.DataLoader):
                    if id(owner) not in seen and _sampler_of(owner) is sampler:
                        seen.add(id(owner))
                        found.append(owner)
                elif isinstance(owner, torch.utils.data.Sampler):
                    holders.append(owner)
        if not holders:
            break
        pending = holders
    return found


def _batch_seed(base_seed: int, indices: Any) -> int:
    """A 63-bit seed for the batch of `indices` under the workers' `base_seed`."""
    digest = hashlib.blake2b(struct.pack("<q", base_seed), digest_size=8)
    for index in indices:
        digest.update(struct.pack("<q", int(index)))
    return int.from_bytes(digest.digest(), "little") >> 1


class _BatchSeeding:
    """The worker_init_fn: runs the loader's own, then seeds every batch this worker loads (see the
    module's note). Picklable, for loaders whose workers are spawned."""

    def __init__(self, user_init: Optional[Callable[[int], None]]):
        self.user_init = user_init

    def __call__(self, worker_id: int) -> None:
        if self.user_init is not None:
            self.user_init(worker_id)
        info = torch.utils.data.get_worker_info()
        dataset, base_seed = info.dataset, info.seed - info.id
        loads = getattr(dataset, "__getitems__", None)

        def load_batch(indices):
            seed = _batch_seed(base_seed, indices)
            random.seed(seed)
            torch.manual_seed(seed)
            if numpy is not None:
                numpy.random.seed(seed % 2**32)
            return loads(indices) if loads is not None else [dataset[i] for i in indices]

        # The fetcher of a batching loader calls dataset.__getitems__ when the dataset has one (torch
        # 1.13 and later look the attribute up on the instance).
        try:
            dataset.__getitems__ = load_batch
        except AttributeError:
            raise RuntimeError(f"baton.torch: cannot seed the batches of a {type(dataset).__name__} "
                               "(it takes no attributes): its random transforms would not resume exactly") from None


class LoaderTracker:
    """Follows one DataLoader over the Checkpointer's ResumableSampler (see the module's note)."""

    def __init__(self, loader: torch.utils.data.DataLoader, sampler: ResumableSampler):
        self.loader = loader
        self.sampler = sampler
        batch_sampler = getattr(loader, "batch_sampler", None)
        self._batch = (loader.batch_size or getattr(batch_sampler, "batch_size", None) or 1)
        self._workers = loader.num_workers
        self._persistent = bool(loader.persistent_workers) and loader.num_workers > 0
        self._iterator: Any = None
        self._iterator_pass: Any = None  # the sampler pass the newest iterator began, if any
        self._draw_state: Optional[torch.Tensor] = None  # the RNG state its seed was drawn from
        self._replay: Optional[torch.Tensor] = None  # set by load(): the next iterator draws from it
        self._taken: Optional[Dict[str, Any]] = None  # the sampler state after the last iteration
        self._original_get_iterator = loader._get_iterator
        loader._get_iterator = self._get_iterator
        if self._workers > 0 and batch_sampler is not None:  # batching: the fetcher loads whole batches
            loader.worker_init_fn = _BatchSeeding(loader.worker_init_fn)

    def close(self) -> None:
        self.loader._get_iterator = self._original_get_iterator
        if isinstance(self.loader.worker_init_fn, _BatchSeeding):
            self.loader.worker_init_fn = self.loader.worker_init_fn.user_init

    # -- the seed draw --

    def _rng_state(self) -> torch.Tensor:
        generator = self.loader.generator
        return generator.get_state() if generator is not None else torch.get_rng_state()

    def _set_rng_state(self, state: torch.Tensor) -> None:
        generator = self.loader.generator
        if generator is not None:
            generator.set_state(state)
        else:
            torch.set_rng_state(state)

    def _get_iterator(self):
        self._iterator_pass = None  # a multi-process iterator begins its pass while it is made
        if self._replay is None:
            self._draw_state = self._rng_state()
            iterator = self._original_get_iterator()
        else:
            restored, self._draw_state = self._rng_state(), self._replay
            self._replay = None
            self._set_rng_state(self._draw_state)
            try:
                iterator = self._original_get_iterator()
            finally:
                self._set_rng_state(restored)
        self._iterator = iterator
        return iterator

    # -- the position of the batches taken --

    def pass_began(self, sampler_pass: Any) -> None:
        """The sampler began a pass over an epoch: it belongs to the newest iterator."""
        self._iterator_pass = sampler_pass

    def iteration_done(self) -> None:
        """At the end of an iteration: the sampler state of the batches taken so far."""
        sampler_pass = self._iterator_pass
        if self._iterator is None or sampler_pass is None:
            return
        taken = min(self._iterator._num_yielded * self._batch, sampler_pass.length)
        self._taken = sampler_pass.state_after(taken)

    def sampler_state(self) -> Dict[str, Any]:
        return self._taken if self._taken is not None else self.sampler.state_dict()

    def state(self) -> Dict[str, Any]:
        """What a checkpoint keeps of the loader: its generator, and the seed draw to replay when the
        uninterrupted run would go on with the newest iterator (one whose epoch is under way or not yet
        begun, or a persistent one, which is reset for the next epoch instead of drawing again)."""
        sampler_state = self.sampler_state()
        sampler_pass = self._iterator_pass
        goes_on = self._iterator is not None and (
            self._persistent or sampler_pass is None or sampler_pass.epoch == sampler_state["epoch"])
        generator = self.loader.generator
        return {
            "generator": None if generator is None else bytes(generator.get_state().numpy().tobytes()),
            "seed_draw": bytes(self._draw_state.numpy().tobytes()) if goes_on else None,
        }

    def load(self, state: Dict[str, Any]) -> None:
        """After restore: the loader's generator as saved, and the seed draw its next iterator replays.
        An iterator whose workers already took indices from the position before restore() cannot go on."""
        if self._workers > 0 and self._iterator is not None:
            raise RestoreError(
                "a DataLoader iterator with workers was created before restore(): its workers already took "
                "indices from the position before it. Create the iterator (`for batch in loader`) after restore()")
        generator = self.loader.generator
        if state.get("generator") is not None and generator is not None:
            generator.set_state(torch.frombuffer(bytearray(state["generator"]), dtype=torch.uint8))
        seed_draw = state.get("seed_draw")
        self._replay = None if seed_draw is None else torch.frombuffer(bytearray(seed_draw), dtype=torch.uint8)
        self._taken = None
