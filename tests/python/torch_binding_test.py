#!/usr/bin/python3
"""Tests of `baton.torch` (re-registration of optimizer state, strictness, the sampler, the policy, the
handover); those of the module `baton` itself are in binding_test.py.

Exit status: 0 passed, 1 failed, 77 skipped (numpy or torch missing).
"""

import contextlib
import io
import json
import os
import pickle
import signal
import sys
import time
import unittest
import unittest.mock

try:
    import numpy
    import torch
except ImportError as missing:
    print(f"skipped: {missing}", file=sys.stderr)
    sys.exit(77)

import baton
import baton.torch
from chain_case import TempChain, options, saved_environment


class Net(torch.nn.Module):
    def __init__(self, extra=False):
        super().__init__()
        self.a = torch.nn.Linear(4, 8)
        self.norm = torch.nn.BatchNorm1d(8)
        self.b = torch.nn.Linear(8, 2)
        if extra:
            self.c = torch.nn.Linear(2, 2)

    def forward(self, x):
        return self.b(torch.relu(self.norm(self.a(x))))


def train_steps(model, optimizer, scheduler, steps, generator):
    for _ in range(steps):
        x = torch.randn(16, 4, generator=generator)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()


def build(extra=False):
    torch.manual_seed(0)
    model = Net(extra)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


