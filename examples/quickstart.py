"""Quick start: write a small chunked + gzip HDF5 classification set, then train on it.

Each sample is a 1-D signal of 128 steps: a sine wave whose frequency encodes its class (4
classes), plus noise. A small 1-D CNN learns it in a few epochs through ``H5LazyDataset`` with
two DataLoader workers.

Run: ``python examples/quickstart.py [--out DIR] [--samples 8000] [--epochs 3]``
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import h5py
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader
from tqdm import tqdm

from nn_handler.dataloaders import H5LazyDataset, h5_worker_init_fn

CLASSES = 4
STEPS = 128


def write_dataset(path: str, n: int, seed: int = 0) -> None:
    """Write ``signals`` (n, 1, 128) float32, gzip-chunked, and ``labels`` (n,) int64."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, size=n)
    t = np.linspace(0, 1, STEPS, dtype=np.float32)
    freq = (labels + 1) * 3.0
    phase = rng.uniform(0, 2 * np.pi, size=n)
    clean = np.sin(2 * np.pi * freq[:, None] * t[None, :] + phase[:, None])
    noisy = clean + rng.normal(0, 0.8, size=clean.shape)
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "train/signals",
            data=noisy[:, None, :].astype(np.float32),
            chunks=(256, 1, STEPS),
            compression="gzip",
            shuffle=True,
        )
        f.create_dataset("train/labels", data=labels.astype(np.int64), chunks=(4096,))


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv1d(1, 16, 7, padding=3),
        nn.ReLU(),
        nn.MaxPool1d(4),
        nn.Conv1d(16, 32, 5, padding=2),
        nn.ReLU(),
        nn.AdaptiveAvgPool1d(1),
        nn.Flatten(),
        nn.Linear(32, CLASSES),
    )


def run_epoch(model, loader, optimizer=None, desc=""):
    training = optimizer is not None
    model.train(training)
    loss_sum, correct, seen = 0.0, 0, 0
    start = time.perf_counter()
    with torch.set_grad_enabled(training):
        for x, y in tqdm(loader, desc=desc, leave=False, disable=None):
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            if training:
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            loss_sum += loss.item() * len(y)
            correct += int((out.argmax(1) == y).sum())
            seen += len(y)
    return loss_sum / seen, correct / seen, seen / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="directory for the HDF5 file (kept); default: a temp dir")
    parser.add_argument("--samples", type=int, default=8000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.out or tmp
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "quickstart.h5")
        write_dataset(path, args.samples)
        dataset = H5LazyDataset(path, "train/signals", "train/labels")
        print(dataset)
        split = int(0.8 * len(dataset))
        train = torch.utils.data.Subset(dataset, range(split))
        val = torch.utils.data.Subset(dataset, range(split, len(dataset)))
        common = {"num_workers": args.workers, "worker_init_fn": h5_worker_init_fn}
        if args.workers:
            common["persistent_workers"] = True
        train_loader = DataLoader(train, batch_size=128, shuffle=True, **common)
        val_loader = DataLoader(val, batch_size=512, **common)
        model = make_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        for epoch in range(args.epochs):
            loss, acc, rate = run_epoch(model, train_loader, optimizer, f"epoch {epoch}")
            val_loss, val_acc, _ = run_epoch(model, val_loader, desc="val")
            print(
                f"epoch {epoch}: train loss {loss:.3f} acc {acc:.3f} | val loss {val_loss:.3f} "
                f"acc {val_acc:.3f} | {rate:,.0f} samples/s"
            )
        print(
            f"\nvalidation accuracy {val_acc:.1%} (chance {1 / CLASSES:.0%}); data: {path}"
            + ("" if args.out else " (temporary, deleted on exit)")
        )


if __name__ == "__main__":
    main()
