"""Synthetic single-cell count matrices written by anndata, as atlases store them.

Cells have log-normal library sizes and genes a heavy-tailed detection rate (a few genes in most
cells, most genes in few), so rows vary in length as in real data; values are small counts stored
as float32. The file is written by ``anndata.AnnData.write_h5ad`` itself, so ``data`` /
``indices`` chunks are exactly what anndata (through h5py's chunk guess) writes. Needs the
``bench`` extra (anndata, scipy, pandas).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["sparse_counts", "write_sparse_h5ad", "write_sparse_h5ad_streamed"]

_ROWS_PER_STEP = 1000  # rows drawn at once: a dense (1000, n_cols) float32 mask in memory


def sparse_counts(n_rows: int, n_cols: int, density: float, seed: int = 0) -> Any:
    """Return a ``scipy.sparse.csr_matrix`` of counts with about ``density`` stored values."""
    sp = importlib.import_module("scipy.sparse")
    parts = list(_count_blocks(n_rows, n_cols, density, seed))
    indptr = [np.zeros(1, np.int64)]
    for counts, _, _ in parts:
        indptr.append(indptr[-1][-1] + np.cumsum(counts))
    return sp.csr_matrix(
        (np.concatenate([v for *_, v in parts]), np.concatenate([c for _, c, _ in parts]),
         np.concatenate(indptr)),
        shape=(n_rows, n_cols),
    )  # fmt: skip


def _count_blocks(
    n_rows: int, n_cols: int, density: float, seed: int
) -> Iterator[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    """The matrix ``_ROWS_PER_STEP`` rows at a time: (values per row, indices, values)."""
    rng = np.random.default_rng(seed)
    gene_rate = rng.pareto(1.5, n_cols).astype(np.float32) + 0.2
    gene_rate *= density * 1.14 / gene_rate.mean()  # 1.14: what the clip at 1 takes away
    for r0 in range(0, n_rows, _ROWS_PER_STEP):
        rows = min(n_rows, r0 + _ROWS_PER_STEP) - r0
        scale = rng.lognormal(-0.125, 0.5, rows).astype(np.float32)  # mean 1
        hit = rng.random((rows, n_cols), dtype=np.float32) < scale[:, None] * gene_rate
        r, c = np.nonzero(hit)
        values = (1 + rng.geometric(0.5, c.size)).astype(np.float32)
        yield np.bincount(r, minlength=rows), c.astype(np.int32), values


def write_sparse_h5ad(
    path: str | os.PathLike[str],
    n_rows: int,
    n_cols: int = 20_000,
    density: float = 0.05,
    *,
    seed: int = 0,
    fmt: str = "csr",
    compression: str | None = "gzip",
    n_types: int = 30,
) -> None:
    """Write an ``.h5ad`` with X in ``fmt`` (``"csr"`` / ``"csc"``) and ``obs["cell_type"]``."""
    ad = importlib.import_module("anndata")
    pd = importlib.import_module("pandas")
    x = sparse_counts(n_rows, n_cols, density, seed)
    types = np.random.default_rng(seed + 1).integers(0, n_types, n_rows)
    obs = pd.DataFrame(
        {"cell_type": pd.Categorical([f"type{t}" for t in types])},
        index=[f"cell{i}" for i in range(n_rows)],
    )
    var = pd.DataFrame(index=[f"gene{j}" for j in range(n_cols)])
    adata = ad.AnnData(x if fmt == "csr" else x.tocsc(), obs=obs, var=var)
    adata.write_h5ad(path, compression=compression)


def write_sparse_h5ad_streamed(
    path: str | os.PathLike[str], n_rows: int, n_cols: int = 20_000, density: float = 0.05,
    *, seed: int = 0, n_types: int = 30,
) -> None:  # fmt: skip
    """``write_sparse_h5ad`` (CSR, uncompressed) for matrices larger than memory.

    anndata writes ``obs`` and ``var``; ``X`` is then written block by block in anndata's CSR
    encoding, with the contiguous, uncompressed arrays a plain ``write_h5ad`` makes, so anndata
    (and every reader of ``.h5ad``) reads the same file. The values are those of
    ``sparse_counts`` with the same arguments.
    """
    ad = importlib.import_module("anndata")
    pd = importlib.import_module("pandas")
    h5py = importlib.import_module("h5py")
    types = np.random.default_rng(seed + 1).integers(0, n_types, n_rows)
    obs = pd.DataFrame(
        {"cell_type": pd.Categorical([f"type{t}" for t in types])},
        index=[f"cell{i}" for i in range(n_rows)],
    )
    var = pd.DataFrame(index=[f"gene{j}" for j in range(n_cols)])
    ad.AnnData(obs=obs, var=var).write_h5ad(path)
    # two passes over the same draws: the first sizes the arrays, the second writes them
    nnz = sum(int(counts.sum()) for counts, _, _ in _count_blocks(n_rows, n_cols, density, seed))
    with h5py.File(path, "r+") as f:
        x = f.create_group("X")
        x.attrs.update({"encoding-type": "csr_matrix", "encoding-version": "0.1.0"})
        x.attrs["shape"] = np.array([n_rows, n_cols], np.int64)
        data = x.create_dataset("data", (nnz,), np.float32)
        indices = x.create_dataset("indices", (nnz,), np.int32)
        indptr, at = [np.zeros(1, np.int64)], 0
        for counts, cols, values in _count_blocks(n_rows, n_cols, density, seed):
            data[at : at + values.size] = values
            indices[at : at + cols.size] = cols
            indptr.append(at + np.cumsum(counts))
            at += values.size
        x.create_dataset("indptr", data=np.concatenate(indptr))