class TorchAdapterTest(TempChain):
    def test_optimizer_state_is_registered_after_the_first_step_and_restored(self):
        model, optimizer, scheduler = build()
        ckpt = baton.torch.Checkpointer(model, optimizer, scheduler, chain_dir=self.chain, interval=3)
        self.assertFalse(ckpt.restore())
        ckpt.state["note"] = "seven"
        train_steps(model, optimizer, scheduler, 7, torch.Generator().manual_seed(1))
        self.assertTrue(ckpt.close())  # a final checkpoint of iteration 7
        expected_rng = torch.get_rng_state()

        torch.manual_seed(123)  # a restore must bring the RNG back
        model2, optimizer2, scheduler2 = build()
        ckpt2 = baton.torch.Checkpointer(model2, optimizer2, scheduler2, chain_dir=self.chain, interval=3)
        self.assertTrue(ckpt2.restore())
        self.assertEqual(ckpt2.iteration, 7)
        self.assertEqual(ckpt2.state, {"note": "seven"})
        self.assertTrue(torch.equal(torch.get_rng_state(), expected_rng))
        for (name, a), (_, b) in zip(model.state_dict().items(), model2.state_dict().items()):
            self.assertTrue(torch.equal(a, b), name)
        state, state2 = optimizer.state_dict(), optimizer2.state_dict()
        self.assertEqual(state["param_groups"], state2["param_groups"])
        for index in state["state"]:
            for key, value in state["state"][index].items():
                self.assertTrue(torch.equal(value, state2["state"][index][key]), f"{index}/{key}")
        self.assertEqual(scheduler.state_dict(), scheduler2.state_dict())
        ckpt2.close(final_checkpoint=False)

    def test_tensors_are_named_by_parameter_and_a_chain_named_by_index_keeps_its_names(self):
        model, optimizer, scheduler = build()
        ckpt = baton.torch.Checkpointer(model, optimizer, scheduler, chain_dir=self.chain, interval=3)
        train_steps(model, optimizer, scheduler, 3, torch.Generator().manual_seed(1))
        self.assertTrue(ckpt.close())
        names = {entry["name"] for entry in baton.CheckpointReader(os.path.join(self.chain, "ckpt-000000000003")).regions()}
        self.assertIn("optimizer/a.weight/exp_avg", names)
        self.assertIn("model/a.weight", names)

        # A chain begun by an earlier release: optimizer state named by index, no torch_naming.
        legacy = os.path.join(self.chain, "legacy")
        model, optimizer, scheduler = build()
        ckpt = baton.torch.Checkpointer(model, optimizer, scheduler, chain_dir=legacy, interval=3)
        ckpt._tensors = None
        ckpt.native.set_manifest_field("torch_naming", None)
        train_steps(model, optimizer, scheduler, 3, torch.Generator().manual_seed(1))
        self.assertTrue(ckpt.close())
        names = {entry["name"] for entry in baton.CheckpointReader(os.path.join(legacy, "ckpt-000000000003")).regions()}
        self.assertIn("optimizer/0/exp_avg", names)
        model2, optimizer2, scheduler2 = build()
        ckpt2 = baton.torch.Checkpointer(model2, optimizer2, scheduler2, chain_dir=legacy, interval=3)
        self.assertTrue(ckpt2.restore())
        for (name, a), (_, b) in zip(optimizer.state_dict()["state"].items(), optimizer2.state_dict()["state"].items()):
            self.assertTrue(all(torch.equal(a[k], b[k]) for k in a), name)
        train_steps(model2, optimizer2, scheduler2, 3, torch.Generator().manual_seed(2))
        self.assertTrue(ckpt2.close())
        names = {entry["name"] for entry in baton.CheckpointReader(os.path.join(legacy, "ckpt-000000000006")).regions()}
        self.assertIn("optimizer/0/exp_avg", names)  # the chain keeps its names

    def test_checkpoints_follow_the_interval(self):
        model, optimizer, scheduler = build()
        ckpt = baton.torch.Checkpointer(model, optimizer, scheduler, chain_dir=self.chain, interval=2, keep=10)
        generator = torch.Generator().manual_seed(1)
        for _ in range(5):
            train_steps(model, optimizer, scheduler, 1, generator)
            ckpt.wait()  # a request while one is in flight would be dropped (and counted)
        ckpt.close(final_checkpoint=False)
        self.assertEqual(ckpt.native.counters().dropped_requests, 0)
        self.assertEqual(sorted(n for n in os.listdir(self.chain) if n.startswith("ckpt-")),
                         ["ckpt-000000000002", "ckpt-000000000004"])

    def test_buffers_are_saved_as_of_the_boundary(self):
        # The forward pass that overlaps the snapshot updates batch-norm statistics in place: the
        # checkpoint must hold them as they were when the iteration ended.
        model, optimizer, scheduler = build()
        ckpt = baton.torch.Checkpointer(model, optimizer, scheduler, chain_dir=self.chain, interval=4)
        generator = torch.Generator().manual_seed(1)
        train_steps(model, optimizer, scheduler, 4, generator)
        expected = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("norm.")}
        train_steps(model, optimizer, scheduler, 1, generator)  # its forward starts checkpoint 4
        ckpt.close(final_checkpoint=False)
        self.assertFalse(torch.equal(model.norm.running_mean, expected["norm.running_mean"]))
        model2, optimizer2, scheduler2 = build()
        ckpt2 = baton.torch.Checkpointer(model2, optimizer2, scheduler2, chain_dir=self.chain, interval=4)
        self.assertTrue(ckpt2.restore())
        self.assertEqual(ckpt2.iteration, 4)
        for key, value in expected.items():
            self.assertTrue(torch.equal(model2.state_dict()[key], value), key)
        ckpt2.close(final_checkpoint=False)

    def test_restore_into_another_model_is_refused(self):
        model, optimizer, scheduler = build()
        ckpt = baton.torch.Checkpointer(model, optimizer, scheduler, chain_dir=self.chain, interval=1)
        train_steps(model, optimizer, scheduler, 1, torch.Generator().manual_seed(1))
        ckpt.close()
        model2, optimizer2, scheduler2 = build(extra=True)
        ckpt2 = baton.torch.Checkpointer(model2, optimizer2, scheduler2, chain_dir=self.chain, interval=1)
        with self.assertRaisesRegex(baton.torch.RestoreError, "model/c.weight"):
            ckpt2.restore()

    def test_state_blob_holds_plain_data_only(self):
        with self.assertRaisesRegex(TypeError, "state.bad"):
            baton.torch._plain({"bad": object()}, "state")
        payload = pickle.dumps(numpy.float64(1.5))  # needs a class lookup to load
        with self.assertRaises(pickle.UnpicklingError):
            baton.torch._loads(payload)
        self.assertEqual(baton.torch._loads(baton.torch._dumps({"a": (1, 2.5, None)})), {"a": (1, 2.5, None)})


