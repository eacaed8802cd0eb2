"""Synthetic benchmark data: 3×32×32 float32 images that compress like real ones, in layouts.

``write_images`` is the original helper (one file, one dataset per layout, keys = layout
names). The suite writes one file per layout instead (``write_layout_file``), laid out the way
``h5torch`` expects (``central`` + ``0/labels`` with its attributes), so every contender reads
the very same bytes.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

import h5py
import numpy as np

__all__ = ["LAYOUTS", "make_images", "suite_layouts", "write_images", "write_layout_file"]

# The layouts of the original scripts (benchmarks/bench_h5_lazy.py): keep their names and meaning.
LAYOUTS: dict[str, dict[str, Any]] = {
    "contiguous": {},
    "chunked-64": {"chunks": True},
    "chunked-64+gzip": {"chunks": True, "compression": "gzip"},
}


def suite_layouts() -> dict[str, dict[str, Any]]:
    """The suite's layouts: ``LAYOUTS``, gzip + shuffle, and blosc / zstd with hdf5plugin."""
    layouts = dict(LAYOUTS)
    layouts["chunked-64+gzip+shuffle"] = {"chunks": True, "compression": "gzip", "shuffle": True}
    try:
        plugins: Any = importlib.import_module("hdf5plugin")
    except ImportError:
        return layouts
    layouts["chunked-64+blosc-lz4"] = {"chunks": True, **plugins.Blosc(cname="lz4", clevel=5)}
    layouts["chunked-64+zstd"] = {"chunks": True, **plugins.Zstd(clevel=3)}
    return layouts


def make_images(n: int, seed: int = 0) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``n`` float32 images of 3×32×32 (smooth rows plus noise, 2 decimals) and int64 labels."""
    rng = np.random.default_rng(seed)
    # smooth-ish images compress like real data (white noise would not compress at all)
    base = rng.standard_normal((n, 3, 1, 32)).astype(np.float32)
    noise = rng.standard_normal((n, 3, 32, 32)).astype(np.float32) * np.float32(0.05)
    images = np.round(np.repeat(base, 32, axis=2) + noise, 2)
    return images, rng.integers(0, 10, size=n)


def _dataset_kwargs(layout: dict[str, Any], shape: tuple[int, ...], chunk_rows: int) -> Any:
    kw = dict(layout)
    if kw.pop("chunks", False):
        kw["chunks"] = (chunk_rows, *shape[1:])
    return kw


def write_images(
    path: str, n: int, layouts: Iterable[str], chunk_rows: int = 64
) -> np.ndarray[Any, Any]:
    """Write ``n`` float32 images of 3×32×32 in each layout (keys = layout names) + labels."""
    images, labels = make_images(n)
    known = suite_layouts()
    with h5py.File(path, "w") as f:
        f["labels"] = labels
        for name in layouts:
            f.create_dataset(
                name, data=images, **_dataset_kwargs(known[name], images.shape, chunk_rows)
            )
    return images


def write_layout_file(
    path: str,
    images: np.ndarray[Any, Any],
    labels: np.ndarray[Any, Any],
    layout: dict[str, Any],
    chunk_rows: int = 64,
) -> None:
    """Write ``central`` (images in ``layout``) and ``0/labels``, readable by h5torch too."""
    with h5py.File(path, "w") as f:
        kwargs = _dataset_kwargs(layout, images.shape, chunk_rows)
        for key, data, extra in (("central", images, kwargs), ("0/labels", labels, {})):
            dset = f.create_dataset(key, data=data, **extra)
            # h5torch's "N-D" object: shape, mode, (saved, loaded) dtypes, rows filled
            dset.attrs["shape"] = list(data.shape)
            dset.attrs["mode"] = "N-D"
            dset.attrs["dtypes"] = [str(data.dtype), str(data.dtype)]
            dset.attrs["filled_to"] = data.shape[0]
