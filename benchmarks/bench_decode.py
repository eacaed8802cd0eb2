"""Parallel decode before / after: the old reader path against the new one, in the same run.

"Before" is the reader as it was before parallel decode: batches read as h5py slabs of whole
chunks through HDF5's chunk cache, ranges with one h5py ``read_direct`` (the private
``_block_reader`` hook is switched off for it). "After" is the current reader: raw chunks decoded
in a thread pool, decoded chunks kept in an LRU. Both read the same gzip files in one process,
batches of 256: a full random order, ``ChunkShuffleSampler``'s order, and a whole-dataset
``read_range`` (what a preload into RAM runs).

Run: ``python benchmarks/bench_decode.py [--n 100000] [--seconds 10]``
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Iterable
from typing import Any

import nn_handler._io.rows.reader as reader_module
from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler.bench import machine_line, make_images, suite_layouts, write_layout_file
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    EpochShuffleSampler,
    H5LazyDataset,
    batched_loader,
)

LAYOUTS = ["chunked-64+gzip", "chunked-64+gzip+shuffle"]
NEW_PATH = reader_module._block_reader


def loader_rate(loader: Iterable[Any], budget: float) -> float:
    it = iter(loader)
    next(it)  # untimed: the first batch opens the file and starts the pool
    samples, start = 0, time.perf_counter()
    for x, _ in it:
        samples += len(x)
        if time.perf_counter() - start > budget:
            break
    return samples / (time.perf_counter() - start)


def range_rate(path: str, n: int) -> float:
    source = H5Source(path, FileOptions())
    reader = reader_module.RowReader(source, "central")
    start = time.perf_counter()
    for lo in range(0, n, 1024):
        reader.read_range(lo, min(n, lo + 1024))
    seconds = time.perf_counter() - start
    source.close()
    return n / seconds


def measure(path: str, n: int, budget: float, new: bool) -> dict[str, float]:
    reader_module._block_reader = NEW_PATH if new else (lambda dset, source, layout: None)
    try:
        ds = H5LazyDataset(path, "central", "0/labels")
        rates = {
            "random": loader_rate(batched_loader(ds, 256, sampler=EpochShuffleSampler(n)), budget),
            "chunk": loader_rate(batched_loader(ds, 256, sampler=ChunkShuffleSampler(ds)), budget),
        }
        ds.close()
        rates["range"] = range_rate(path, n)
        return rates
    finally:
        reader_module._block_reader = NEW_PATH


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    print(f"# Parallel decode: before / after\n\n{machine_line()}\n")
    images, labels = make_images(args.n)
    rows = {
        "random": "batched, EpochShuffleSampler (full random)",
        "chunk": "batched, ChunkShuffleSampler",
        "range": "read_range of the whole dataset (preload)",
    }
    with tempfile.TemporaryDirectory() as tmp:
        for layout in LAYOUTS:
            path = os.path.join(tmp, f"{layout}.h5")
            write_layout_file(path, images, labels, suite_layouts()[layout])
            os.sync()
            before = measure(path, args.n, args.seconds, new=False)
            after = measure(path, args.n, args.seconds, new=True)
            print(f"\n## {layout} (n={args.n})\n")
            print("| read | before | after | after / before |\n|---|---:|---:|---:|")
            for key, label in rows.items():
                ratio = after[key] / before[key]
                print(f"| {label} | {before[key]:,.0f} | {after[key]:,.0f} | {ratio:.1f}× |")
            os.remove(path)


if __name__ == "__main__":
    main()