class SamplerTest(unittest.TestCase):
    def test_resumes_with_the_remaining_order(self):
        whole = baton.torch.ResumableSampler(50, seed=4)
        first, second = list(whole), list(whole)
        self.assertEqual(sorted(first), list(range(50)))
        self.assertNotEqual(first, second)  # a new order each epoch
        for cut in (0, 1, 17, 49):
            sampler = baton.torch.ResumableSampler(50, seed=4)
            taken = [index for _, index in zip(range(cut), iter(sampler))]
            state = sampler.state_dict()
            resumed = baton.torch.ResumableSampler(50, seed=4)
            resumed.load_state_dict(state)
            self.assertEqual(taken + list(resumed), first)
            self.assertEqual(list(resumed), second)

    def test_shards(self):
        shards = [list(baton.torch.ResumableSampler(10, seed=1, num_replicas=3, rank=r)) for r in range(3)]
        self.assertTrue(all(len(s) == 4 for s in shards))
        self.assertEqual(set().union(*shards), set(range(10)))

    def test_another_world_size_continues_the_epoch(self):
        # 4 ranks take 5 samples each of 50 in lockstep; 2 ranks restored from rank 0's state take the
        # rest of the epoch: every index once (50 - 20 = 30 positions split evenly), then whole epochs.
        old = [baton.torch.ResumableSampler(50, seed=3, num_replicas=4, rank=r) for r in range(4)]
        taken = [index for sampler in old for _, index in zip(range(5), iter(sampler))]
        state = old[0].state_dict()
        new = [baton.torch.ResumableSampler(50, seed=3, num_replicas=2, rank=r) for r in range(2)]
        rest = []
        for sampler in new:
            sampler.load_state_dict(state)
            self.assertEqual((sampler.epoch, sampler.position, sampler.state_dict()["offset"]), (0, 0, 20))
            rest += list(sampler)
            self.assertEqual((sampler.epoch, sampler.position), (1, 0))
        self.assertEqual(sorted(taken + rest), list(range(50)))
        self.assertEqual(len(list(new[0])), 25)  # the next epoch is a whole one
        old_state = dict(state, ranks=4, rank=0)
        del old_state["offset"]  # a state written before resharding existed
        new[1].load_state_dict(old_state)
        self.assertEqual(new[1].state_dict()["offset"], 20)
        # The saved ranks' states disagreeing on the position: not in lockstep.
        with self.assertRaisesRegex(ValueError, "lockstep"):
            new[0]._native.resume([old[0].state_dict(), dict(old[1].state_dict(), position=4)])

    def test_a_different_sampler_is_refused(self):
        state = baton.torch.ResumableSampler(50, seed=4).state_dict()
        with self.assertRaisesRegex(baton.torch.RestoreError, "seed"):
            baton.torch.ResumableSampler(50, seed=5).load_state_dict(state)
        with self.assertRaisesRegex(baton.torch.RestoreError, "size 50"):
            baton.torch.ResumableSampler(51, seed=4, num_replicas=2, rank=0).load_state_dict(state)
        with self.assertRaisesRegex(baton.torch.RestoreError, "drop_last"):
            baton.torch.ResumableSampler(50, seed=4, drop_last=True).load_state_dict(state)
        with self.assertRaises(ValueError):
            baton.torch.ResumableSampler(3, seed=0, num_replicas=2, rank=2)


