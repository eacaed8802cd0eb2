"""Small HDF5 files in every storage layout we read, and direct h5py reads to compare with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np

# name -> create_dataset keywords; "rows" is the chunk length along axis 0 and "split" halves
# the chunk along every other axis (so a row's bytes are spread over several chunks)
LAYOUTS: dict[str, dict[str, Any]] = {
    "contiguous": {},
    "chunked": {"rows": 7},
    "chunked-one-row": {"rows": 1},
    "chunked-split-rows": {"rows": 5, "split": True},
    "gzip": {"rows": 8, "compression": "gzip"},
    "gzip-shuffle": {"rows": 8, "compression": "gzip", "shuffle": True},
    "lzf-fletcher": {"rows": 6, "compression": "lzf", "fletcher32": True},
    "compact": {"compact": True},
}


def write_layout(f: h5py.File, name: str, data: np.ndarray, layout: str) -> None:
    """Create dataset ``name`` holding ``data`` in ``layout``."""
    kw = dict(LAYOUTS[layout])
    rows, split = kw.pop("rows", None), kw.pop("split", False)
    if rows is not None:
        rest = tuple(max(1, -(-d // 2)) if split else d for d in data.shape[1:])
        kw["chunks"] = (min(rows, data.shape[0]), *rest)
    if kw.pop("compact", False):
        space = h5py.h5s.create_simple(data.shape)
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_layout(h5py.h5d.COMPACT)
        tid = h5py.h5t.py_create(data.dtype)
        dsid = h5py.h5d.create(f.id, name.encode(), tid, space, dcpl=plist)
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(data))
        return
    f.create_dataset(name, data=data, **kw)


def images(n: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    """``n`` distinct rows of shape (3, 4): row i starts with i, so mix-ups are visible."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((n, 3, 4)).astype(dtype)
    data[:, 0, 0] = np.arange(n)
    return data


def h5_rows(path: Path, key: str, rows: Any = None) -> np.ndarray:
    """Direct h5py read of ``key`` (all rows, or the given row list in order)."""
    with h5py.File(path, "r") as f:
        full = f[key][()]
    return full if rows is None else full[np.asarray(rows, dtype=np.int64)]
