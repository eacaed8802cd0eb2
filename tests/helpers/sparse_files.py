"""Small sparse matrices written by anndata (CSR / CSC, gzip / plain / lzf) and in the 10x layout.

Every matrix has empty rows, one row longer than a chunk of ``data`` and distinct values (row
``i`` holds values ``i + 0.001 * k``), so mix-ups show. References come from anndata's own
in-memory reading (``anndata.read_h5ad``) or from scipy on the raw arrays (10x).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

ad = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")
sp = pytest.importorskip("scipy.sparse")

N_OBS, N_VARS = 157, 45
TINY_CHUNK = 16  # entries per chunk of data / indices where a layout sets chunks
LONG_ROW = 10  # every column stored: 45 entries, longer than a tiny chunk
EMPTY_ROWS = (0, 3, 50, 51, 52, 156)

# name -> (format, dataset_kwargs for X) ; "default" = what write_h5ad picks
LAYOUTS: dict[str, tuple[str, dict[str, Any]]] = {
    "csr-gzip": ("csr", {"compression": "gzip"}),
    "csr-plain": ("csr", {}),
    "csr-gzip-tiny": ("csr", {"compression": "gzip", "chunks": (TINY_CHUNK,)}),
    "csr-lzf-tiny": ("csr", {"compression": "lzf", "chunks": (TINY_CHUNK,)}),
    "csc-gzip": ("csc", {"compression": "gzip", "chunks": (TINY_CHUNK,)}),
    "csc-plain": ("csc", {}),
}


def matrix(n_obs: int = N_OBS, n_vars: int = N_VARS, seed: int = 0) -> Any:
    """A CSR matrix with empty rows, one full row and distinct, recognisable values."""
    rng = np.random.default_rng(seed)
    dense = (rng.random((n_obs, n_vars)) < 0.15).astype(np.float32)
    if n_obs > LONG_ROW:
        dense[LONG_ROW] = 1
    for r in EMPTY_ROWS:
        if r < n_obs:
            dense[r] = 0
    rows, cols = np.nonzero(dense)
    dense[rows, cols] = rows + 0.001 * (cols + 1)
    return sp.csr_matrix(dense)


def obs_frame(n_obs: int, seed: int = 0, kinds: tuple[str, ...] = ("a", "b", "c")) -> Any:
    rng = np.random.default_rng(seed + 1)
    cell_type = pd.Categorical(rng.choice(list(kinds), n_obs), categories=list(kinds))
    cell_type[5] = np.nan  # a missing value: code -1
    return pd.DataFrame(
        {
            "cell_type": cell_type,
            "n_genes": np.arange(n_obs, dtype=np.int64) * 3,
            "score": np.linspace(0, 1, n_obs),
            "is_b": rng.random(n_obs) < 0.5,
        },
        index=[f"cell{i}" for i in range(n_obs)],
    )


def write_anndata(
    path: Path, layout: str, *, seed: int = 0, n_obs: int = N_OBS, var_order: Any = None
) -> Path:
    """Write an ``.h5ad`` whose X is stored as ``layout`` (see ``LAYOUTS``)."""
    fmt, kwargs = LAYOUTS[layout]
    x = matrix(n_obs, seed=seed)
    names = np.array([f"gene{j}" for j in range(N_VARS)])
    if var_order is not None:
        x, names = x[:, var_order], names[var_order]
    adata = ad.AnnData(
        x if fmt == "csr" else x.tocsc(),
        obs=obs_frame(n_obs, seed),
        var=pd.DataFrame(index=names),
    )
    adata.write_h5ad(path)
    with h5py.File(path, "a") as f:  # X again, with this layout's chunks and filters
        del f["X"]
        ad.io.write_elem(f, "X", adata.X, dataset_kwargs=kwargs)
    return path


def write_10x(path: Path, *, seed: int = 0, n_cells: int = N_OBS) -> Path:
    """A Cell Ranger 3 ``.h5``: ``matrix/`` of genes x cells in CSC (cells are columns)."""
    cells = matrix(n_cells, seed=seed)  # rows = cells
    genes_by_cells = cells.T.tocsc()  # 10x: indptr runs over cells
    kw = {"compression": "gzip", "chunks": (TINY_CHUNK,)}
    with h5py.File(path, "w") as f:
        g = f.create_group("matrix")
        g.create_dataset("data", data=genes_by_cells.data.astype(np.int32), **kw)
        g.create_dataset("indices", data=genes_by_cells.indices.astype(np.int64), **kw)
        g.create_dataset("indptr", data=genes_by_cells.indptr.astype(np.int64))
        g.create_dataset("shape", data=np.array(genes_by_cells.shape, dtype=np.int32))
        g.create_dataset("barcodes", data=np.array([f"AAC-{i % 7}" for i in range(n_cells)], "S"))
        feats = g.create_group("features")
        feats.create_dataset("name", data=np.array([f"gene{j}" for j in range(N_VARS)], "S"))
        feats.create_dataset("id", data=np.array([f"ENSG{j:05d}" for j in range(N_VARS)], "S"))
    return path


def tenx_reference(path: Path) -> np.ndarray:
    """Cells x genes, dense, from the raw arrays through scipy."""
    with h5py.File(path, "r") as f:
        g = f["matrix"]
        csc = sp.csc_matrix(
            (g["data"][()], g["indices"][()], g["indptr"][()]), shape=tuple(g["shape"][()])
        )
    return np.asarray(csc.T.toarray(), dtype=np.float32)


def reference(path: Path) -> Any:
    """anndata's own in-memory reading of ``path``."""
    return ad.read_h5ad(path)


def dense_x(adata: Any) -> np.ndarray:
    x = adata.X
    return np.asarray(x.toarray() if hasattr(x, "toarray") else x, dtype=np.float32)
