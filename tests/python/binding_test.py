#!/usr/bin/python3
"""Tests of the Python module `baton` and of `baton.torch` (regions in place, blobs, restore, errors,
re-registration of optimizer state, strictness, the sampler).

Exit status: 0 passed, 1 failed, 77 skipped (numpy or torch missing).
"""

import json
import os
import pickle
import signal
import sys
import tempfile
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


def options(chain_dir):
    result = baton.Options()
    result.chain_dir = chain_dir
    return result


class TempChain(unittest.TestCase):
    def setUp(self):
        self._dir = tempfile.TemporaryDirectory(prefix="baton-binding-")
        self.chain = os.path.join(self._dir.name, "chain")

    def tearDown(self):
        self._dir.cleanup()


class NativeTest(TempChain):
    def test_numpy_regions_and_blobs_round_trip(self):
        weights = numpy.arange(100_003, dtype=numpy.float32)
        counter = numpy.array([7], dtype=numpy.int64)
        ckpt = baton.Checkpointer(options(self.chain))
        ckpt.register_region("weights", weights)
        ckpt.register_region("counter", counter)
        ckpt.set_blob("note", b"\x00binary\xff")
        ckpt.set_manifest_field("user", {"lr": 0.5, "tags": ["a", "b"]})
        ckpt.after_update(3)
        self.assertTrue(ckpt.request_checkpoint(3))
        self.assertTrue(ckpt.wait())
        stats = ckpt.last_checkpoint()
        self.assertTrue(stats.committed)
        self.assertEqual(stats.iteration, 3)
        self.assertGreaterEqual(stats.bytes, weights.nbytes + counter.nbytes)
        ckpt.close()

        fresh_weights = numpy.zeros_like(weights)
        fresh_counter = numpy.zeros_like(counter)
        again = baton.Checkpointer(options(self.chain))
        again.register_region("weights", fresh_weights)
        again.register_region("counter", fresh_counter)
        result = again.restore()
        self.assertTrue(result.restored)
        self.assertEqual(result.iteration, 3)
        self.assertEqual(result.blobs, {"note": b"\x00binary\xff"})
        self.assertEqual(result.manifest["user"], {"lr": 0.5, "tags": ["a", "b"]})
        self.assertEqual(result.unclaimed_regions, [])
        self.assertTrue(numpy.array_equal(fresh_weights, weights))
        self.assertEqual(fresh_counter[0], 7)

    def test_empty_chain_restores_nothing(self):
        result = baton.Checkpointer(options(self.chain)).restore()
        self.assertFalse(result.restored)

    def test_torch_tensor_is_restored_in_place(self):
        tensor = torch.arange(1000, dtype=torch.float64)
        ckpt = baton.Checkpointer(options(self.chain))
        ckpt.register_region("t", tensor)
        self.assertTrue(ckpt.checkpoint_now(1))
        pointer = tensor.data_ptr()
        tensor.zero_()
        result = ckpt.restore()
        self.assertEqual(result.iteration, 1)
        self.assertEqual(tensor.data_ptr(), pointer)
        self.assertTrue(torch.equal(tensor, torch.arange(1000, dtype=torch.float64)))

    def test_unusable_memory_is_refused(self):
        ckpt = baton.Checkpointer(options(self.chain))
        with self.assertRaisesRegex(ValueError, "strided: the buffer is read-only or not C-contiguous"):
            ckpt.register_region("strided", numpy.zeros(10)[::2])
        readonly = numpy.zeros(4)
        readonly.flags.writeable = False
        with self.assertRaisesRegex(ValueError, "read-only"):
            ckpt.register_region("readonly", readonly)
        with self.assertRaisesRegex(ValueError, "transposed: the tensor is not contiguous"):
            ckpt.register_region("transposed", torch.zeros(3, 4).t())
        with self.assertRaisesRegex(ValueError, "expected a writable buffer"):
            ckpt.register_region("text", "not memory")

    def test_size_mismatch_on_restore_is_an_error(self):
        ckpt = baton.Checkpointer(options(self.chain))
        ckpt.register_region("r", numpy.zeros(16, dtype=numpy.uint8))
        self.assertTrue(ckpt.checkpoint_now(1))
        other = baton.Checkpointer(options(self.chain))
        other.register_region("r", numpy.zeros(17, dtype=numpy.uint8))
        with self.assertRaises(baton.Error):
            other.restore()

    def test_environment(self):
        saved = {k: os.environ.get(k) for k in ("BATON_CHAIN_DIR", "BATON_KEEP")}
        try:
            os.environ["BATON_CHAIN_DIR"] = self.chain
            os.environ["BATON_KEEP"] = "3"
            opts = baton.Options.from_environment()
            self.assertEqual(opts.chain_dir, self.chain)
            self.assertEqual(opts.keep, 3)
            os.environ["BATON_KEEP"] = "many"
            with self.assertRaises(baton.ConfigError):
                baton.Options.from_environment()
            del os.environ["BATON_CHAIN_DIR"]
            del os.environ["BATON_KEEP"]
            with self.assertRaises(baton.ConfigError):
                baton.Options.from_environment()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def test_reserved_manifest_field_is_refused(self):
        with self.assertRaises(baton.Error):
            baton.Checkpointer(options(self.chain)).set_manifest_field("iteration", 5)


