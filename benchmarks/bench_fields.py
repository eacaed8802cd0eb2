"""One field of a compound (table) dataset, read for random batches: ways compared.

Writes a table of ``--n`` records (``id`` int64, ``pixels`` float32 (16,), ``label`` int32,
``w`` float64: 84 bytes, the shape of a pandas / PyTables table with a few columns) in two
layouts (contiguous; chunked 1024 rows + gzip), then reads the ``pixels`` field for shuffled
batches of 256 rows, each way the same rows:

* naive: one ``dset.fields(["pixels"])[i]`` call per sample (what a per-sample Dataset does);
* h5py fields: ``dset.fields(["pixels"])[sorted unique rows]``, one call per batch, then the
  rows put back in request order (h5py's own field selection, done as well as it can be);
* FieldReader: ``H5LazyDataset(path, "table:pixels")`` batch read (whole records through the
  ``RowReader`` strategy — memory-mapped gather or whole-chunk decodes — then one NumPy copy of
  the field);
* limit: NumPy gather of the same rows from the field already in RAM.

Each row is the median of ``--repeats`` timed passes of ``--batches`` batches (first batch of
each pass untimed); ratios are against naive, measured in the same run.

Run: ``python benchmarks/bench_fields.py [--n 200000] [--batches 40] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from nn_handler.dataloaders import H5LazyDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks package

from benchmarks.harness import median

BATCH = 256
DTYPE = np.dtype([("id", "<i8"), ("pixels", "<f4", (16,)), ("label", "<i4"), ("w", "<f8")])


def write(path: str, n: int) -> None:
    rng = np.random.default_rng(0)
    rows = np.zeros(n, DTYPE)
    rows["id"] = np.arange(n)
    rows["pixels"] = rng.standard_normal((n, 16)).astype(np.float32)
    rows["label"] = np.arange(n) % 10
    with h5py.File(path, "w") as f:
        f["contiguous"] = rows
        f.create_dataset("gzip", data=rows, chunks=(1024,), compression="gzip", shuffle=True)


def per_batch(
    batches: list[np.ndarray[Any, Any]], fn: Callable[[np.ndarray[Any, Any]], Any]
) -> float:
    fn(batches[0])
    start = time.perf_counter()
    for idx in batches[1:]:
        fn(idx)
    return (len(batches) - 1) * BATCH / (time.perf_counter() - start)


def h5py_fields(dset: h5py.Dataset) -> Callable[[np.ndarray[Any, Any]], Any]:
    view = dset.fields(["pixels"])

    def read(idx: np.ndarray[Any, Any]) -> Any:
        uniq, inverse = np.unique(idx, return_inverse=True)
        return view[uniq]["pixels"][inverse]

    return read


def naive(dset: h5py.Dataset) -> Callable[[np.ndarray[Any, Any]], Any]:
    view = dset.fields(["pixels"])
    return lambda idx: [view[int(i)] for i in idx]


def contenders(path: str, key: str) -> dict[str, Callable[[np.ndarray[Any, Any]], Any]]:
    f = h5py.File(path, "r")
    dset = f[key]
    in_ram = dset.fields(["pixels"])[:]["pixels"]
    ds = H5LazyDataset(path, f"{key}:pixels", swmr=False)
    return {
        "naive (per-sample dset.fields)": naive(dset),
        "h5py dset.fields, sorted batch": h5py_fields(dset),
        "H5LazyDataset 'table:pixels' batch": lambda idx: ds[idx],
        "limit: NumPy gather from RAM": lambda idx: in_ram[idx],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "table.h5")
        write(path, args.n)
        for key in ("contiguous", "gzip"):
            print(f"\n{key}: {args.n} records of {DTYPE.itemsize} B, field 'pixels' (16 float32)")
            print("| way | samples/s (median) | vs naive |\n|---|---:|---:|")
            rates: dict[str, float] = {}
            for name, fn in contenders(path, key).items():
                runs = []
                for _ in range(args.repeats):
                    batches = [rng.integers(0, args.n, BATCH) for _ in range(args.batches)]
                    runs.append(per_batch(batches, fn))
                rates[name] = median(runs)
            base = next(iter(rates.values()))
            for name, rate in rates.items():
                print(f"| {name} | {rate:,.0f} | {rate / base:.1f} |")


if __name__ == "__main__":
    main()
