"""The check after a rewrite: every row of the output against the input, read through h5py.

Both files are read with plain h5py (not the reader that wrote the output), in blocks of rows:
output rows ``[a, b)`` are compared with input rows ``order[a:b]`` (or ``a:b``), the input read
a block of its chunks at a time so each input chunk is decoded once per block. With
``verify_rows=N`` a seeded sample of N rows per dataset is compared instead
(``np.random.default_rng(0)``), and the report says so. Values compare bit for bit (NaNs
included), after the same cast the rewrite made; variable-length values one by one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from .plan import DatasetPlan
from .sparse import block_ends, entry_index

__all__ = ["VerifyError", "VerifyResult", "verify_csr", "verify_dense", "verify_rows_of"]

Index = np.ndarray[Any, np.dtype[np.int64]]
_SAMPLE_SEED = 0


class VerifyError(RuntimeError):
    """The output differs from the input (the output is not kept)."""


@dataclass(frozen=True)
class VerifyResult:
    """What was compared for one dataset.

    Attributes:
        path: Dataset (or sparse group) path.
        rows_checked: Rows compared.
        rows: Rows in the dataset.
        sampled: True when a seeded sample of rows was compared (``verify_rows``).
    """

    path: str
    rows_checked: int
    rows: int
    sampled: bool


def verify_rows_of(n_rows: int, verify_rows: int | None) -> tuple[Index, bool]:
    """The output rows compared: all, or a sorted seeded sample of ``verify_rows``."""
    if verify_rows is None or verify_rows >= n_rows:
        return np.arange(n_rows, dtype=np.int64), False
    rng = np.random.default_rng(_SAMPLE_SEED)
    return np.sort(rng.choice(n_rows, verify_rows, replace=False)).astype(np.int64), True


def verify_dense(
    src: h5py.Dataset,
    dst: h5py.Dataset,
    plan: DatasetPlan,
    order: Index | None,
    verify_rows: int | None,
    budget: int,
) -> VerifyResult:
    """Compare ``dst`` with ``src`` (rows of ``dst`` are ``src[order]``); raise ``VerifyError``."""
    if src.shape != dst.shape:
        raise VerifyError(f"{plan.path!r}: shape {dst.shape} written, {src.shape} in the input")
    if not src.shape:
        _compare(np.asarray(src[()]), np.asarray(dst[()]), plan.path, 0, 0)
        return VerifyResult(plan.path, 1, 1, False)
    rows, sampled = verify_rows_of(src.shape[0], verify_rows)
    row_bytes = max(1, plan.row_bytes or src.dtype.itemsize * math.prod(src.shape[1:]))
    step = max(1, budget // 2 // row_bytes)
    for lo in range(0, len(rows), step):
        out_rows = rows[lo : lo + step]
        in_rows = out_rows if order is None else order[out_rows]
        want = read_rows(src, in_rows, row_bytes, budget // 2)
        got = read_rows(dst, out_rows, row_bytes, budget // 2)
        _compare(want.astype(dst.dtype, copy=False), got, plan.path, out_rows, in_rows)
    return VerifyResult(plan.path, len(rows), src.shape[0], sampled)


def verify_csr(
    src: h5py.Group,
    dst: h5py.Group,
    plan: DatasetPlan,
    order: Index | None,
    verify_rows: int | None,
    budget: int,
) -> VerifyResult:
    """Compare the sparse rows of ``dst`` with those of ``src``; raise ``VerifyError``."""
    sp, dp = src["indptr"][...].astype(np.int64), dst["indptr"][...].astype(np.int64)
    want_len = np.diff(sp) if order is None else np.diff(sp)[order]
    if len(dp) != len(sp) or not np.array_equal(np.diff(dp), want_len):
        raise VerifyError(f"{plan.path!r}: the rows' lengths (indptr) differ from the input's")
    rows, sampled = verify_rows_of(len(dp) - 1, verify_rows)
    lengths = np.diff(dp)[rows]
    start = 0
    for end in block_ends(lengths, max(1, budget // 4 // max(plan.row_bytes, 1))):
        out_rows = rows[start:end]
        in_rows = out_rows if order is None else order[out_rows]
        got_idx = entry_index(dp[out_rows], lengths[start:end])
        want_idx = entry_index(sp[in_rows], lengths[start:end])
        for name in ("data", "indices"):
            size = src[name].dtype.itemsize
            want = read_rows(src[name], want_idx, size, budget // 4)
            got = read_rows(dst[name], got_idx, size, budget // 4)
            _compare(want, got, f"{plan.path}/{name}", out_rows, in_rows)
        start = end
    return VerifyResult(plan.path, len(rows), len(dp) - 1, sampled)


def read_rows(dset: h5py.Dataset, rows: Index, row_bytes: int, budget: int) -> Any:
    """Rows ``rows`` (any order) of ``dset`` through h5py, read as slices of whole blocks.

    A block is one chunk along axis 0 (or ``budget`` bytes of a contiguous dataset), so each
    chunk is decoded once per call; neighbouring blocks that both hold wanted rows are read in
    one slice (up to ``budget`` bytes): one h5py call for a run of one-row chunks, not one each.
    """
    n = dset.shape[0]
    block = int(dset.chunks[0]) if dset.chunks else max(1, min(n, budget // max(row_bytes, 1)))
    perm = np.argsort(rows, kind="stable")
    sorted_rows = rows[perm]
    out: Any = None
    bounds = np.searchsorted(sorted_rows, np.arange(0, n + block, block))
    per_slab = max(1, budget // max(1, block * row_bytes))
    for first, last in _runs(np.flatnonzero(np.diff(bounds)), per_slab):
        lo_i, hi_i = int(bounds[first]), int(bounds[last + 1])
        base = first * block
        slab = dset[base : min((last + 1) * block, n)]
        part = slab[sorted_rows[lo_i:hi_i] - base]
        if out is None:
            out = np.empty((len(rows), *part.shape[1:]), dtype=part.dtype)
        out[perm[lo_i:hi_i]] = part
    if out is None:
        return dset[0:0]
    return out


def _runs(blocks: Index, most: int) -> list[tuple[int, int]]:
    """Runs ``(first, last)`` of consecutive block numbers, at most ``most`` blocks each."""
    cuts = np.flatnonzero(np.diff(blocks) != 1) + 1
    found = []
    for piece in np.split(blocks, cuts):
        for a in range(0, len(piece), most):
            chunk = piece[a : a + most]
            found.append((int(chunk[0]), int(chunk[-1])))
    return found


def _compare(want: Any, got: Any, path: str, out_rows: Any, in_rows: Any) -> None:
    if want.shape != got.shape or not _same(want, got):
        bad = _first_difference(want, got)
        out_row = int(np.asarray(out_rows).reshape(-1)[bad]) if np.ndim(out_rows) else 0
        in_row = int(np.asarray(in_rows).reshape(-1)[bad]) if np.ndim(in_rows) else 0
        raise VerifyError(f"verify: {path!r} output row {out_row} differs from input row "
                          f"{in_row}; the output was not kept")  # fmt: skip


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if a.shape != b.shape:
            return False
        if a.dtype.names and b.dtype.names:
            return all(_same(a[n], b[n]) for n in a.dtype.names)
        if a.dtype.hasobject or b.dtype.hasobject:
            return all(_same(x, y) for x, y in zip(a.reshape(-1), b.reshape(-1), strict=True))
        if a.dtype != b.dtype:
            return False
        return bool(np.array_equal(np.ascontiguousarray(a).reshape(-1).view(np.uint8),
                                   np.ascontiguousarray(b).reshape(-1).view(np.uint8)))  # fmt: skip
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return _same(np.asarray(a), np.asarray(b))
    return bool(a == b)


def _first_difference(want: Any, got: Any) -> int:
    if want.shape != got.shape or want.ndim == 0:
        return 0
    for i in range(len(want)):
        if not _same(want[i], got[i]):
            return i
    return 0