class TwoLevelTest(TempChain):
    def test_node_local_commit_drain_and_restore(self):
        local = os.path.join(self._dir.name, "local")
        opts = options(self.chain)
        opts.local_dir = local
        opts.node_name = "node-a"
        opts.drain_bytes_per_second = 50e6
        weights = numpy.arange(300_000, dtype=numpy.float32)
        ckpt = baton.Checkpointer(opts)
        ckpt.register_region("weights", weights)
        self.assertTrue(ckpt.checkpoint_now(4))
        self.assertTrue(ckpt.wait_durable())
        status = ckpt.drain_status()
        self.assertTrue(status.two_level)
        self.assertEqual((status.shared_iteration, status.drained, status.failed), (4, 1, 0))
        ckpt.close()
        self.assertTrue(os.path.exists(os.path.join(self.chain, "ckpt-000000000004", "manifest.json")))
        self.assertTrue(os.path.exists(os.path.join(local, "ckpt-000000000004", "manifest.json")))
        for node, node_local in (("node-a", True), ("node-b", False)):
            opts.node_name = node
            reader = baton.Checkpointer(opts)
            restored_weights = numpy.zeros_like(weights)
            reader.register_region("weights", restored_weights)
            result = reader.restore()
            self.assertEqual((result.iteration, result.node_local), (4, node_local))
            self.assertTrue(numpy.array_equal(restored_weights, weights))
            reader.close()

    def test_environment(self):
        job = {"BATON_CHAIN_DIR": self.chain, "BATON_LOCAL_DIR": "/local/x", "BATON_LOCAL_KEEP": "3",
               "BATON_DRAIN_MBPS": "250"}
        with unittest.mock.patch.dict(os.environ, job):
            opts = baton.Options.from_environment()
            self.assertEqual((opts.local_dir, opts.local_keep, opts.drain_bytes_per_second), ("/local/x", 3, 250e6))
            os.environ["BATON_DRAIN_MBPS"] = "fast"
            with self.assertRaisesRegex(baton.ConfigError, "BATON_DRAIN_MBPS"):
                baton.Options.from_environment()
            os.environ["BATON_DRAIN_MBPS"] = "0"
            os.environ["BATON_LOCAL_DIR"] = "relative"
            with self.assertRaisesRegex(baton.ConfigError, "BATON_LOCAL_DIR"):
                baton.Options.from_environment()


