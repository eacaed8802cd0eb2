"""Writers for per-sample HDF5 files (one dataset per sample, labels in attributes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np

from helpers.files import write_layout


def write_samples(
    path: Path,
    samples: dict[str, Any],
    group: str = "/",
    layout: str = "contiguous",
    **file_kwargs: Any,
) -> Path:
    """Write ``{name: array or (array, attrs)}`` as datasets of ``group`` in a new file."""
    with h5py.File(path, "w", **file_kwargs) as f:
        g = f.require_group(group)
        for name, spec in samples.items():
            data, attrs = spec if isinstance(spec, tuple) else (spec, {})
            data = np.asarray(data)
            write_layout(g, name, data, layout if data.size and data.ndim else "contiguous")
            for key, value in attrs.items():
                g[name].attrs[key] = value
    return path


def trajectories(n: int, start: int = 0, seed: int = 0, width: int = 3) -> dict[str, Any]:
    """``trajectory_{i}``: (i % 5 + 1, width) float32 rows starting at i, labels from i."""
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    for i in range(start, start + n):
        data = rng.standard_normal((i % 5 + 1, width)).astype(np.float32)
        data[0, 0] = i
        out[f"trajectory_{i}"] = (data, {"label": i % 3, "id": f"s{i}"})
    return out


def fixed(n: int, start: int = 0, shape: tuple[int, ...] = (2, 3)) -> dict[str, Any]:
    """``sample_{i}`` of a fixed shape filled with i, labels ``{"label": i}``."""
    return {
        f"sample_{i}": (np.full(shape, i, dtype=np.float32), {"label": i})
        for i in range(start, start + n)
    }


def h5_sample(path: Path, key: str) -> tuple[np.ndarray, dict[str, Any]]:
    """Direct h5py read of one sample dataset and its attributes."""
    with h5py.File(path, "r") as f:
        return f[key][()], dict(f[key].attrs)
