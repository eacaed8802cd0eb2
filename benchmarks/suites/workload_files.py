"""The streaming workloads W1–W4 (and two codec layouts): their data, written as HDF5 files.

Each workload is one file laid out the way ``h5torch`` expects (``central`` + ``0/labels``), so
every contender reads the very same bytes. ``0/labels`` holds each row's own index: whatever a
loader serves, its labels say which rows it served, so the shuffle quality of every contender
(chunks per batch, neighbour correlation) is measured from what it really delivered.

| name | rows | row | dtype | layout |
|---|---:|---|---|---|
| W1 | 100k | 3×32×32 | float32 | contiguous |
| W2 | 100k | 3×32×32 | float32 | chunks of 64 rows, gzip-1 + byte-shuffle |
| W3 | 200k | 2000 | float32 (single-cell-like counts) | chunks of 256 rows, gzip-1 |
| W4 | 20k | 3×224×224 | uint8 images | one row per chunk, gzip-1 |
| W2-blosc-lz4 | 100k | 3×32×32 | float32 | chunks of 64 rows, blosc-lz4 (``hdf5plugin``) |
| W2-zstd | 100k | 3×32×32 | float32 | chunks of 64 rows, zstd (``hdf5plugin``) |

``scale`` multiplies the row counts (the files are 1.2–3 GB at scale 1).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

__all__ = ["WORKLOADS", "Workload", "write_workload"]

_WRITE_BYTES = 64 * 1024**2  # rows generated and written per step


@dataclass(frozen=True)
class Workload:
    """One benchmark layout: shape, dtype, chunking, filters and how its rows look."""

    name: str
    rows: int
    row_shape: tuple[int, ...]
    dtype: str
    chunk_rows: int | None
    filters: dict[str, Any] = field(default_factory=dict)
    kind: str = "images"  # "images" (smooth float32), "counts" (sparse), "photos" (uint8)
    plugin: str | None = None  # hdf5plugin class for the filter, e.g. "Zstd"

    @property
    def row_nbytes(self) -> int:
        """Bytes of one decoded row."""
        return math.prod(self.row_shape) * np.dtype(self.dtype).itemsize

    @property
    def compressed(self) -> bool:
        """True when the rows are stored through a filter."""
        return bool(self.filters) or self.plugin is not None

    def describe(self, n: int) -> str:
        """One line: rows × row shape, dtype, layout."""
        shape = "×".join(str(s) for s in self.row_shape)
        if self.chunk_rows is None:
            layout = "contiguous"
        else:
            layout = f"chunks of {self.chunk_rows} rows, {self.filter_text()}"
        return f"{n:,} × {shape} {self.dtype}, {layout}"

    def filter_text(self) -> str:
        """The filters in words."""
        if self.plugin is not None:
            return self.name.split("-", 1)[1]
        parts = []
        if "compression" in self.filters:
            parts.append(f"{self.filters['compression']}-{self.filters.get('compression_opts', 4)}")
        if self.filters.get("shuffle"):
            parts.append("shuffle")
        return " + ".join(parts) or "no filter"

    def dataset_kwargs(self, n: int) -> dict[str, Any]:
        """``create_dataset`` keywords for ``n`` rows of this layout."""
        kwargs: dict[str, Any] = dict(self.filters)
        if self.chunk_rows is not None:
            kwargs["chunks"] = (min(self.chunk_rows, max(n, 1)), *self.row_shape)
        if self.plugin is not None:
            plugins: Any = importlib.import_module("hdf5plugin")
            options = {"cname": "lz4", "clevel": 5} if self.plugin == "Blosc" else {"clevel": 3}
            kwargs.update(getattr(plugins, self.plugin)(**options))
        return kwargs

    def available(self) -> bool:
        """False when the layout needs ``hdf5plugin`` and it is not installed."""
        if self.plugin is None:
            return True
        try:
            importlib.import_module("hdf5plugin")
        except ImportError:
            return False
        return True


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("W1", 100_000, (3, 32, 32), "float32", None),
        Workload(
            "W2",
            100_000,
            (3, 32, 32),
            "float32",
            64,
            {"compression": "gzip", "compression_opts": 1, "shuffle": True},
        ),
        Workload(
            "W3",
            200_000,
            (2000,),
            "float32",
            256,
            {"compression": "gzip", "compression_opts": 1},
            kind="counts",
        ),
        Workload(
            "W4",
            20_000,
            (3, 224, 224),
            "uint8",
            1,
            {"compression": "gzip", "compression_opts": 1},
            kind="photos",
        ),
        Workload("W2-blosc-lz4", 100_000, (3, 32, 32), "float32", 64, plugin="Blosc"),
        Workload("W2-zstd", 100_000, (3, 32, 32), "float32", 64, plugin="Zstd"),
    )
}


def make_rows(workload: Workload, start: int, stop: int, seed: int = 0) -> np.ndarray[Any, Any]:
    """Rows ``[start, stop)`` of ``workload`` (deterministic per row block)."""
    rng = np.random.default_rng([seed, start])
    n = stop - start
    maker = _MAKERS[workload.kind]
    rows: np.ndarray[Any, Any] = maker(rng, n, workload.row_shape)
    return rows


def _images(rng: np.random.Generator, n: int, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    # smooth rows plus a little noise, 2 decimals: compresses like real images, not like noise
    c, h, w = shape
    base = rng.standard_normal((n, c, 1, w)).astype(np.float32)
    noise = rng.standard_normal((n, c, h, w)).astype(np.float32) * np.float32(0.05)
    out: np.ndarray[Any, Any] = np.round(np.repeat(base, h, axis=2) + noise, 2)
    return out


def _counts(rng: np.random.Generator, n: int, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    # single-cell-like: per-gene rates from a gamma, Poisson counts, mostly zeros
    genes = math.prod(shape)
    rates = np.random.default_rng(7).gamma(0.3, 1.0, size=genes).astype(np.float32)
    out: np.ndarray[Any, Any] = rng.poisson(rates, size=(n, genes)).astype(np.float32)
    return out.reshape(n, *shape)


def _photos(rng: np.random.Generator, n: int, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    # 8×8 blocks of a coarse picture, upsampled, plus noise of a few grey levels
    c, h, w = shape
    coarse = rng.integers(0, 256, size=(n, c, h // 8, w // 8), dtype=np.uint8)
    big = np.repeat(np.repeat(coarse, 8, axis=2), 8, axis=3).astype(np.int16)
    noise = rng.integers(-6, 7, size=big.shape, dtype=np.int16)
    out: np.ndarray[Any, Any] = np.clip(big + noise, 0, 255).astype(np.uint8)
    return out


_MAKERS: dict[str, Callable[[np.random.Generator, int, tuple[int, ...]], Any]] = {
    "images": _images,
    "counts": _counts,
    "photos": _photos,
}


def write_workload(path: str, workload: Workload, n: int) -> None:
    """Write ``n`` rows of ``workload`` as ``central`` and their indices as ``0/labels``."""
    step = max(1, _WRITE_BYTES // workload.row_nbytes)
    if workload.chunk_rows:
        step = max(workload.chunk_rows, step // workload.chunk_rows * workload.chunk_rows)
    shape = (n, *workload.row_shape)
    with h5py.File(path, "w") as f:
        dset = f.create_dataset(
            "central", shape=shape, dtype=workload.dtype, **workload.dataset_kwargs(n)
        )
        for start in range(0, n, step):
            stop = min(n, start + step)
            dset[start:stop] = make_rows(workload, start, stop)
        labels = f.create_dataset("0/labels", data=np.arange(n, dtype=np.int64))
        # h5torch's "N-D" objects: shape, mode, (saved, loaded) dtypes, rows filled
        for obj in (dset, labels):
            obj.attrs["shape"] = list(obj.shape)
            obj.attrs["mode"] = "N-D"
            obj.attrs["dtypes"] = [str(obj.dtype), str(obj.dtype)]
            obj.attrs["filled_to"] = obj.shape[0]