class SessionTest(TempChain):
    def test_session_checkpoints_restores_and_carries_the_sampler(self):
        options = baton.SessionOptions()
        options.checkpointer.chain_dir = self.chain
        options.policy.deadline = time.time() + 6
        options.policy.deadline_margin = 3
        weights = numpy.zeros(4096, dtype=numpy.float64)
        sampler = baton.ResumableSampler(100, 7)
        session = baton.Session(options)
        session.register_region("weights", weights)
        session.attach_sampler(sampler)
        self.assertFalse(session.restore().restored)
        iteration = 0
        give_up = time.monotonic() + 20
        while not session.should_exit and time.monotonic() < give_up:
            iteration += 1
            sampler.take(10)
            session.before_update()
            weights += 1.0
            session.step(iteration)
            time.sleep(0.002)
        self.assertTrue(session.should_exit)
        self.assertTrue(session.last_checkpoint().committed)
        saved_iteration = session.last_checkpoint().iteration
        saved_weights = weights.copy()
        session.close()

        options.policy.deadline = None
        again = baton.Session(options)
        restored_weights = numpy.zeros_like(weights)
        restored_sampler = baton.ResumableSampler(100, 7)
        again.register_region("weights", restored_weights)
        again.attach_sampler(restored_sampler)
        result = again.restore()
        self.assertEqual(result.iteration, saved_iteration)
        self.assertTrue(numpy.array_equal(restored_weights, saved_weights))
        self.assertEqual(restored_sampler.state, result.manifest["sampler"])
        self.assertEqual(restored_sampler.position, (saved_iteration * 10) % 100)
        again.close()


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
        keys = ("BATON_CHAIN_DIR", "BATON_CHAIN_SEQ", "BATON_HANDOVER_WAIT")
        saved = {k: os.environ.get(k) for k in keys}
        try:
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
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


class MultiRankTest(TempChain):
    """Ranks as threads of this process, each with its own coordinator (the file system's or a Python
    callable's): one checkpoint of both, restored by one process (2 -> 1)."""

    def _two_ranks(self, make_coordinator):
        import threading
        size = 100_003
        errors = []

        def rank_main(rank):
            try:
                opts = options(self.chain)
                opts.coordinator = make_coordinator(rank)
                ckpt = baton.Checkpointer(opts)
                self.assertEqual((ckpt.rank, ckpt.world_size), (rank, 2))
                weights = numpy.arange(size, dtype=numpy.float32)  # the same on both ranks
                shard = numpy.full(10, rank, dtype=numpy.int32)  # this rank's tenth of an array of 20
                ckpt.register_region("weights", weights)
                ckpt.set_region_layout("weights", "replicated")
                ckpt.register_region("shard", shard)
                ckpt.set_region_layout("shard", "sharded", offset=rank * shard.nbytes, global_size=2 * shard.nbytes)
                with self.assertRaises(baton.Error):
                    ckpt.set_region_layout("weights", "diagonal")
                self.assertTrue(ckpt.checkpoint_now(4), ckpt.last_error)
                ckpt.close()
            except Exception as error:  # reported by the main thread
                errors.append(error)

        threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        with open(os.path.join(self.chain, "ckpt-000000000004", "manifest.json"), encoding="utf-8") as f:
            manifest = json.load(f)
        self.assertEqual((manifest["format_version"], manifest["world_size"]), (2, 2))
        weights = numpy.zeros(size, dtype=numpy.float32)
        whole = numpy.zeros(20, dtype=numpy.int32)
        alone = baton.Checkpointer(options(self.chain))
        alone.register_region("weights", weights)
        alone.register_region("shard", whole)
        result = alone.restore()
        self.assertTrue(result.restored)
        numpy.testing.assert_array_equal(weights, numpy.arange(size, dtype=numpy.float32))
        numpy.testing.assert_array_equal(whole, [0] * 10 + [1] * 10)
        alone.close()

    def test_file_coordinator(self):
        session = f"binding-{os.getpid()}"
        self._two_ranks(lambda rank: baton.FileCoordinator(self.chain, session, rank, 2, timeout_seconds=30))

    def test_callback_coordinator(self):
        import threading
        barrier = threading.Barrier(2)
        slots = [None, None]

        def make(rank):
            def all_gather(key, data):
                slots[rank] = (key, data)
                barrier.wait(30)
                gathered = list(slots)
                barrier.wait(30)  # nobody overwrites a slot before both have read
                self.assertEqual({k for k, _ in gathered}, {key})
                return [d for _, d in gathered]
            return baton.CallbackCoordinator(rank, 2, all_gather)

        self._two_ranks(make)


if __name__ == "__main__":
    unittest.main()
