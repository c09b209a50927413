"""PyTorch adapter for baton's checkpointer.

    model, optimizer, scheduler = ...
    sampler = ResumableSampler(len(dataset), seed=0)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler, generator=torch.Generator())
    ckpt = Checkpointer(model, optimizer, scheduler, sampler, interval=50)
    ckpt.restore()                        # continue the chain, if it has a checkpoint
    while ckpt.iteration < steps and not ckpt.should_exit:
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()              # waits for an in-flight snapshot, then updates
            scheduler.step()
    if ckpt.iteration >= steps:
        ckpt.done()                       # the final checkpoint says training_done: the chain ends
    ckpt.close()                          # final checkpoint, waits for it to commit

Every parameter of ``model.state_dict()`` and every tensor of ``optimizer.state_dict()`` is registered
with the native checkpointer *in place*: a snapshot copies straight out of the parameters and a restore
writes straight into them. The model's buffers (batch-norm statistics) change during the forward pass
that the snapshot overlaps, so they are copied at the iteration boundary instead. Everything else that decides what the next iteration computes — the optimizer's
hyperparameters, the scheduler, the sampler's position and the RNGs of torch, numpy and ``random`` —
travels in one small blob.

The iteration boundary. ``optimizer.step()`` is wrapped: before the update it waits until no snapshot
still reads the weights; after it, the iteration counts as done, but the checkpoint of that iteration
starts only when the next iteration begins — at the next index drawn from the ResumableSampler, the
model's next forward pass or the next ``optimizer.step()``, whichever comes first — so that what a
training loop does after the update (``scheduler.step()``, logging, the end of an epoch) belongs to the
saved iteration. Asking ``should_exit`` at the end of an iteration ends it as well. The snapshot then
overlaps the next forward and backward pass.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import time
import types
import weakref
from itertools import chain
from typing import Any, Dict, List, Optional

import torch
import torch.utils.data

from . import _native
# The state blob and the world live in modules of their own; their names stay reachable from here.
from ._torch_state import (RestoreError, _dtype, _dtype_name, _dumps, _loads, _plain, _rng_state,
                           _scheduler_state, _set_rng_state, say)
from ._torch_world import ResumableSampler, _distributed_world, _is_job_chain, _torch_coordinator, launcher_grace
from ._torch_loader import LoaderTracker, _sampler_of, loaders_of
from ._torch_shard import Piece, ShardedState, uses_sharding
from . import dcp

__all__ = ["Checkpointer", "ResumableSampler", "RestoreError"]

_STATE_BLOB = "baton.torch/state"
_LAYOUT_FIELD = "torch_layout"
_NAMING_FIELD = "torch_naming"
_STATE_VERSION = 1


def _agree(group: Any, checkpoint: bool, final: bool) -> tuple:
    """The decision all ranks take: one rank's signal or deadline must not leave the others training."""
    flags = torch.tensor([int(checkpoint), int(final)], dtype=torch.int32)
    torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX, group=group)
    return bool(flags[0]), bool(flags[1])


def _every_ranks_layout(manifest: Dict[str, Any], layout: Dict[str, Any]) -> Dict[str, Any]:
    """The optimizer layout of every rank: the manifest's layout field is rank 0's, which with a
    ZeroRedundancyOptimizer names only rank 0's parameters; the manifest's regions name every rank's,
    with their global shapes, and a state key has one type whichever parameter it belongs to."""
    dtypes = {name.rsplit("/", 1)[-1]: spec.get("dtype") for name, spec in layout.items() if isinstance(spec, dict)}
    every = dict(layout)
    for entry in manifest.get("regions", []):
        name = entry.get("name", "") if isinstance(entry, dict) else ""
        key = name.rsplit("/", 1)[-1]
        if name.startswith("optimizer/") and name not in every and entry.get("layout") == "box" and key in dtypes:
            every[name] = {"shape": entry.get("shape", []), "dtype": dtypes[key]}
    return every


def _leave_unfinished(session: "_native.Session") -> None:
    """An adapter that goes away unclosed leaves no closing checkpoint: its session must not add one."""
    try:
        session.mark_training_done(False)
    except _native.Error:  # closed already, with its checkpointer
        pass


# --- the checkpointer ---------------------------------------------------------------------------------


