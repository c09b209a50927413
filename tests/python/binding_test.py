#!/usr/bin/python3
"""Tests of the Python module `baton` (regions in place, blobs, restore, errors, two levels, the
session, several ranks); those of `baton.torch` are in torch_binding_test.py.

Exit status: 0 passed, 1 failed, 77 skipped (numpy or torch missing).
"""

import json
import os
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
from chain_case import TempChain, options, saved_environment


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
        with saved_environment("BATON_CHAIN_DIR", "BATON_KEEP"):
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