class PolicyTest(TempChain):
    def train_until_exit(self, ckpt, parts, seconds):
        model, optimizer, scheduler = parts
        generator = torch.Generator().manual_seed(1)
        give_up = time.monotonic() + seconds
        while not ckpt.should_exit and time.monotonic() < give_up:
            train_steps(model, optimizer, scheduler, 1, generator)
            time.sleep(0.002)

    def test_final_checkpoint_commits_before_the_deadline(self):
        parts = build()
        policy = baton.PolicyOptions()
        policy.deadline = time.time() + 6
        policy.deadline_margin = 3
        ckpt = baton.torch.Checkpointer(*parts, chain_dir=self.chain, signals=False, policy_options=policy)
        self.train_until_exit(ckpt, parts, 20)
        self.assertTrue(ckpt.should_exit)
        stats = ckpt.native.last_checkpoint()
        self.assertTrue(stats.committed)
        ckpt.close()
        newest = sorted(n for n in os.listdir(self.chain) if n.startswith("ckpt-"))[-1]
        with open(os.path.join(self.chain, newest, "manifest.json"), encoding="utf-8") as f:
            manifest = json.load(f)
        self.assertLessEqual(manifest["created_unix"], policy.deadline - policy.deadline_margin)
        self.assertEqual(manifest["iteration"], stats.iteration)
        self.assertGreaterEqual(manifest["tuning"]["interval"], 1)

    def test_malformed_environment_is_a_config_error(self):
        os.environ["BATON_OVERHEAD"] = "lots"
        try:
            with self.assertRaisesRegex(baton.ConfigError, "BATON_OVERHEAD"):
                baton.torch.Checkpointer(*build(), chain_dir=self.chain)
        finally:
            del os.environ["BATON_OVERHEAD"]

    def test_sigterm_checkpoints_and_asks_to_exit(self):
        parts = build()
        ckpt = baton.torch.Checkpointer(*parts, chain_dir=self.chain)
        train_steps(*parts, 3, torch.Generator().manual_seed(1))
        os.kill(os.getpid(), signal.SIGTERM)
        self.train_until_exit(ckpt, parts, 20)
        self.assertTrue(ckpt.should_exit)
        self.assertTrue(ckpt.native.last_checkpoint().committed)
        ckpt.close()

    def test_requested_final_checkpoint(self):
        parts = build()
        ckpt = baton.torch.Checkpointer(*parts, chain_dir=self.chain, signals=False)
        train_steps(*parts, 3, torch.Generator().manual_seed(1))
        ckpt.request_checkpoint(exit_after=True)
        self.assertTrue(ckpt.should_exit)  # the boundary of step 3 took it and waited for it
        self.assertEqual(ckpt.native.last_checkpoint().iteration, 3)
        self.assertTrue(ckpt.native.last_checkpoint().committed)
        ckpt.close()

    def train_under_torchrun(self, chain, grace=None):
        """Trains through three checkpoints of the policy as a rank that torchrun started; returns what
        baton.torch said on standard error. `grace`: torchrun's (seconds, why) instead of the real one."""
        parts = build()
        generator = torch.Generator().manual_seed(1)
        with saved_environment("TORCHELASTIC_RUN_ID"), contextlib.redirect_stderr(io.StringIO()) as said:
            os.environ["TORCHELASTIC_RUN_ID"] = "test"
            with (contextlib.nullcontext() if grace is None
                  else unittest.mock.patch("baton.torch.launcher_grace", return_value=grace)):
                ckpt = baton.torch.Checkpointer(*parts, chain_dir=os.path.join(self.chain, chain), signals=False)
            try:
                train_steps(*parts, 20, generator)
                ckpt.native.wait()  # the profile's checkpoint, measured at the next boundary
                train_steps(*parts, 2, generator)
                ckpt.request_checkpoint()  # its start compares the measured final checkpoint with the grace
                train_steps(*parts, 2, generator)
            finally:
                ckpt.close()  # and a final one
        return said.getvalue()

    def test_torchrun_grace_shorter_than_a_final_checkpoint_is_told_once(self):
        with saved_environment("TORCHELASTIC_RUN_ID"):
            os.environ.pop("TORCHELASTIC_RUN_ID", None)
            self.assertIsNone(baton._torch_world.launcher_grace())
            os.environ["TORCHELASTIC_RUN_ID"] = "test"
            grace, why = baton._torch_world.launcher_grace()
            self.assertGreater(grace, 0)
        # This model's final checkpoint takes milliseconds: within torchrun's real grace, nothing is said.
        self.assertNotIn("torchrun kills", self.train_under_torchrun("real"))
        said = self.train_under_torchrun("short", (1e-6, "a grace of a microsecond"))
        self.assertEqual(said.count("torchrun kills"), 1, said)
        self.assertIn("a grace of a microsecond", said)

    def test_tuning_travels_to_the_next_job(self):
        parts = build()
        ckpt = baton.torch.Checkpointer(*parts, chain_dir=self.chain, signals=False)
        generator = torch.Generator().manual_seed(1)
        train_steps(*parts, 40, generator)
        # Profiling ends at the first step after its checkpoint is persisted, which takes longer than
        # these tiny steps on a busy machine: train on until then, within a bound.
        deadline = time.monotonic() + 60
        while ckpt.policy.profiling and time.monotonic() < deadline:
            time.sleep(0.01)
            train_steps(*parts, 1, generator)
        ckpt.close()
        self.assertFalse(ckpt.policy.profiling)
        tuning = ckpt.policy.tuning
        parts = build()
        again = baton.torch.Checkpointer(*parts, chain_dir=self.chain, signals=False)
        self.assertTrue(again.restore())
        # The new policy starts from it. The final checkpoint of close() carries the tuning as it was
        # when that checkpoint started; its own persist, measured after, may move the timings that
        # `tuning` holds now (it did on a slower machine), not the interval the policy chose.
        self.assertEqual(set(again.previous_tuning), set(tuning))
        for key in ("interval", "minimum_interval", "iteration_seconds"):
            self.assertEqual(again.previous_tuning[key], tuning[key], key)
        again.close(final_checkpoint=False)