class Checkpointer:
    """Checkpoints a model, its optimizer, scheduler, sampler and RNGs through baton's native checkpointer.

    scheduler: any LR scheduler (or None); its ``state_dict()`` is saved without the functions and bound
    methods it holds (a LambdaLR's lambdas, OneCycleLR's ``anneal_func``): the scheduler built before
    ``restore()`` already has them from its constructor, and a checkpoint never carries code.
    scaler: a ``torch.cuda.amp.GradScaler`` (or None): its scale and growth count are saved and restored.
    chain_dir: the chain directory; default ``BATON_CHAIN_DIR`` (and ``BATON_KEEP``) from the
    environment, as the SPANK plugin sets it.
    interval: checkpoint every `interval` iterations. ``None`` (the default) hands the decision to the
    native policy: it profiles the first iterations, picks the interval that keeps the overhead under
    ``BATON_OVERHEAD`` percent, adapts it, takes a final checkpoint before ``BATON_DEADLINE`` minus
    ``BATON_DEADLINE_MARGIN`` and, with `signals`, on SIGUSR1 and SIGTERM; ``should_exit`` turns true
    once a final checkpoint has committed. The tuned interval travels along the chain in the manifest.
    signals: install the policy's SIGUSR1/SIGTERM handlers (only with the policy).
    state: a dict of plain data saved with every checkpoint and restored by ``restore()`` (for example
    the length of a log file that a resumed run truncates to).

    Under torch.distributed (initialized, more than one rank: DDP) every rank constructs its Checkpointer
    with the same arguments; the ranks then write one checkpoint together (the model's parameters and
    the optimizer's tensors, identical on every rank, are written once, split across the ranks; each
    rank's RNG, sampler position and buffers travel in its own blobs), restore together, and take the
    policy's decisions together: a checkpoint, and a final one (SIGUSR1, SIGTERM, the deadline) that any
    rank asks for, is taken by all at the same iteration, and ``should_exit`` turns true on every rank.
    The checkpointer's collectives run on dedicated gloo groups (BATON_COORD_TIMEOUT seconds, default
    600). `distributed=False` keeps each rank on its own (one rank alone should then checkpoint).
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any = None,
                 sampler: Any = None, *, scaler: Any = None,
                 chain_dir: Optional[str] = None,
                 interval: Optional[int] = None, keep: Optional[int] = None, strict: bool = True,
                 signals: bool = True, options: Optional["_native.Options"] = None,
                 policy_options: Optional["_native.PolicyOptions"] = None, distributed: bool = True):
        if interval is not None and interval < 1:
            raise ValueError(f"interval must be >= 1, not {interval}")
        if options is None:
            # The job's settings (BATON_KEEP, the handover wait, two-level storage, ...) apply whenever
            # the chain is the job's own, also when its directory is passed explicitly.
            options = (_native.Options.from_environment() if _is_job_chain(chain_dir)
                       else _native.Options())
        if chain_dir is not None:
            options.chain_dir = os.fspath(chain_dir)
        if keep is not None:
            options.keep = keep
        loader = None
        if isinstance(sampler, torch.utils.data.DataLoader):
            loader, sampler = sampler, _sampler_of(sampler)
            if sampler is None:
                raise ValueError("the DataLoader given as sampler draws from no ResumableSampler")
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.sampler = sampler
        self._loader: Optional[LoaderTracker] = None
        if sampler is not None:
            self._track_loader(loader)
        self.scaler = scaler
        self.interval = interval
        self.strict = strict
        self.iteration = 0
        self.state: Dict[str, Any] = {}
        self.restored_from: Optional[str] = None
        # Seconds restore() waited for the predecessor job's final checkpoint (BATON_HANDOVER_WAIT).
        self.handover_wait_seconds = 0.0
        self.previous_tuning: Optional[Dict[str, Any]] = None  # the restored checkpoint's policy tuning
        # Seconds the training thread spent starting the last checkpoint (collecting the state and
        # handing it over); the wait for its snapshot is native.last_checkpoint().stall_seconds.
        self.last_start_seconds = 0.0
        # Data-parallel ranks hold the same parameters and optimizer state: registered replicated.
        self._group = None
        self._decisions = None
        self._replicated = False
        if distributed and _distributed_world() > 1:
            self._group, self._decisions, options.coordinator = _torch_coordinator()
            self._replicated = True
        self._native = _native.Checkpointer(options)
        # The tensors by parameter name (model/<fqn>, optimizer/<fqn>/<key>), each rank's pieces of sharded
        # ones (FSDP, DTensor, ZeroRedundancyOptimizer) in place. A chain begun before this naming (its
        # checkpoints lack torch_naming) keeps naming optimizer state by index, as state_dict() does.
        self._tensors = None
        if uses_sharding(model, optimizer) or not self._chain_names_by_index():
            self._tensors = ShardedState(model, optimizer)
            self._native.set_manifest_field(_NAMING_FIELD, "parameter")
        # torchrun's grace after a SIGTERM, told once if a final checkpoint needs more (_check_launcher).
        self._launcher = launcher_grace() if not self._group or torch.distributed.get_rank() == 0 else None
        self._update_seconds = -1.0
        self._stage_began: Optional[float] = None
        # The native session decides when to checkpoint; this adapter stages the state it asks for.
        self._session = self._start_session(signals, policy_options)
        self._pending = False
        self._regions_after_first_step = False
        self._closed = False
        self._training_done = False
        self._regions: Dict[str, tuple] = {}
        self._buffer_names: set = set()
        self._device_regions: List[str] = []
        self._layout: Dict[str, Any] = {}
        self._tensor_specs: Dict[str, Any] = {}  # every region's global shape and type (_describe_tensors)
        self._described: Dict[str, Any] = {}
        self._parameter_order: Optional[List[str]] = None
        self._original_step = optimizer.step
        self._wrap_optimizer_step()
        self._forward_hook = model.register_forward_pre_hook(lambda module, inputs: self._boundary())
        if sampler is not None:
            sampler._boundary = self._boundary

    # -- the public API --

    @property
    def native(self) -> "_native.Checkpointer":
        return self._native

    @property
    def chain_dir(self) -> str:
        return self._native.options.chain_dir

    @property
    def policy(self) -> Optional["_native.Policy"]:
        return self._session.policy if self.interval is None else None

    @property
    def should_exit(self) -> bool:
        """True once the final checkpoint before the deadline (or after SIGTERM) has committed: the
        training loop should end; the next job of the chain continues from that checkpoint.

        Asking ends the current iteration (its checkpoint may start now): ask after everything the
        iteration does, as a loop condition does."""
        self._boundary()
        self._session.collect()
        return self._session.should_exit

    def restore(self, from_dcp: Optional[str] = None) -> bool:
        """Restores the newest verified checkpoint of the chain; False when there is none (fresh start).

        Call it once, after building model, optimizer, scheduler and sampler and before training.
        `from_dcp`: a PyTorch Distributed Checkpoint directory (torchtitan's, `python3 -m baton.dcp
        export`'s) that a chain without a checkpoint of its own starts from: its "model" and "optimizer"
        (as get_state_dict names them) are loaded, resharded by DCP, and its "baton" iteration, where
        it has one, continues; returns True then. A chain that has a checkpoint continues from that.
        """
        if self.sampler is not None and self._loader is None:
            self._track_loader(None)  # a DataLoader built after the Checkpointer
        restored = self._restore_chain()
        if restored or from_dcp is None:
            return restored
        iteration = dcp.load_into(from_dcp, self.model, self.optimizer)
        self.iteration = iteration or 0
        self.restored_from = os.fspath(from_dcp)
        say(f"started from the DCP checkpoint {from_dcp} at iteration {self.iteration}")
        return True

    def _restore_chain(self) -> bool:
        layout = self._newest_layout()
        for _ in range(3):
            self._prepare_optimizer_state(layout)
            self._sync_regions()
            result = self._session.restore()  # also hands the restored tuning to the policy
            # Only the first native restore waits for a handover; later ones report 0.
            self.handover_wait_seconds = max(self.handover_wait_seconds, result.handover_wait_seconds)
            if not result.restored:
                return False
            restored_layout = result.manifest.get(_LAYOUT_FIELD, {})
            if restored_layout == layout:
                break
            # Restore fell back to an older checkpoint, or another job committed a newer one: its
            # optimizer state has another shape. Register that one and restore again.
            layout = restored_layout
        else:
            raise RestoreError("the chain's newest checkpoint keeps changing while it is restored")
        self._check_regions(result)
        if _STATE_BLOB not in result.blobs:
            raise RestoreError(f"{result.dir} has no {_STATE_BLOB} blob: it was not written by baton.torch")
        self._restore_buffers(result)
        self._apply_state(_loads(result.blobs[_STATE_BLOB]), result.iteration)
        self.restored_from = result.dir
        self.previous_tuning = result.manifest.get("tuning") or None
        return True

    def request_checkpoint(self, exit_after: bool = False) -> None:
        """Checkpoint at the next iteration boundary without waiting here (for a handover to a
        successor job); `exit_after` makes it a final checkpoint, after which should_exit is true.
        Needs the policy (interval=None)."""
        if self.interval is not None:
            raise ValueError("request_checkpoint needs the policy (interval=None); use checkpoint_now()")
        self._session.request_checkpoint(exit_after)

    def checkpoint_now(self) -> bool:
        """Checkpoints the current iteration and waits for it to commit; returns whether it did."""
        return self._checkpoint_now(final=False)

    def done(self) -> None:
        """Declares the training complete: the final checkpoint that close() writes (or a final one the
        policy takes before that) carries ``training_done``, which tells the provisioner to end the
        chain instead of submitting another job. close() writes it even when the newest checkpoint
        already holds the current iteration."""
        self._training_done = True
        self._session.mark_training_done()

    @property
    def training_done(self) -> bool:
        return self._training_done

    def _checkpoint_now(self, final: bool) -> bool:
        self._boundary()
        self._native.wait()  # an in-flight checkpoint must end before the state blob is replaced
        self._session.collect()
        self._prepare_checkpoint(self.iteration)
        return self._native.checkpoint_now(self.iteration, final=final,
                                           training_done=final and self._training_done)

    def wait(self) -> bool:
        """Waits for an in-flight checkpoint; returns whether the last checkpoint committed."""
        return self._native.wait()

    def close(self, final_checkpoint: bool = True) -> bool:
        """Ends checkpointing: takes a final checkpoint of the current iteration unless the newest
        committed one already holds it, waits for persist, removes the hooks. After done() the final
        checkpoint carries ``training_done`` (written even when the iteration is already saved).
        Returns whether the last checkpoint committed."""
        if self._closed:
            return True
        self._boundary()
        ok = self._native.wait()
        self._session.collect()
        last = self._native.last_checkpoint()
        if self._training_done:
            if final_checkpoint:
                ok = self._session.finish()  # unless the newest checkpoint already says training_done
        else:
            # After a final checkpoint, later iterations are left to the next job: a synchronous
            # checkpoint now could miss the deadline that the final one was planned for.
            saved = (last.committed and last.iteration == self.iteration) or self.should_exit
            if final_checkpoint and self.iteration > 0 and not saved:
                ok = self._checkpoint_now(final=True)
        self._unhook()
        self._session.policy.disable_signals()
        # The closing checkpoint is settled above: the session must not add one when it goes away.
        self._session.mark_training_done(False)
        self._closed = True
        return ok

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self.close(final_checkpoint=kind is None)

    # -- hooks --

    def _wrap_optimizer_step(self) -> None:
        original = self._original_step

        @functools.wraps(original)
        def step(optimizer, *args, **kwargs):
            if sys._getframe(1).f_code.co_name == "_init_optim_state":
                # torch.distributed.checkpoint's get_state_dict() creates an optimizer's state by a step
                # of zero gradients at a learning rate of 0: that is no iteration of the training.
                return original(*args, **kwargs)
            self._boundary()
            self._native.before_update()
            begin = time.perf_counter()
            result = original(*args, **kwargs)
            self._update_seconds = time.perf_counter() - begin
            if self._loader is not None:
                self._loader.iteration_done()
            self.iteration += 1
            self._pending = True
            return result

        # A bound method, so that LR schedulers can wrap it again (they look at __self__ and __func__).
        self.optimizer.step = types.MethodType(step, self.optimizer)

    def _unhook(self) -> None:
        self.optimizer.step = self._original_step
        self._forward_hook.remove()
        if self.sampler is not None:
            self.sampler._boundary = None
        if self._loader is not None:
            self._loader.close()
            self.sampler._pass_began = None

    def _boundary(self) -> None:
        if not self._pending:
            return
        self._pending = False
        if not self._regions_after_first_step:
            # The optimizer's state exists once it has stepped: registered now, it is in the staging pool
            # that after_update() has allocated in the background before the first checkpoint needs it.
            self._regions_after_first_step = True
            self._sync_regions()
        self._stage_began = None
        decision = self._session.step(self.iteration, self._update_seconds)
        if self._stage_began is not None and not decision.final:
            # Staging and handing over; a final checkpoint is waited for, so only its staging counts.
            self.last_start_seconds = time.perf_counter() - self._stage_began

    def _stage(self, iteration: int) -> None:
        """The session's hook right before a checkpoint starts: the state outside the regions."""
        self._stage_began = time.perf_counter()
        self._check_launcher()
        self._prepare_checkpoint(iteration)
        self.last_start_seconds = time.perf_counter() - self._stage_began

    def _check_launcher(self) -> None:
        """Tells once when torchrun would kill this rank before a final checkpoint taken on SIGTERM could
        commit: the one of an iteration, a staging, a snapshot and a persist as measured so far."""
        if self._launcher is None or self.policy is None:
            return
        tuning = self.policy.tuning
        needs = (tuning.get("iteration_seconds", 0) + self.last_start_seconds + tuning.get("snapshot_seconds", 0)
                 + tuning.get("persist_seconds", 0))
        grace, why = self._launcher
        if needs <= grace:
            return
        self._launcher = None
        say(f"torchrun kills the ranks {grace:g} s after it forwards a SIGTERM ({why}), and a final checkpoint "
            f"here takes about {needs:.0f} s: one taken on a SIGTERM would be cut. baton's handovers and "
            "preemptions ask in the chain directory first and send TERM later (batond's "
            "handover_signal_delay_seconds), and the final checkpoint before the time limit is planned from "
            "BATON_DEADLINE; a `scancel` or a `--signal` to the steps still goes through torchrun. Where "
            "PyTorch reads it, set TORCH_ELASTIC_SHUTDOWN_TIMEOUT above this figure")

    def _start_session(self, signals: bool, policy_options: Optional["_native.PolicyOptions"]) -> "_native.Session":
        settings = _native.SessionOptions()
        if self.interval is None:
            try:
                settings.policy = _native.PolicyOptions.from_environment(policy_options or _native.PolicyOptions())
            except ValueError as error:  # a malformed BATON_OVERHEAD, BATON_DEADLINE, ...
                raise _native.ConfigError(str(error)) from None
            settings.handle_signals = signals
        else:
            settings.fixed_interval = self.interval
        # With several ranks every rank must take part in the same checkpoints, whichever has finished the
        # previous one; the policy's signal or deadline checkpoint must not be dropped either.
        settings.wait_for_in_flight = self.interval is None or self._decisions is not None
        try:
            session = _native.Session(self._native, settings)
        except ValueError as error:
            raise _native.ConfigError(str(error)) from None
        this = weakref.ref(self)  # the session must not keep this adapter alive
        session.before_checkpoint(lambda iteration: this()._stage(iteration))
        # close() writes the closing checkpoint; an adapter dropped unclosed leaves none, as before.
        weakref.finalize(self, _leave_unfinished, session)
        if self.interval is None and self._decisions is not None:
            session.agree_decision(functools.partial(_agree, self._decisions))
        return session

    # -- the DataLoader --

    def _track_loader(self, loader: Optional[torch.utils.data.DataLoader]) -> None:
        """Follows the DataLoader over the sampler, given or found (_torch_loader explains why)."""
        if loader is None:
            found = loaders_of(self.sampler)
            if len(found) > 1:
                say(f"{len(found)} DataLoaders draw from one ResumableSampler; none is followed, so batches "
                    "their workers prefetch count as taken. Give each its own sampler, or pass the one to "
                    "follow as the Checkpointer's sampler")
            loader = found[0] if len(found) == 1 else None
        if loader is not None:
            self._loader = LoaderTracker(loader, self.sampler)
            self.sampler._pass_began = self._loader.pass_began

    def _sampler_state(self) -> Dict[str, Any]:
        return self._loader.sampler_state() if self._loader is not None else self.sampler.state_dict()

    # -- what goes into a checkpoint --

    def _prepare_checkpoint(self, iteration: int) -> None:
        parameters, buffers = self._model_state()
        self._sync_regions(parameters)
        self._save_buffers(buffers)
        self._describe_tensors(buffers)
        self._native.set_blob(_STATE_BLOB, _dumps(self._capture_state(iteration)))
        if self.policy is not None:
            self._native.set_manifest_field("tuning", self.policy.tuning)
        if self.sampler is not None:
            sampler_state = self._sampler_state()
            self._native.set_epoch(sampler_state["epoch"])
            self._native.set_manifest_field("sampler", sampler_state)

    def _optimizer_plain_state(self) -> Dict[str, Any]:
        """The optimizer's hyperparameters and its per-parameter values that are not tensors, keyed by
        parameter name (or, in a chain begun by index, by index as state_dict() numbers them; a
        ZeroRedundancyOptimizer has no state_dict() without gathering it to one rank)."""
        if self._tensors is None:
            optimizer = self.optimizer.state_dict()
            groups, states = optimizer["param_groups"], optimizer["state"].items()
        else:
            groups, index = [], 0
            for group in self.optimizer.param_groups:
                groups.append({**{k: v for k, v in group.items() if k != "params"},
                               "params": list(range(index, index + len(group["params"])))})
                index += len(group["params"])
            names = self._tensors.parameter_names()
            states = [(names.get(id(p), str(i)), state) for i, (p, state) in enumerate(self._tensors.states())]
        plain_state = {}
        for index, values in states:
            plain = {k: _plain(v, f"optimizer.state[{index}].{k}") for k, v in values.items()
                     if not isinstance(v, torch.Tensor)}
            if plain:
                plain_state[index] = plain
        return {"param_groups": _plain(groups, "optimizer.param_groups"), "state": plain_state}

    def _describe_tensors(self, buffers: Dict[str, torch.Tensor]) -> None:
        """Every tensor's global shape and type, and the optimizer's parameters by name in its order, in
        the manifest: what an export to another format (baton.dcp) needs beyond the bytes."""
        tensors = dict(self._tensor_specs)
        tensors.update({name: {"shape": list(b.shape), "dtype": _dtype_name(b.dtype)} for name, b in buffers.items()})
        if tensors != self._described:
            self._native.set_manifest_field(dcp.TENSORS_FIELD, tensors)
            self._described = tensors
        if self._parameter_order is None:
            names = (self._tensors.parameter_names() if self._tensors is not None
                     else {id(p): dcp._model_name(n) for n, p in self.model.named_parameters()})
            self._parameter_order = [names.get(id(p), "") for group in self.optimizer.param_groups
                                     for p in group["params"]]
            self._native.set_manifest_field(dcp.PARAMETERS_FIELD, self._parameter_order)

    def _capture_state(self, iteration: int) -> Dict[str, Any]:
        return {
            "version": _STATE_VERSION,
            "iteration": iteration,
            "rng": _rng_state(),
            "optimizer": self._optimizer_plain_state(),
            "scheduler": None if self.scheduler is None else _scheduler_state(self.scheduler, "scheduler"),
            "scaler": None if self.scaler is None else _plain(self.scaler.state_dict(), "scaler"),
            "sampler": None if self.sampler is None else self._sampler_state(),
            "loader": None if self._loader is None else self._loader.state(),
            "user": _plain(self.state, "state"),
        }

    def _model_state(self) -> tuple:
        """(parameters as pieces, buffers) of the model, by region or blob name. Without sharding, from its
        state_dict (keep_vars: the parameters themselves, not detached views made anew at every call);
        with it, from the pieces each rank holds (an FSDP model's state_dict() would gather them)."""
        if self._tensors is not None:
            return self._tensors.model_pieces()
        parameters, buffers = {}, {}
        layout = "replicated" if self._replicated else "rank"
        for name, tensor in self.model.state_dict(keep_vars=True).items():
            if isinstance(tensor, torch.nn.Parameter):
                parameters[f"model/{name}"] = Piece(tensor, layout)
            else:
                buffers[f"model/{name}"] = tensor
        return parameters, buffers

    def _save_buffers(self, buffers: Dict[str, torch.Tensor]) -> None:
        """Buffers (batch-norm statistics, counters) change during the forward pass, which overlaps
        the snapshot: they are copied now, at the boundary, as blobs. They are small."""
        for name in self._buffer_names - buffers.keys():
            self._native.remove_blob(name)
        for name, tensor in buffers.items():
            data = tensor.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy().tobytes()
            self._native.set_blob(name, data)
        self._buffer_names = set(buffers)

    def _restore_buffers(self, result: Any) -> None:
        _, buffers = self._model_state()
        saved = {name for name in result.blobs if name.startswith("model/")}
        if self.strict and saved - buffers.keys():
            raise RestoreError(f"{result.dir} holds buffers this model does not have: "
                               f"{', '.join(sorted(saved - buffers.keys()))}")
        if self.strict and buffers.keys() - saved:
            raise RestoreError(f"{result.dir} lacks buffers of this model: {', '.join(sorted(buffers.keys() - saved))}")
        with torch.no_grad():
            for name, tensor in buffers.items():
                if name not in saved:
                    continue
                data = torch.frombuffer(bytearray(result.blobs[name]), dtype=torch.uint8)
                if data.numel() != tensor.numel() * tensor.element_size():
                    raise RestoreError(f"{name}: {data.numel()} bytes in {result.dir}, "
                                       f"{tensor.numel() * tensor.element_size()} in the model")
                tensor.copy_(data.view(tensor.dtype).reshape(tensor.shape))

    def _optimizer_tensors(self) -> Dict[str, Piece]:
        """The tensors of optimizer.state_dict()["state"], named by parameter index as state_dict()
        numbers them, read from optimizer.state without packing a whole state_dict; with sharded state,
        the pieces this rank holds, named by parameter."""
        if self._tensors is not None:
            return self._tensors.optimizer_pieces()
        tensors = {}
        layout = "replicated" if self._replicated else "rank"
        params = chain.from_iterable(group["params"] for group in self.optimizer.param_groups)
        for index, param in enumerate(params):
            for key, value in self.optimizer.state.get(param, {}).items():
                if isinstance(value, torch.Tensor):
                    tensors[f"optimizer/{index}/{key}"] = Piece(value, layout)
        return tensors

    def _register(self, name: str, piece: Piece) -> None:
        if not piece.memory.is_contiguous():
            raise ValueError(f"{name} is not contiguous: baton checkpoints tensors in place")
        self._native.register_region(name, piece.memory)
        if not self._replicated:  # one process: every tensor is whole and its own
            return
        if piece.layout == "box":
            self._native.set_tensor_piece(name, list(piece.shape), piece.memory.element_size(),
                                          list(piece.box_offset), list(piece.box_length), piece.first,
                                          piece.writers, piece.writer, list(piece.strides), piece.written)
        else:
            self._native.set_region_layout(name, piece.layout)

    def _sync_regions(self, parameters: Optional[Dict[str, Piece]] = None) -> None:
        """Registers new or moved tensors and unregisters vanished ones (optimizer state appears after
        the first step; a user may replace a parameter)."""
        tensors = dict(self._model_state()[0] if parameters is None else parameters)
        tensors.update(self._optimizer_tensors())
        changed = False
        for name in [n for n in self._regions if n not in tensors]:
            self._native.unregister_region(name)
            del self._regions[name]
            changed = True
        for name, piece in tensors.items():
            key = piece.key()
            if self._regions.get(name) == key:
                continue
            self._register(name, piece)
            self._regions[name] = key
            changed = True
        if not changed:
            return
        self._device_regions = sorted({key[2] for key in self._regions.values() if key[2] != "cpu"})
        if self.policy is not None:
            self.policy.set_checkpoint_bytes(sum(key[1] for key in self._regions.values()))
            if self._device_regions:
                device = torch.device(self._device_regions[0])
                self.policy.set_device_memory(torch.cuda.max_memory_allocated(device),
                                               torch.cuda.get_device_properties(device).total_memory)
        self._tensor_specs = {name: piece.describe() for name, piece in tensors.items()}
        layout = {name: spec for name, spec in self._tensor_specs.items() if name.startswith("optimizer/")}
        if layout != self._layout:
            self._native.set_manifest_field(_LAYOUT_FIELD, layout)
            self._layout = layout

    # -- restore --

    def _newest_manifest(self) -> Optional[Dict[str, Any]]:
        """The manifest of the chain's newest committed checkpoint, read as a hint (the checkpoint that
        restore picks is checked again); None when there is none."""
        try:
            names = sorted((n for n in os.listdir(self.chain_dir) if n.startswith("ckpt-")), reverse=True)
        except OSError:
            return None
        for name in names:
            try:
                with open(os.path.join(self.chain_dir, name, "manifest.json"), encoding="utf-8") as f:
                    manifest = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(manifest, dict):
                return manifest
        return None

    def _chain_names_by_index(self) -> bool:
        manifest = self._newest_manifest()
        return manifest is not None and manifest.get(_NAMING_FIELD) is None

    def _newest_layout(self) -> Dict[str, Any]:
        """The optimizer layout of the newest committed checkpoint."""
        manifest = self._newest_manifest() or {}
        layout = manifest.get(_LAYOUT_FIELD, {})
        if self._tensors is not None and isinstance(layout, dict):
            layout = _every_ranks_layout(manifest, layout)
        return layout if isinstance(layout, dict) else {}

    def _prepare_optimizer_state(self, layout: Dict[str, Any]) -> None:
        """Creates optimizer state tensors of the checkpoint's shapes, for restore to write into."""
        if self._tensors is not None:
            self._tensors.prepare_optimizer_state(layout, _dtype)
            return
        state: Dict[int, Dict[str, torch.Tensor]] = {}
        for name, spec in layout.items():
            _, index, key = name.split("/", 2)
            state.setdefault(int(index), {})[key] = torch.zeros(spec["shape"], dtype=_dtype(spec["dtype"]))
        current = self.optimizer.state_dict()
        if not state and not current["state"]:
            return
        self.optimizer.load_state_dict({"state": state, "param_groups": current["param_groups"]})

    def _check_regions(self, result: Any) -> None:
        if not self.strict:
            return
        unclaimed = set(result.unclaimed_regions)
        if self._tensors is not None and self._group is not None:
            # A rank restores the pieces it holds (with ZeRO only its own parameters' state): a region is
            # the model's when any rank took it.
            everyone: List[Any] = [None] * torch.distributed.get_world_size(self._group)
            torch.distributed.all_gather_object(everyone, sorted(unclaimed), group=self._group)
            unclaimed = set.intersection(*(set(names) for names in everyone))
        if unclaimed:
            raise RestoreError(f"{result.dir} holds regions this model does not have: {', '.join(sorted(unclaimed))}")
        saved = {entry["name"] for entry in result.manifest.get("regions", [])}
        missing = sorted(n for n in self._regions if n not in saved and n.startswith("model/"))
        if missing:
            raise RestoreError(f"{result.dir} lacks state of this model: {', '.join(missing)}")

    def _apply_state(self, state: Dict[str, Any], iteration: int) -> None:
        if state.get("version") != _STATE_VERSION:
            raise RestoreError(f"unknown baton.torch state version {state.get('version')}")
        if state["iteration"] != iteration:
            raise RestoreError(f"state blob of iteration {state['iteration']} in checkpoint {iteration}")
        groups = self.optimizer.param_groups
        saved_groups = state["optimizer"]["param_groups"]
        if len(groups) != len(saved_groups):
            raise RestoreError(f"the checkpoint's optimizer has {len(saved_groups)} parameter groups, "
                               f"this one {len(groups)}")
        for group, saved in zip(groups, saved_groups):
            if len(group["params"]) != len(saved["params"]):
                raise RestoreError("a parameter group of the checkpoint's optimizer has another size")
            group.update({k: v for k, v in saved.items() if k != "params"})
        if self._tensors is not None:
            owners = self._tensors.owned_by_name()
            for name, values in state["optimizer"]["state"].items():
                if name in owners:
                    self._tensors.state_of(owners[name]).update(values)
        else:
            params: List[torch.nn.Parameter] = list(chain.from_iterable(g["params"] for g in groups))
            for index, values in state["optimizer"]["state"].items():
                self.optimizer.state[params[int(index)]].update(values)
        if self.scheduler is not None:
            if state["scheduler"] is None:
                raise RestoreError("the checkpoint has no scheduler state")
            self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None:
            if state.get("scaler") is None:
                raise RestoreError("the checkpoint has no gradient scaler state")
            if state["scaler"] or self.scaler.state_dict():
                # An enabled scaler refuses the empty state of a disabled one with a RuntimeError of
                # its own; a disabled scaler ignores whatever it is given.
                try:
                    self.scaler.load_state_dict(state["scaler"])
                except (RuntimeError, KeyError) as error:
                    raise RestoreError(f"the checkpoint's gradient scaler state does not fit: {error}") from None
        if self.sampler is not None:
            if state["sampler"] is None:
                raise RestoreError("the checkpoint has no sampler state")
            self.sampler.load_state_dict(state["sampler"])
            if self._loader is not None:
                self._loader.load(state.get("loader") or {})
        _set_rng_state(state["rng"])
        self.state = state["user"]
        self.iteration = iteration
