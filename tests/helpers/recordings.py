"""Random fetal-heart-rate style recording files and a brute-force filter reference.

``write_recording`` builds one file with every default field of ``CombinedHDF5Dataset`` plus a
``uid`` column (unique across files, so each sample can be identified). ``reference`` applies
the filters one sample at a time with plain Python over direct h5py reads: an implementation
independent of the vectorized one under test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

T = 12  # time steps per window
C = 3  # classes
GUID_KINDS = ("fixed-bytes", "vlen-bytes", "vlen-str", "fixed-utf8")
FIELD_NAMES = {"uid": "uid"}  # adds the identifying column as a field


def write_recording(
    path: Path,
    n: int,
    *,
    seed: int,
    uid_start: int,
    guid_kind: str = "fixed-bytes",
    drop: Sequence[str] = (),
    cs_value: bool | None = None,
) -> Path:
    """Write ``n`` windows to ``path``; ``drop`` leaves fields out, ``cs_value`` fixes cs_label."""
    rng = np.random.default_rng(seed)
    signal = rng.standard_normal((n, 2, T)).astype(np.float32)
    # invalid stretches: signal loss (zeros) and NaN dropouts, some windows entirely lost
    for i in range(n):
        lost = rng.integers(0, T + 1)
        start = rng.integers(0, T - lost + 1)
        signal[i, :, start : start + lost] = 0.0 if rng.random() < 0.5 else np.nan
    signal[rng.random(n) < 0.1, 1, :] = np.inf  # one channel bad: every step invalid
    classes = rng.integers(0, C - (seed % 2), size=(n, T))  # odd seeds never use the last class
    fields: dict[str, Any] = {
        "fhr_st": signal,
        "fhr_ph": rng.standard_normal((n, 2, T)).astype(np.float32),
        "target": np.eye(C, dtype=np.float32)[classes],
        "weight": rng.random(n),
        "cs_label": rng.random(n) < 0.5 if cs_value is None else np.full(n, cs_value),
        "bg_label": rng.integers(0, 2, n).astype(np.int8),
        "epoch": np.round(rng.uniform(0, 100, n), 1),
        "uid": np.arange(uid_start, uid_start + n, dtype=np.int64),
    }
    accent = "é" if guid_kind in ("vlen-str", "fixed-utf8") else "e"
    guids = [f"p{rng.integers(0, 4)}-{accent}" for _ in range(n)]
    with h5py.File(path, "w") as f:
        for name, data in fields.items():
            if name not in drop:
                f.create_dataset(name, data=data)
        if "guid" not in drop:
            _write_guids(f, guids, guid_kind)
    return path


def _write_guids(f: h5py.File, guids: list[str], kind: str) -> None:
    if kind == "fixed-bytes":
        f["guid"] = np.array([g.encode() for g in guids], dtype="S8")
    elif kind == "vlen-bytes":
        f.create_dataset("guid", data=[g.encode() for g in guids], dtype=h5py.string_dtype("ascii"))
    elif kind == "vlen-str":
        f.create_dataset("guid", data=guids, dtype=h5py.string_dtype("utf-8"))
    else:
        data = np.array([g.encode() for g in guids], dtype=h5py.string_dtype("utf-8", 10))
        f.create_dataset("guid", data=data)


def read_file(path: Path) -> dict[str, np.ndarray]:
    """Every dataset of ``path`` as arrays, guids decoded to str."""
    with h5py.File(path, "r") as f:
        data = {name: f[name][()] for name in f}
        if "guid" in f:
            data["guid"] = np.array(f["guid"].asstr()[()], dtype=str)
    return data


def _valid_fraction_ok(window: np.ndarray, frac: float) -> bool:
    valid = 0
    for t in range(window.shape[-1]):
        step = window[..., t].ravel().tolist()
        if all(math.isfinite(v) for v in step) and any(v != 0 for v in step):
            valid += 1
    return valid > 0 and valid >= frac * window.shape[-1]


def _first_failure(data: dict[str, np.ndarray], i: int, f: dict[str, Any]) -> str | None:
    """Name of the first filter sample ``i`` fails (in the dataset's order), or None."""
    if f.get("allowed_guids") is not None and str(data["guid"][i]) not in {
        g.decode() if isinstance(g, bytes) else g for g in f["allowed_guids"]
    }:
        return "allowed_guids"
    for flag in ("cs_label", "bg_label"):
        if f.get(flag) is not None and bool(data[flag][i]) != f[flag]:
            return flag
    epoch = float(data["epoch"][i])
    lo, hi = f.get("epoch_min"), f.get("epoch_max")
    if (lo is not None and not epoch >= lo) or (hi is not None and not epoch <= hi):
        return "epoch_range"
    if f.get("label") is not None and not any(row[f["label"]] > 0 for row in data["target"][i]):
        return "label"
    frac = f.get("min_valid_fraction")
    if frac is not None and not _valid_fraction_ok(data["fhr_st"][i], frac):
        return "min_valid_fraction"
    if f.get("where_ref") is not None and not f["where_ref"](data, i):
        return "where"
    return None


def reference(paths: Sequence[Path], filters: dict[str, Any]) -> tuple[list[int], dict[str, int]]:
    """Return (uids kept, in file then row order) and per-filter removal counts."""
    kept: list[int] = []
    removed: dict[str, int] = {}
    for path in paths:
        data = read_file(path)
        for i in range(len(data["uid"])):
            failed = _first_failure(data, i, filters)
            if failed is None:
                kept.append(int(data["uid"][i]))
            else:
                removed[failed] = removed.get(failed, 0) + 1
    return kept, removed


WhereRef = Callable[[dict[str, np.ndarray], int], bool]
