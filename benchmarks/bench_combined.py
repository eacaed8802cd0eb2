"""CombinedHDF5Dataset against a per-sample loop over h5py handles, with and without filters.

Writes ``--files`` files of ``--n`` samples each (fetal heart-rate windows: ``fhr_st`` of
2×240 float32, one-hot ``target`` of 3 classes, ``weight``, ``guid``, ``cs_label``,
``bg_label``, ``epoch``) in a temporary directory, then times one shuffled pass in batches of 256
with ``num_workers=0``, once over every sample and once with filters (``cs_label=True``,
``10 <= epoch <= 90``, ``label=1``). Each contender runs shuffled epochs back to back until its
time budget is used (the first batches untimed):

* naive: a per-sample Dataset written here, the baseline. It opens each file lazily, keeps its
  ``h5py.Dataset`` objects, builds its index with NumPy masks over the metadata columns, and
  reads one sample with one h5py call per field; ``DataLoader(batch_size=256)`` collates;
* ``CombinedHDF5Dataset`` through ``DataLoader(batch_size=256)`` (``__getitems__`` + collate),
  through ``batched_loader`` (stacked batches), and through ``batched_loader`` with the default
  1000-sample cache (a shuffled pass hits it rarely: this row shows its bookkeeping cost);
* limit: NumPy gather of the same fields and rows from RAM.

Index construction (filters evaluated once) is timed separately for both.

Run: ``python benchmarks/bench_combined.py [--files 20] [--n 5000] [--seconds 10]``
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from nn_handler.bench import Result, machine_line, print_table, shuffled_batches, timed_pass
from nn_handler.dataloaders import CombinedHDF5Dataset, batched_loader

BATCH = 256
FIELDS = ["fhr_st", "target", "weight", "guid", "cs_label", "bg_label", "epoch"]
FILTERS: dict[str, Any] = {"cs_label": True, "epoch_min": 10.0, "epoch_max": 90.0, "label": 1}
LAYOUTS: dict[str, dict[str, Any]] = {
    "contiguous": {},
    "chunked-64": {"chunks": 64},
    "chunked-64+gzip": {"chunks": 64, "compression": "gzip"},
}


def write_files(folder: str, files: int, n: int, layout: str) -> list[str]:
    paths = []
    for k in range(files):
        rng = np.random.default_rng(k)
        t = np.linspace(0, 8 * np.pi, 240, dtype=np.float32)
        base = 140 + 10 * np.sin(t[None, None, :] + rng.uniform(0, 6, (n, 2, 1)))
        data = {
            "fhr_st": np.round(base + rng.standard_normal((n, 2, 240)), 1).astype(np.float32),
            "target": np.eye(3, dtype=np.float32)[rng.integers(0, 3, n)],
            "weight": rng.random(n).astype(np.float32),
            "guid": np.array([f"patient-{k:03d}-{i // 50:04d}".encode() for i in range(n)]),
            "cs_label": rng.random(n) < 0.5,
            "bg_label": rng.random(n) < 0.1,
            "epoch": np.round(rng.uniform(0, 100, n), 2),
        }
        path = os.path.join(folder, f"rec{k:03d}.h5")
        with h5py.File(path, "w") as f:
            for name, values in data.items():
                kw = dict(LAYOUTS[layout])
                if "chunks" in kw:
                    kw["chunks"] = (kw["chunks"], *values.shape[1:])
                f.create_dataset(name, data=values, **kw)
        paths.append(path)
    return paths


class NaiveCombined(Dataset[dict[str, Any]]):
    """What a user writes first: NumPy index, lazily opened files, one h5py call per field."""

    def __init__(self, paths: list[str], filters: dict[str, Any] | None) -> None:
        self.paths = paths
        files, rows = [], []
        for k, path in enumerate(paths):
            with h5py.File(path, "r") as f:
                keep = np.ones(len(f["epoch"]), dtype=bool)
                if filters:
                    keep &= f["cs_label"][:] == filters["cs_label"]
                    epoch = f["epoch"][:]
                    keep &= (epoch >= filters["epoch_min"]) & (epoch <= filters["epoch_max"])
                    keep &= f["target"][:, filters["label"]] > 0
            found = np.flatnonzero(keep)
            files.append(np.full(found.size, k))
            rows.append(found)
        self.file_of, self.row_of = np.concatenate(files), np.concatenate(rows)
        self._dsets: dict[int, dict[str, Any]] = {}

    def __len__(self) -> int:
        return int(self.file_of.size)

    def __getitem__(self, i: int) -> dict[str, Any]:
        k, row = int(self.file_of[i]), int(self.row_of[i])
        dsets = self._dsets.get(k)
        if dsets is None:
            f = h5py.File(self.paths[k], "r")
            dsets = self._dsets[k] = {name: f[name] for name in FIELDS}
        sample = {name: torch.as_tensor(dsets[name][row]) for name in FIELDS if name != "guid"}
        sample["guid"] = dsets["guid"][row].decode()
        return sample

    def close(self) -> None:
        for dsets in self._dsets.values():
            next(iter(dsets.values())).file.close()
        self._dsets = {}


def _count(batch: dict[str, Any]) -> int:
    return int(batch["weight"].shape[0])


def _loader(ds: Dataset[Any]) -> DataLoader[Any]:
    g = torch.Generator().manual_seed(0)
    return DataLoader(ds, batch_size=BATCH, shuffle=True, generator=g)


def _in_ram(paths: list[str], ds: CombinedHDF5Dataset) -> dict[str, np.ndarray]:
    """The kept samples of every field, in the dataset's order, in RAM."""
    whole = {}
    for name in FIELDS:
        parts = []
        for path in paths:
            with h5py.File(path, "r") as f:
                parts.append(f[name][:])
        whole[name] = np.concatenate(parts)
    starts = dict(zip(paths, np.cumsum([0, *_lengths(paths)[:-1]]), strict=True))
    flat = np.array([starts[p] + r for p, r in (ds.locate(i) for i in range(len(ds)))])
    return {name: values[flat] for name, values in whole.items()}