def newest_manifest(chain):
    newest = sorted(n for n in os.listdir(chain) if n.startswith("ckpt-"))[-1]
    with open(os.path.join(chain, newest, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


class HandoverTest(TempChain):
    """The manifest's job_id, seq, final and training_done, done() and the handover wait."""

    def test_done_makes_the_final_checkpoint_say_training_done(self):
        parts = build()
        ckpt = baton.torch.Checkpointer(*parts, chain_dir=self.chain, interval=3)
        train_steps(*parts, 7, torch.Generator().manual_seed(1))
        self.assertFalse(ckpt.training_done)
        ckpt.done()
        self.assertTrue(ckpt.training_done)
        self.assertTrue(ckpt.close())
        manifest = newest_manifest(self.chain)
        self.assertEqual(manifest["iteration"], 7)
        self.assertIs(manifest["final"], True)
        self.assertIs(manifest["training_done"], True)
        self.assertIn("job_id", manifest)
        self.assertIn("seq", manifest)
        stats = ckpt.native.last_checkpoint()
        self.assertTrue(stats.final and stats.training_done)

    def test_done_is_committed_even_when_the_iteration_is_already_saved(self):
        parts = build()
        ckpt = baton.torch.Checkpointer(*parts, chain_dir=self.chain, interval=3)
        train_steps(*parts, 6, torch.Generator().manual_seed(1))
        self.assertTrue(ckpt.checkpoint_now())
        self.assertIs(newest_manifest(self.chain)["training_done"], False)
        ckpt.done()
        self.assertTrue(ckpt.close())
        manifest = newest_manifest(self.chain)
        self.assertEqual(manifest["iteration"], 6)
        self.assertIs(manifest["training_done"], True)

    def test_close_without_done_is_final_but_not_done(self):
        parts = build()
        ckpt = baton.torch.Checkpointer(*parts, chain_dir=self.chain, interval=100)
        train_steps(*parts, 4, torch.Generator().manual_seed(1))
        self.assertTrue(ckpt.close())
        manifest = newest_manifest(self.chain)
        self.assertIs(manifest["final"], True)
        self.assertIs(manifest["training_done"], False)

    def test_native_flags_identity_and_restore_fields(self):
        opts = options(self.chain)
        opts.job_id = 77
        opts.chain_seq = 2
        self.assertEqual(opts.restart_count, 2)  # the deprecated alias
        weights = numpy.arange(1000, dtype=numpy.float32)
        ckpt = baton.Checkpointer(opts)
        ckpt.register_region("weights", weights)
        self.assertTrue(ckpt.checkpoint_now(5, final=True, training_done=True))
        ckpt.close()
        reader = baton.Checkpointer(options(self.chain))
        reader.register_region("weights", weights)
        result = reader.restore()
        self.assertTrue(result.restored)
        self.assertEqual((result.job_id, result.chain_seq, result.restart_count), (77, 2, 2))
        self.assertTrue(result.final and result.training_done)
        self.assertEqual(result.handover_wait_seconds, 0.0)
        reader.close()

    def test_handover_wait_from_the_environment(self):
        parts = build()
        first = baton.torch.Checkpointer(*parts, chain_dir=self.chain, interval=100)
        train_steps(*parts, 2, torch.Generator().manual_seed(1))
        self.assertTrue(first.checkpoint_now())  # not final: this job died
        first.close(final_checkpoint=False)
        with saved_environment("BATON_CHAIN_DIR", "BATON_CHAIN_SEQ", "BATON_HANDOVER_WAIT"):
            os.environ.update({"BATON_CHAIN_DIR": self.chain, "BATON_CHAIN_SEQ": "1",
                               "BATON_HANDOVER_WAIT": "forever"})
            with self.assertRaisesRegex(baton.ConfigError, "BATON_HANDOVER_WAIT"):
                baton.Options.from_environment()
            os.environ["BATON_HANDOVER_WAIT"] = "0.5"
            self.assertEqual(baton.Options.from_environment().handover_wait_seconds, 0.5)
            parts = build()
            second = baton.torch.Checkpointer(*parts, interval=100)
            self.assertTrue(second.restore())
            self.assertEqual(second.iteration, 2)
            self.assertGreaterEqual(second.handover_wait_seconds, 0.5)
            second.close(final_checkpoint=False)


if __name__ == "__main__":
    unittest.main()
