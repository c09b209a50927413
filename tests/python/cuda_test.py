#!/usr/bin/python3
"""baton.torch with the model and optimizer in GPU memory: a run cut between two checkpoints and
restored into a freshly built model resumes bit for bit, with snapshots taken into pinned host memory
and into spare device memory, and with a real (enabled) GradScaler. The optimizer step that follows a
checkpoint request is queued on the same stream as the snapshot's copy: if it overtook the copy, the
checkpoint would hold the next iteration's weights and the resumed losses would differ.

Exit status: 0 passed, 1 failed, 77 skipped (torch missing or no usable CUDA device).
"""

import os
import sys
import tempfile
import unittest

try:
    import torch
    import torch.nn.functional
except ImportError as missing:
    print(f"skipped: {missing}", file=sys.stderr)
    sys.exit(77)
if not torch.cuda.is_available():
    print("skipped: PyTorch sees no usable CUDA device", file=sys.stderr)
    sys.exit(77)

import baton.torch

STEPS = 40
INTERVAL = 5
CUT = 33  # the interrupted run stops here and resumes from iteration 30
DEVICE = torch.device("cuda", 0)

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
torch.use_deterministic_algorithms(True)

_data = torch.Generator().manual_seed(5)
INPUTS = torch.randn(STEPS, 64, 256, generator=_data).to(DEVICE)
LABELS = torch.randint(0, 10, (STEPS, 64), generator=_data).to(DEVICE)


def build(with_scaler):
    torch.manual_seed(0)
    # Large enough that each weight's copy takes a while next to the step that follows it.
    model = torch.nn.Sequential(torch.nn.Linear(256, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048),
                                torch.nn.ReLU(), torch.nn.Linear(2048, 10)).to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.cuda.amp.GradScaler(init_scale=2.0 ** 10) if with_scaler else None
    return model, optimizer, scaler


def train(chain, stop, restore, on_device, with_scaler):
    model, optimizer, scaler = build(with_scaler)
    extra = {} if scaler is None else {"scaler": scaler}
    ckpt = baton.torch.Checkpointer(model, optimizer, chain_dir=chain, interval=INTERVAL, keep=10, **extra)
    ckpt.native.set_device_snapshot(on_device)
    restored = ckpt.restore() if restore else False
    losses = []
    while ckpt.iteration < stop:
        i = ckpt.iteration
        with torch.autocast("cuda", dtype=torch.float16, enabled=scaler is not None):
            loss = torch.nn.functional.cross_entropy(model(INPUTS[i]), LABELS[i])
        optimizer.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        losses.append((ckpt.iteration, loss.item().hex()))
        ckpt.wait()  # no request is dropped: the cut restores a known iteration
    weights = [p.detach().cpu() for p in model.parameters()]
    ckpt.close(final_checkpoint=False)
    return restored, losses, weights


class CudaResume(unittest.TestCase):
    def setUp(self):
        self._dir = tempfile.TemporaryDirectory(prefix="baton-cuda-test-")

    def tearDown(self):
        self._dir.cleanup()

    def check(self, on_device, with_scaler):
        _, expected, straight = train(os.path.join(self._dir.name, "straight"), STEPS, False, on_device,
                                      with_scaler)
        chain = os.path.join(self._dir.name, "cut")
        _, before, _ = train(chain, CUT, False, on_device, with_scaler)
        self.assertEqual(before, expected[:CUT])
        restored, after, resumed = train(chain, STEPS, True, on_device, with_scaler)
        self.assertTrue(restored)
        self.assertEqual(after, expected[30:])
        for a, b in zip(straight, resumed):
            self.assertTrue(torch.equal(a, b))

    def test_pinned_host_snapshot(self):
        self.check(on_device=False, with_scaler=False)

    def test_device_side_snapshot(self):
        self.check(on_device=True, with_scaler=False)

    def test_grad_scaler_on_the_gpu(self):
        self.check(on_device=False, with_scaler=True)


if __name__ == "__main__":
    unittest.main()
