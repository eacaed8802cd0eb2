"""NNHandler's training loop against the loop users write by hand, on the same data and model.

N samples of 3×32×32 float32 (contiguous HDF5), a small CNN, batches of 256, one process,
``num_workers=0``, one torch thread. Each contender trains one untimed warm-up epoch, then
``--epochs`` timed epochs, the contenders taking turns epoch by epoch (samples/s over the
timed epochs):

* hand loop + DataLoader: ``DataLoader(H5LazyDataset, batch_size=256, shuffle=True)`` and the
  textbook loop (zero_grad, forward, loss, backward, step, ``loss.item()`` per step): the
  baseline;
* hand loop + batched_loader: the same loop on ``batched_loader`` (isolates the loader);
* NNHandler: ``set_train_loader(dataset, batch_size=256)`` + ``train()`` (picks the batched
  path, keeps loss sums on the device, calls ``set_epoch``, records metrics);
* limit: the hand loop on batches sliced from a tensor already in RAM (no loading at all).

Run: ``python benchmarks/bench_handler.py [--n 20000] [--epochs 2]``
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from nn_handler import NNHandler
from nn_handler.bench import Result, machine_line, print_table, write_images
from nn_handler.dataloaders import H5LazyDataset, batched_loader

BATCH = 256
SAMPLE_BYTES = 3 * 32 * 32 * 4


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
            nn.Linear(128, 10),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def hand_loop(batches: Callable[[int], Iterable[Any]]) -> Callable[[int], int]:
    """One epoch of the textbook loop per call; returns the samples trained."""
    torch.manual_seed(0)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def epoch(index: int) -> int:
        count, loss_sum = 0, 0.0
        for x, y in batches(index):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(y)
            count += len(y)
        return count

    return epoch


def handler_loop(dataset: H5LazyDataset) -> Callable[[int], int]:
    """One epoch of ``NNHandler.train`` per call."""
    torch.manual_seed(0)
    handler = NNHandler(SmallCNN, progress=False, log_fn=None)
    handler.set_train_loader(dataset, batch_size=BATCH)
    handler.set_optimizer(torch.optim.SGD, lr=0.01)
    handler.set_loss_fn(nn.CrossEntropyLoss())

    def epoch(index: int) -> int:
        handler.train(index + 1)
        return len(dataset)

    return epoch


def in_ram(x: torch.Tensor, y: torch.Tensor) -> Callable[[int], Iterable[Any]]:
    def batches(index: int) -> Iterable[Any]:
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(index))
        return ((x.index_select(0, i), y.index_select(0, i)) for i in order.split(BATCH))

    return batches


def interleaved(contenders: dict[str, Callable[[int], int]], rounds: int) -> list[Result]:
    """Round 0 warms up; then every round times one epoch of each contender in turn, so
    load from other processes on a shared machine hits all of them alike."""
    totals = {name: [0, 0.0] for name in contenders}
    for index in range(rounds + 1):
        for name, epoch in contenders.items():
            start = time.perf_counter()
            samples = epoch(index)
            if index:
                totals[name][0] += samples
                totals[name][1] += time.perf_counter() - start
    return [Result(name, int(n), float(s), SAMPLE_BYTES) for name, (n, s) in totals.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(machine_line())
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "images.h5")
        images = write_images(path, args.n, ["contiguous"])
        os.sync()
        dataset = H5LazyDataset(path, "contiguous", "labels")
        plain = DataLoader(dataset, batch_size=BATCH, shuffle=True)
        fast = batched_loader(dataset, BATCH, shuffle=True)
        x, y = torch.from_numpy(images), torch.from_numpy(dataset[:][1].numpy())
        rows = interleaved(
            {
                "hand loop + DataLoader": hand_loop(lambda _: plain),
                "hand loop + batched_loader": hand_loop(lambda _: fast),
                "NNHandler": handler_loop(dataset),
                "limit: hand loop on in-RAM tensors": hand_loop(in_ram(x, y)),
            },
            args.epochs,
        )
    print_table(
        f"training, {args.n} samples of 3×32×32 float32, batch {BATCH}, 1 thread",
        rows,
        {
            "NNHandler / hand loop + DataLoader": ("NNHandler", "hand loop + DataLoader"),
            "NNHandler / hand loop + batched_loader": (
                "NNHandler",
                "hand loop + batched_loader",
            ),
            "NNHandler / in-RAM limit": ("NNHandler", "limit: hand loop on in-RAM tensors"),
        },
    )


if __name__ == "__main__":
    main()