def _lengths(paths: list[str]) -> list[int]:
    out = []
    for path in paths:
        with h5py.File(path, "r") as f:
            out.append(len(f["epoch"]))
    return out


def _repeat(make: Callable[[int], Iterable[Any]]) -> Iterator[Any]:
    """Epoch after epoch (each shuffled anew) until the caller stops: budgets, not pass lengths."""
    for epoch in itertools.count():
        yield from make(epoch)


def _gather(ram: dict[str, np.ndarray], n: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    for b in shuffled_batches(n, BATCH, seed):
        batch: dict[str, Any] = {
            name: torch.from_numpy(ram[name][b]) for name in FIELDS if name != "guid"
        }
        batch["guid"] = np.char.decode(ram["guid"][b]).tolist()
        yield batch


def run(paths: list[str], filters: dict[str, Any] | None, budget: float) -> list[Result]:
    kw = filters or {}
    start = time.perf_counter()
    naive = NaiveCombined(paths, filters)
    naive_index_s = time.perf_counter() - start
    start = time.perf_counter()
    ds = CombinedHDF5Dataset(paths, load_fields=FIELDS, cache_size=0, pin_memory=False, **kw)
    combined_index_s = time.perf_counter() - start
    assert len(ds) == len(naive), (len(ds), len(naive))
    print(
        f"\n{len(ds)} samples kept of {ds.get_stats()['samples_scanned']}; index built in "
        f"{naive_index_s:.2f} s (naive NumPy masks) vs {combined_index_s:.2f} s "
        f"(CombinedHDF5Dataset)"
    )
    sample_bytes = sum(
        int(np.prod(v.shape[1:] or (1,))) * v.element_size() if isinstance(v, torch.Tensor) else 0
        for v in ds[[0]].values()
    )
    ram = _in_ram(paths, ds)
    for _ in _gather(ram, len(ds)):  # untimed: first touch of fresh arrays runs slower
        pass
    n = len(ds)

    def timed(name: str, make: Callable[[int], Iterable[Any]]) -> Result:
        return timed_pass(name, _repeat(make), sample_bytes, budget, _count)

    rows = [timed("limit: numpy gather in RAM", lambda e: _gather(ram, n, e))]
    loader = _loader(naive)
    rows.append(timed("naive per-sample h5py", lambda e: loader))
    naive.close()
    plain = _loader(ds)
    rows.append(timed("Combined __getitems__", lambda e: plain))
    g = torch.Generator().manual_seed(0)
    fast = batched_loader(ds, BATCH, shuffle=True, generator=g)
    rows.append(timed("Combined batched_loader", lambda e: fast))
    cached = CombinedHDF5Dataset(paths, load_fields=FIELDS, pin_memory=False, **kw)
    g = torch.Generator().manual_seed(0)
    with_cache = batched_loader(cached, BATCH, shuffle=True, generator=g)
    rows.append(timed("Combined batched_loader + cache 1000", lambda e: with_cache))
    ds.close()
    cached.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20, help="number of files")
    parser.add_argument("--n", type=int, default=5000, help="samples per file")
    parser.add_argument("--seconds", type=float, default=10.0, help="time budget per contender")
    parser.add_argument("--layout", choices=list(LAYOUTS), default="contiguous")
    args = parser.parse_args()
    print(f"# CombinedHDF5Dataset benchmark\n\n{machine_line()}\n")
    print(
        f"{args.files} files x {args.n} samples ({args.layout}), fields {FIELDS}, batch {BATCH}, "
        f"shuffled, num_workers=0, budget {args.seconds:.0f}s per contender"
    )
    ratios = {
        "batched_loader / naive": ("Combined batched_loader", "naive per-sample h5py"),
        "__getitems__ / naive": ("Combined __getitems__", "naive per-sample h5py"),
        "batched_loader + cache / naive": (
            "Combined batched_loader + cache 1000",
            "naive per-sample h5py",
        ),
        "batched_loader / limit": ("Combined batched_loader", "limit: numpy gather in RAM"),
    }
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_files(tmp, args.files, args.n, args.layout)
        os.sync()  # let the kernel finish writing back the new files before anything is timed
        for title, filters in (("all samples", None), ("filtered", FILTERS)):
            print_table(f"{args.layout}, {title}", run(paths, filters, args.seconds), ratios)


if __name__ == "__main__":
    main()
