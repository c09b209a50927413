#!/usr/bin/python3
"""baton.torch resumes bit for bit with the schedulers, optimizers and gradient scaler that training
scripts use: a run cut between two checkpoints and restored into freshly built objects (with the
RNGs scrambled) must compute the same losses, parameters, optimizer, scheduler, scaler and sampler
state as the run that went straight through. The model has dropout (the torch RNG decides every
step) and the data comes through a shuffled ResumableSampler.

Exit status: 0 passed, 1 failed, 77 skipped (numpy or torch missing).
"""

import math
import os
import random
import sys
import tempfile
import types
import unittest
import unittest.mock
import warnings

try:
    import numpy
    import torch
    import torch.nn.functional
    import torch.utils.data
except ImportError as missing:
    print(f"skipped: {missing}", file=sys.stderr)
    sys.exit(77)

import baton.torch

STEPS = 30      # the whole run
INTERVAL = 5    # checkpoint every 5 iterations
CUT = 23        # the interrupted run stops here: it resumes from iteration 20
SAMPLES = 64    # 8 batches of 8: the run crosses epochs and the cut falls inside one

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)

_data = torch.Generator().manual_seed(11)
INPUTS = torch.randn(SAMPLES, 6, generator=_data)
LABELS = torch.randint(0, 3, (SAMPLES,), generator=_data)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(6, 24)
        self.drop = torch.nn.Dropout(0.25)
        self.b = torch.nn.Linear(24, 3)

    def forward(self, x):
        return self.b(self.drop(torch.relu(self.a(x))))


def shape(epoch):
    """A plain module-level function, as users pass to LambdaLR or keep in their own scheduler."""
    return 0.5 ** (epoch // 7)


class WarmupScheduler(torch.optim.lr_scheduler._LRScheduler):
    """A user's scheduler whose state_dict() holds a plain function and a bound method (the base
    class's state_dict() is the whole __dict__)."""

    def __init__(self, optimizer, curve):
        self.curve = curve
        self.warmup = self._warmup
        super().__init__(optimizer)

    def _warmup(self, epoch):
        return min(1.0, (epoch + 1) / 6)

    def get_lr(self):
        return [base * self.warmup(self.last_epoch) * self.curve(self.last_epoch) for base in self.base_lrs]


OPTIMIZERS = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4),
    "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.05),
    "adam_amsgrad": lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True),
}

SCHEDULERS = {
    "one_cycle": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=STEPS + 5),
    "cosine_warm_restarts": lambda o: torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=4, T_mult=2),
    "lambda_function": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda epoch: 0.97 ** epoch),
    "lambda_two_groups": lambda o: torch.optim.lr_scheduler.LambdaLR(o, [shape, lambda e: 1.0 / (1 + e)]),
    "plateau": lambda o: torch.optim.lr_scheduler.ReduceLROnPlateau(o, factor=0.5, patience=1),
    "user": lambda o: WarmupScheduler(o, shape),
    "step": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=4, gamma=0.7),
}


def build(optimizer_name, scheduler_name):
    torch.manual_seed(0)
    model = Net()
    if scheduler_name == "lambda_two_groups":
        params = [{"params": model.a.parameters()}, {"params": model.b.parameters()}]
    else:
        params = model.parameters()
    optimizer = OPTIMIZERS[optimizer_name](params)
    scheduler = SCHEDULERS[scheduler_name](optimizer)
    sampler = baton.torch.ResumableSampler(SAMPLES, seed=7)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(INPUTS, LABELS), batch_size=8,
                                         sampler=sampler, generator=torch.Generator())
    return types.SimpleNamespace(model=model, optimizer=optimizer, scheduler=scheduler, sampler=sampler,
                                 loader=loader, scaler=None)


def enabled_scaler():
    """A torch.cuda.amp.GradScaler in its enabled state. Without CUDA, PyTorch 1.13 turns enabled=True
    off in the constructor; its state machine (state_dict, load_state_dict, update with an explicit new
    scale, the scale and growth tensors) works on the CPU all the same, so the constructor is told that
    CUDA is there and the scale tensors are made on the CPU, where this test's model is. Only the CUDA kernels of unscale_ and of
    the automatic update are left out: scaled_step() does that part itself."""
    with unittest.mock.patch.object(torch.cuda, "is_available", return_value=True):
        scaler = torch.cuda.amp.GradScaler(init_scale=2.0 ** 13, growth_factor=2.0, backoff_factor=0.5,
                                           growth_interval=3, enabled=True)
    scaler._lazy_init_scale_growth_tracker(torch.device("cpu"))  # the model of this test is on the CPU
    return scaler


