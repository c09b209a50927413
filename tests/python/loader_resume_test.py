#!/usr/bin/python3
"""baton.torch resumes a DataLoader with worker processes bit for bit: a run cut in mid-epoch and
restored into freshly built objects (with the RNGs scrambled) must load the same batches, with the same
random transforms, and compute the same losses and parameters as the run that went straight through.

The dataset's transforms draw from torch's, ``random``'s and numpy's RNGs inside the workers, the model
has dropout (the main process's RNG), and the iterator is created after restore(), as a training loop
does. Cases: 2 workers, with and without ``persistent_workers``, with the loader found from the sampler
or passed as the Checkpointer's sampler, with and without a generator of the loader's own; no workers.
Without baton's tracking of the loader each of them fails: prefetched batches count as taken, the
iterator's seed draw shifts the RNG, and a resumed worker's RNG begins again at its seed. An iterator
with workers created before restore() is refused with the fix.

Exit status: 0 passed, 1 failed, 77 skipped (numpy or torch missing).
"""

import random
import sys
import tempfile
import unittest

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
CUT = 23        # the interrupted run stops here: it resumes from iteration 20, inside epoch 2
SAMPLES = 64    # 8 batches of 8

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)

_data = torch.Generator().manual_seed(11)
INPUTS = torch.randn(SAMPLES, 6, generator=_data)
LABELS = torch.randint(0, 3, (SAMPLES,), generator=_data)


class NoisyDataset(torch.utils.data.Dataset):
    """Random transforms as data pipelines have them, one from each RNG a worker seeds."""

    def __len__(self):
        return SAMPLES

    def __getitem__(self, index):
        noise = torch.randn(6) * 0.1 + random.random() + float(numpy.random.rand())
        return INPUTS[index] + noise, LABELS[index]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(6, 24)
        self.drop = torch.nn.Dropout(0.25)
        self.b = torch.nn.Linear(24, 3)

    def forward(self, x):
        return self.b(self.drop(torch.relu(self.a(x))))


def build(workers, persistent, own_generator):
    torch.manual_seed(0)
    random.seed(1)
    numpy.random.seed(2)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    sampler = baton.torch.ResumableSampler(SAMPLES, seed=7)
    extra = {"persistent_workers": persistent, "prefetch_factor": 2} if workers else {}
    loader = torch.utils.data.DataLoader(NoisyDataset(), batch_size=8, sampler=sampler, num_workers=workers,
                                         generator=torch.Generator() if own_generator else None, **extra)
    return model, optimizer, sampler, loader


def train(parts, chain, stop, restore, pass_loader):
    """Trains until iteration `stop`; returns (checkpointer, events), an event being (iteration, the
    batch's inputs and the loss, in hexadecimal)."""
    model, optimizer, sampler, loader = parts
    ckpt = baton.torch.Checkpointer(model, optimizer, None, loader if pass_loader else sampler,
                                    chain_dir=chain, interval=INTERVAL, keep=10)
    if restore:
        # The RNGs as a fresh process would have them: restore must bring back the saved ones.
        torch.manual_seed(987)
        random.seed(654)
        numpy.random.seed(321)
        assert ckpt.restore()
    events = []
    while ckpt.iteration < stop:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            events.append((ckpt.iteration, x.sum().item().hex(), loss.item().hex()))
            ckpt.wait()  # no checkpoint request is dropped: the cut restores a known iteration
            if ckpt.iteration >= stop:
                break
    return ckpt, events


class LoaderResumeTest(unittest.TestCase):
    def setUp(self):
        self._dir = tempfile.TemporaryDirectory(prefix="baton-loader-")

    def tearDown(self):
        self._dir.cleanup()

    def check(self, workers, persistent=False, pass_loader=False, own_generator=True):
        straight = f"{self._dir.name}/straight"
        cut = f"{self._dir.name}/cut"
        parts = build(workers, persistent, own_generator)
        ckpt, expected = train(parts, straight, STEPS, False, pass_loader)
        ckpt.close(final_checkpoint=False)
        expected_params = [p.detach().clone() for p in parts[0].parameters()]

        first = build(workers, persistent, own_generator)
        ckpt, before = train(first, cut, CUT, False, pass_loader)
        ckpt.close(final_checkpoint=False)  # killed: the newest checkpoint is iteration 20's
        del first
        second = build(workers, persistent, own_generator)
        ckpt, after = train(second, cut, STEPS, True, pass_loader)
        ckpt.close(final_checkpoint=False)
        resumed = [e for e in before if e[0] <= 20] + after
        self.assertEqual(len(resumed), STEPS)
        for want, got in zip(expected, resumed):
            self.assertEqual(want, got, f"iteration {want[0]}: the batch or the loss differs")
        for want, got in zip(expected_params, second[0].parameters()):
            self.assertTrue(torch.equal(want, got.detach()))

    def test_two_workers(self):
        self.check(2)

    def test_two_persistent_workers(self):
        self.check(2, persistent=True)

    def test_loader_passed_as_sampler(self):
        self.check(2, persistent=True, pass_loader=True)

    def test_global_rng_seed_draw(self):
        # Without a generator of its own the loader draws its workers' seed from torch's global RNG,
        # which dropout uses as well.
        self.check(2, own_generator=False)

    def test_no_workers(self):
        self.check(0, own_generator=False)

    def test_iterator_before_restore_is_refused(self):
        chain = f"{self._dir.name}/chain"
        parts = build(2, False, True)
        ckpt, _ = train(parts, chain, 10, False, False)
        ckpt.close(final_checkpoint=False)
        model, optimizer, sampler, loader = build(2, False, True)
        ckpt = baton.torch.Checkpointer(model, optimizer, None, sampler, chain_dir=chain, interval=INTERVAL)
        early = iter(loader)
        with self.assertRaisesRegex(baton.torch.RestoreError, "after restore"):
            ckpt.restore()
        del early
        ckpt.close(final_checkpoint=False)


if __name__ == "__main__":
    unittest.main()
