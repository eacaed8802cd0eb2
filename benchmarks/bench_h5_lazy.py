"""H5LazyDataset against a naive per-sample h5py Dataset and the in-RAM gather limit.

Builds N samples of 3×32×32 float32 in three layouts (contiguous; chunked 64 rows; chunked 64
rows + gzip) in a temporary directory, then times one shuffled pass in batches of 256 through a
DataLoader with ``num_workers=0``:

* naive: a per-sample Dataset written here, opening the file lazily and keeping its
  ``h5py.Dataset`` (the best simple thing a user would write): the baseline;
* lazy per-sample: ``H5LazyDataset`` with ``__getitems__`` disabled;
* lazy __getitems__: ``DataLoader(ds, batch_size=256)`` (batch read, then torch's collate);
* lazy batched_loader: ``batched_loader(ds, 256)`` (batch read, no per-sample split/stack);
* limit: NumPy gather of the same rows from RAM; and, to show what torch's collate costs,
  ``collate ceiling``: an in-RAM dataset with ``__getitems__`` through the same DataLoader.

Run: ``python benchmarks/bench_h5_lazy.py [--n 100000] [--seconds 20]``
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from nn_handler.bench import (
    LAYOUTS,
    NaiveH5Dataset,
    Result,
    batch_len,
    machine_line,
    print_table,
    shuffled_batches,
    timed_pass,
    write_images,
)
from nn_handler.dataloaders import H5LazyDataset, batched_loader

BATCH = 256


class InRamDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Rows already in RAM, with ``__getitems__``: what torch's collate alone allows."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.from_numpy(self.x[i]), torch.as_tensor(self.y[i])

    def __getitems__(self, idx: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        rows = np.asarray(idx)
        xs = torch.from_numpy(self.x[rows]).unbind(0)
        ys = torch.from_numpy(self.y[rows]).unbind(0)
        return list(zip(xs, ys, strict=True))


def _loader(ds: Dataset[Any], seed: int = 0) -> DataLoader[Any]:
    g = torch.Generator().manual_seed(seed)
    return DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=0, generator=g)


def run_layout(path: str, layout: str, images: np.ndarray, labels: np.ndarray, budget: float):
    sample_bytes = images[0].nbytes
    rows: list[Result] = []
    n = len(images)

    def gather() -> Any:
        for b in shuffled_batches(n, BATCH):
            yield torch.from_numpy(images[b]), torch.from_numpy(labels[b])

    for _ in gather():  # untimed pass: the first touch of a freshly built array runs ~2x slower
        pass
    rows.append(timed_pass("limit: numpy gather in RAM", gather(), sample_bytes, budget, batch_len))
    ram = InRamDataset(images, labels)
    rows.append(
        timed_pass(
            "collate ceiling: in-RAM __getitems__", _loader(ram), sample_bytes, budget, batch_len
        )
    )
    naive = NaiveH5Dataset(path, layout, "labels")
    rows.append(
        timed_pass("naive per-sample h5py", _loader(naive), sample_bytes, budget, batch_len)
    )
    naive.close()
    per_sample = H5LazyDataset(path, layout, "labels")
    per_sample.__getitems__ = None  # type: ignore[method-assign,assignment]  # DataLoader honours it
    rows.append(
        timed_pass("H5LazyDataset per-sample", _loader(per_sample), sample_bytes, budget, batch_len)
    )
    per_sample.close()
    ds = H5LazyDataset(path, layout, "labels")
    rows.append(
        timed_pass("H5LazyDataset __getitems__", _loader(ds), sample_bytes, budget, batch_len)
    )
    g = torch.Generator().manual_seed(0)
    fast = batched_loader(ds, BATCH, shuffle=True, generator=g)
    rows.append(timed_pass("H5LazyDataset batched_loader", fast, sample_bytes, budget, batch_len))
    ds.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="samples per layout")
    parser.add_argument("--seconds", type=float, default=20.0, help="time budget per contender")
    args = parser.parse_args()
    print(f"# H5LazyDataset benchmark\n\n{machine_line()}\n")
    print(
        f"N={args.n} samples of 3x32x32 float32, batch {BATCH}, shuffled, num_workers=0, "
        f"budget {args.seconds:.0f}s per contender (rates measured over what ran)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.h5")
        images = write_images(path, args.n, LAYOUTS)
        os.sync()  # let the kernel finish writing back the new file before anything is timed
        with h5py.File(path, "r") as f:
            labels = f["labels"][:]
        for layout in LAYOUTS:
            rows = run_layout(path, layout, images, labels, args.seconds)
            print_table(
                layout,
                rows,
                {
                    "getitems / naive": ("H5LazyDataset __getitems__", "naive per-sample h5py"),
                    "batched_loader / naive": (
                        "H5LazyDataset batched_loader",
                        "naive per-sample h5py",
                    ),
                    "batched_loader / limit": (
                        "H5LazyDataset batched_loader",
                        "limit: numpy gather in RAM",
                    ),
                    "getitems / collate ceiling": (
                        "H5LazyDataset __getitems__",
                        "collate ceiling: in-RAM __getitems__",
                    ),
                },
            )


if __name__ == "__main__":
    main()