def scaled_step(parts, loss):
    """Dynamic loss scaling as GradScaler does it: the scaled loss is backpropagated in float16 range;
    on overflow the step is skipped and the scale backs off, after growth_interval good steps it grows.
    Which steps are skipped depends on the scale and the growth count: the scaler's state decides
    what the next iteration computes."""
    scaler = parts.scaler
    scale = scaler.get_scale()
    parts.optimizer.zero_grad()
    (loss * scale).backward()
    overflow = any(not torch.isfinite(p.grad.half()).all() for p in parts.model.parameters())
    state = scaler.state_dict()
    if overflow:
        scaler.update(scale * state["backoff_factor"])
        scaler.load_state_dict(dict(scaler.state_dict(), _growth_tracker=0))
        return False
    for p in parts.model.parameters():
        p.grad.div_(scale)
    parts.optimizer.step()
    tracker = state["_growth_tracker"] + 1
    if tracker == state["growth_interval"]:
        scaler.update(scale * state["growth_factor"])
        tracker = 0
    scaler.load_state_dict(dict(scaler.state_dict(), _growth_tracker=tracker))
    return True


def train(parts, chain, stop, restore):
    """Trains until iteration `stop`; returns (checkpointer, whether it restored, events), an event being
    ("step" or "skip", the iteration count after it, the loss in hexadecimal)."""
    extra = {} if parts.scaler is None else {"scaler": parts.scaler}
    ckpt = baton.torch.Checkpointer(parts.model, parts.optimizer, parts.scheduler, parts.sampler,
                                    chain_dir=chain, interval=INTERVAL, keep=10, **extra)
    restored = False
    if restore:
        # The RNGs as a fresh process would have them: restore must bring back the saved ones.
        torch.manual_seed(987)
        random.seed(654)
        numpy.random.seed(321)
        restored = ckpt.restore()
    losses = []
    while ckpt.iteration < stop:
        for x, y in parts.loader:
            loss = torch.nn.functional.cross_entropy(parts.model(x), y)
            if parts.scaler is not None and parts.scaler.is_enabled():
                if not scaled_step(parts, loss):
                    losses.append(("skip", ckpt.iteration, loss.item().hex()))
                    continue
            else:
                parts.optimizer.zero_grad()
                loss.backward()
                parts.optimizer.step()
            losses.append(("step", ckpt.iteration, loss.item().hex()))
            if isinstance(parts.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                parts.scheduler.step(loss.item())
            else:
                parts.scheduler.step()
            ckpt.wait()  # no checkpoint request is dropped: the cut restores a known iteration
            if ckpt.iteration >= stop:
                break
    return ckpt, restored, losses


def plain_scheduler_state(scheduler):
    """The scheduler's state without its callables (those are rebuilt by the constructor)."""
    def keep(value):
        return not isinstance(value, (types.FunctionType, types.MethodType))
    return {k: v for k, v in scheduler.state_dict().items() if keep(v)}


class ResumeExactTest(unittest.TestCase):
    def setUp(self):
        self._dir = tempfile.TemporaryDirectory(prefix="baton-resume-")

    def tearDown(self):
        self._dir.cleanup()

    def check(self, optimizer_name, scheduler_name, with_scaler=False):
        def parts_():
            parts = build(optimizer_name, scheduler_name)
            if with_scaler:
                parts.scaler = enabled_scaler()
            return parts

        straight = parts_()
        ckpt, _, expected = train(straight, os.path.join(self._dir.name, "straight"), STEPS, restore=False)
        ckpt.close(final_checkpoint=False)

        chain = os.path.join(self._dir.name, "cut")
        first = parts_()
        ckpt, _, before = train(first, chain, CUT, restore=False)
        ckpt.close(final_checkpoint=False)  # as if killed: iterations 21..23 are lost
        self.assertEqual(ckpt.native.counters().dropped_requests, 0)

        resumed = parts_()
        ckpt, restored, after = train(resumed, chain, STEPS, restore=True)
        self.assertTrue(restored)
        self.assertEqual(ckpt.iteration, STEPS)
        ckpt.close(final_checkpoint=False)

        # The straight run's losses from the restored checkpoint on, recomputed bit for bit.
        resumed_from = CUT - CUT % INTERVAL
        # (A skipped step after iteration 20 comes after checkpoint 20: the boundary is the next draw.)
        self.assertEqual(after, [e for e in expected
                                 if e[1] > resumed_from or e[0] == "skip" and e[1] == resumed_from])
        self.assertEqual(before, [e for e in expected if e[1] < CUT or e[0] == "step" and e[1] == CUT])
        for (name, a), (_, b) in zip(straight.model.state_dict().items(), resumed.model.state_dict().items()):
            self.assertTrue(torch.equal(a, b), name)
        state, state2 = straight.optimizer.state_dict(), resumed.optimizer.state_dict()
        self.assertEqual(state["param_groups"], state2["param_groups"])
        self.assertEqual(state["state"].keys(), state2["state"].keys())
        for index in state["state"]:
            for key, value in state["state"][index].items():
                other = state2["state"][index][key]
                self.assertTrue(torch.equal(value, other) if torch.is_tensor(value) else value == other,
                                f"optimizer state {index}/{key}")
        self.assertEqual(plain_scheduler_state(straight.scheduler), plain_scheduler_state(resumed.scheduler))
        self.assertEqual(straight.sampler.state_dict(), resumed.sampler.state_dict())
        if with_scaler:
            self.assertEqual(straight.scaler.state_dict(), resumed.scaler.state_dict())
        # The restored scheduler still has the callables its constructor made, not ones from the file.
        for value in vars(resumed.scheduler).values():
            if isinstance(value, types.MethodType):
                self.assertIs(value.__self__, resumed.scheduler)

    # Item: schedulers whose state holds functions or bound methods, with SGD and momentum.
    def test_one_cycle(self):
        self.check("sgd_momentum", "one_cycle")

    def test_cosine_annealing_warm_restarts(self):
        self.check("sgd_momentum", "cosine_warm_restarts")

    def test_lambda_with_a_function(self):
        self.check("sgd_momentum", "lambda_function")

    def test_lambda_with_a_function_per_group(self):
        self.check("adamw", "lambda_two_groups")

    def test_reduce_on_plateau(self):
        self.check("sgd_momentum", "plateau")

    def test_user_scheduler_with_function_and_bound_method(self):
        self.check("adamw", "user")

    # Optimizers.
    def test_adamw(self):
        self.check("adamw", "one_cycle")  # OneCycleLR cycles AdamW's beta1

    def test_sgd_nesterov(self):
        self.check("sgd_nesterov", "cosine_warm_restarts")

    def test_adam_amsgrad(self):
        self.check("adam_amsgrad", "step")

    # Gradient scaling.
    def test_grad_scaler(self):
        self.check("adamw", "step", with_scaler=True)

    def test_grad_scaler_state_changes_during_the_run(self):
        # The scaler test above only means something if the scale both grows and backs off, and some
        # steps are skipped, on both sides of the cut.
        parts = build("adamw", "step")
        parts.scaler = enabled_scaler()
        ckpt, _, losses = train(parts, os.path.join(self._dir.name, "probe"), STEPS, restore=False)
        ckpt.close(final_checkpoint=False)
        skipped = [iteration for kind, iteration, _ in losses if kind == "skip"]
        self.assertTrue(any(i < CUT - CUT % INTERVAL for i in skipped), skipped)
        self.assertTrue(any(i >= CUT - CUT % INTERVAL for i in skipped), skipped)
        self.assertNotEqual(parts.scaler.get_scale(), 2.0 ** 13)

    def test_disabled_scaler_round_trips(self):
        parts = build("sgd_momentum", "step")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parts.scaler = torch.cuda.amp.GradScaler(enabled=False)
        ckpt, _, _ = train(parts, os.path.join(self._dir.name, "disabled"), INTERVAL, restore=False)
        self.assertTrue(ckpt.close())
        again = build("sgd_momentum", "step")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            again.scaler = torch.cuda.amp.GradScaler(enabled=False)
        ckpt2, restored, _ = train(again, os.path.join(self._dir.name, "disabled"), 0, restore=True)
        self.assertTrue(restored)
        self.assertEqual(again.scaler.state_dict(), {})
        ckpt2.close(final_checkpoint=False)

    def test_checkpoint_without_scaler_state_is_refused_by_one_with_a_scaler(self):
        parts = build("adamw", "step")
        ckpt, _, _ = train(parts, os.path.join(self._dir.name, "noscaler"), INTERVAL, restore=False)
        self.assertTrue(ckpt.close())
        again = build("adamw", "step")
        again.scaler = enabled_scaler()
        with self.assertRaisesRegex(baton.torch.RestoreError, "scaler"):
            train(again, os.path.join(self._dir.name, "noscaler"), 0, restore=True)


class PlainStateTest(unittest.TestCase):
    def test_scheduler_callables_are_left_out_and_loading_runs_no_code(self):
        optimizer = torch.optim.SGD(Net().parameters(), lr=0.1, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1.0, total_steps=10)
        state = baton.torch._scheduler_state(scheduler, "scheduler")
        self.assertNotIn("anneal_func", state)
        self.assertEqual(state["total_steps"], 10)
        # The blob is still loaded without any class lookup.
        self.assertEqual(baton.torch._loads(baton.torch._dumps(state)), state)

    def test_callables_mixed_with_data_are_refused(self):
        # A list that mixes data and functions cannot be left out or kept: refuse it by name.
        with self.assertRaisesRegex(TypeError, r"scheduler.mixed\[1\]"):
            baton.torch._scheduler_state(types.SimpleNamespace(state_dict=lambda: {"mixed": [1, shape]}),
                                         "scheduler")

    def test_callable_objects_with_state_are_refused(self):
        # An object with a __call__ may carry state of its own: leaving it out would lose it silently.
        class Curve:
            def __call__(self, epoch):
                return 1.0

        with self.assertRaisesRegex(TypeError, "scheduler.curve"):
            baton.torch._scheduler_state(types.SimpleNamespace(state_dict=lambda: {"curve": Curve()}),
                                         "scheduler")


if __name__ == "__main__":
    unittest.main()
