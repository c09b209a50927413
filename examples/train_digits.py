#!/usr/bin/python3
"""Trains a small CNN on the handwritten digits that scikit-learn installs, checkpointed by baton.

Deterministic on the CPU: a run that is killed and restarted (any number of times) ends with the same
parameters, optimizer state and loss curve, bit for bit, as a run straight through.

    train_digits.py --chain-dir /tmp/digits --steps 600 --loss-log /tmp/digits/loss.log

Under Slurm with the baton SPANK plugin (`sbatch --baton=digits`) the chain directory, deadline and
overhead target come from the environment: no arguments are needed.
"""

import argparse
import os
import random
import sys

import numpy
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import baton.torch


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=600, help="optimizer steps to train (default 600)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--chain-dir", help="chain directory (default: BATON_CHAIN_DIR)")
    parser.add_argument("--checkpoint-every", type=int, metavar="K",
                        help="checkpoint every K steps (default: the interval the checkpointer's policy picks)")
    parser.add_argument("--loss-log", help="append 'step loss' per step to this file; a resumed run continues it "
                        "(default: loss.log in the chain directory)")
    parser.add_argument("--final-state", help="torch.save the final model, optimizer and scheduler state here")
    parser.add_argument("--no-checkpoint", action="store_true", help="train without checkpointing")
    return parser.parse_args(argv)


def make_deterministic(seed):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # reductions split over threads may round differently
    torch.manual_seed(seed)
    numpy.random.seed(seed)
    random.seed(seed)


def load_data(seed):
    """8x8 digit images scaled to [0, 1], split 80/20 by a fixed permutation."""
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    cut = len(labels) * 4 // 5
    train, test = order[:cut], order[cut:]
    return TensorDataset(images[train], labels[train]), (images[test], labels[test])


class DigitsNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.norm = nn.BatchNorm2d(32)  # buffers (running statistics) are state too
        self.dropout = nn.Dropout(0.25)  # consumes the torch RNG: its state must be restored
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.norm(self.conv2(x))), 2)
        x = self.dropout(torch.flatten(x, 1))
        return self.fc2(F.relu(self.fc1(x)))


class LossLog:
    """One line per step, 'step loss' with the loss in hexadecimal (exact). A resumed run first cuts
    the file back to the length it had when the restored checkpoint was taken: later lines belong to
    steps that are now computed again."""

    def __init__(self, path, length):
        self.path = path
        self.file = open(path, "ab") if path else None
        if self.file:
            self.file.truncate(length)
            self.file.seek(length)

    def append(self, step, loss):
        if not self.file:
            return 0
        self.file.write(f"{step} {loss.hex()}\n".encode())
        self.file.flush()  # in the kernel before the checkpoint that counts it: a kill -9 cannot lose it
        return self.file.tell()

    def close(self):
        if self.file:
            self.file.close()


def evaluate(model, images, labels):
    model.eval()
    with torch.no_grad():
        accuracy = (model(images).argmax(1) == labels).float().mean().item()
    model.train()
    return accuracy


def train(args):
    make_deterministic(args.seed)
    train_set, (test_images, test_labels) = load_data(args.seed)
    model = DigitsNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=200, gamma=0.5)
    sampler = baton.torch.ResumableSampler(len(train_set), seed=args.seed)
    # The loader gets its own generator: creating an iterator draws a seed from it, and drawing from
    # the global one would shift the RNG state that a checkpoint records.
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler,
                        generator=torch.Generator().manual_seed(args.seed))

    ckpt = None
    if not args.no_checkpoint:
        ckpt = baton.torch.Checkpointer(model, optimizer, scheduler, sampler, chain_dir=args.chain_dir,
                                        interval=args.checkpoint_every)
        if ckpt.restore():
            print(f"resumed from step {ckpt.iteration} ({ckpt.restored_from})", flush=True)
        if ckpt.handover_wait_seconds > 0:
            print(f"waited {ckpt.handover_wait_seconds:.1f} s for the previous job's final checkpoint", flush=True)
    step = ckpt.iteration if ckpt else 0
    loss_log = args.loss_log or (os.path.join(ckpt.chain_dir, "loss.log") if ckpt else None)
    log = LossLog(loss_log, ckpt.state.get("loss_log_bytes", 0) if ckpt else 0)

    model.train()
    while step < args.steps and not (ckpt and ckpt.should_exit):
        for images, labels in loader:
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            logged = log.append(step + 1, loss.item())
            if ckpt:
                ckpt.state["loss_log_bytes"] = logged
            optimizer.step()
            scheduler.step()
            step += 1
            if step % 100 == 0:
                print(f"step {step} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e}", flush=True)
            if step >= args.steps or (ckpt and ckpt.should_exit):
                break

    if ckpt and step >= args.steps:
        ckpt.done()  # the final checkpoint says training_done: the provisioner ends the chain
    committed = ckpt is not None and ckpt.close()
    if ckpt and not committed:
        print(f"final checkpoint failed: {ckpt.native.last_error}", file=sys.stderr)
    log.close()
    print(f"step {step} test accuracy {evaluate(model, test_images, test_labels):.4f}", flush=True)
    if args.final_state:
        torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict()}, args.final_state)
    if step < args.steps and committed:
        print(f"stopped at step {step}: the final checkpoint of this job has committed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(train(parse_args(sys.argv[1:])))
