"""Files with every kind of data a rewrite carries over, and a direct h5py comparison."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np

N = 1003  # not a multiple of any chunk: every dataset has an edge chunk


def write_every_kind(path: Path, n: int = N) -> Path:
    """Numbers (odd shapes, one row per gzip chunk), strings, blobs, a table, scales, attrs."""
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "every kind"
        f.attrs.create("ascii", np.bytes_(b"fixed"))
        f.create_dataset("x", data=rng.normal(size=(n, 7, 5)), chunks=(1, 7, 5), compression="gzip")
        f.create_dataset("y", data=np.arange(n), chunks=(100,), compression="gzip",
                         compression_opts=9)  # fmt: skip
        f.create_dataset("u8", data=rng.integers(0, 255, (n, 3), dtype=np.uint8))
        f.create_dataset("b", data=rng.random(n) < 0.5)
        f.create_dataset(
            "s", data=np.array([f"s{i}é" for i in range(n)], dtype=h5py.string_dtype())
        )
        f.create_dataset("fs", data=np.array([b"ab%d" % i for i in range(n)], dtype="S6"))
        blobs = np.empty(n, dtype=object)
        blobs[:] = [rng.integers(0, 255, i % 23, dtype=np.uint8) for i in range(n)]
        f.create_dataset("img", data=blobs, dtype=h5py.vlen_dtype(np.uint8))
        table = np.zeros(n, dtype=[("a", "<i4"), ("b", "<f8", (2,)), ("c", "S3")])
        table["a"] = np.arange(n)
        table["b"] = rng.normal(size=(n, 2))
        f.create_dataset("tab", data=table, chunks=(64,), compression="gzip")
        f.create_dataset("scalar", data=3.5)
        f.create_dataset("empty", shape=(0, 4), dtype="f4")
        f.create_dataset("zero_rows", shape=(0, 4), dtype="f4", chunks=(10, 4), maxshape=(None, 4))
        f.create_dataset("odd", data=rng.normal(size=(17, 1)).astype("f4"))
        t = f.create_dataset("t", data=np.arange(n, dtype=np.float64))
        t.make_scale("time")
        f["y"].dims[0].attach_scale(t)
        f["y"].attrs["units"] = "count"
        g = f.create_group("g/h")
        g.attrs["k"] = np.arange(3)
        g.create_dataset("z", data=rng.integers(0, 5, (n, 3)), chunks=(n, 1))
    return path


def write_csr(path: Path, n_obs: int = 301, n_vars: int = 40, seed: int = 0) -> Path:
    """An AnnData-like .h5ad: CSR X (gzip, small chunks), obs columns, var names."""
    rng = np.random.default_rng(seed)
    dense = (rng.random((n_obs, n_vars)) < 0.1) * rng.integers(1, 9, (n_obs, n_vars))
    dense[5] = 0  # an empty row
    indptr = np.concatenate([[0], np.cumsum((dense != 0).sum(1))]).astype(np.int64)
    rows, cols = np.nonzero(dense)
    with h5py.File(path, "w") as f:
        f.attrs["encoding-type"] = "anndata"
        f.attrs["encoding-version"] = "0.1.0"
        x = f.create_group("X")
        x.attrs["encoding-type"] = "csr_matrix"
        x.attrs["encoding-version"] = "0.1.0"
        x.attrs["shape"] = np.array([n_obs, n_vars])
        x.create_dataset("data", data=dense[rows, cols].astype(np.float32), chunks=(50,),
                         compression="gzip")  # fmt: skip
        x.create_dataset("indices", data=cols.astype(np.int32), chunks=(50,), compression="gzip")
        x.create_dataset("indptr", data=indptr)
        obs = f.create_group("obs")
        obs.create_dataset("_index", data=np.array([f"cell{i}" for i in range(n_obs)], dtype="S"))
        obs.create_dataset("label", data=np.arange(n_obs) % 4)
        var = f.create_group("var")
        var.create_dataset("_index", data=np.array([f"gene{j}" for j in range(n_vars)], dtype="S"))
    return path


def csr_dense(path: Path, group: str = "X") -> np.ndarray[Any, Any]:
    """The matrix of a CSR group, dense (small test files only)."""
    with h5py.File(path, "r") as f:
        g = f[group]
        n_rows, n_cols = (int(v) for v in g.attrs["shape"])
        data, indices, indptr = g["data"][...], g["indices"][...], g["indptr"][...]
    out = np.zeros((n_rows, n_cols), dtype=data.dtype)
    for i in range(n_rows):
        out[i, indices[indptr[i] : indptr[i + 1]]] = data[indptr[i] : indptr[i + 1]]
    return out


def read_all(dset: h5py.Dataset) -> Any:
    return dset[()] if dset.shape == () else dset[...]


def same(a: Any, b: Any) -> bool:
    """Equal values (NaNs equal; variable-length values one by one; tables field by field)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.names:
        return all(same(a[n], b[n]) for n in a.dtype.names)
    if a.dtype.hasobject:
        return all(same(x, y) if isinstance(x, np.ndarray) else x == y
                   for x, y in zip(a.reshape(-1), b.reshape(-1), strict=True))  # fmt: skip
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def assert_rewritten(src: Path, dst: Path, permuted: set[str] | None = None) -> None:
    """Every dataset of ``src`` is in ``dst`` with the same values (``dst[k] == src[k][order]``)."""
    with h5py.File(src, "r") as a, h5py.File(dst, "r") as b:
        order = b["_nn_handler/row_order"][...] if "_nn_handler" in b else None
        names: list[str] = []
        a.visititems(lambda k, o: names.append(k) if isinstance(o, h5py.Dataset) else None)
        for k in names:
            want = read_all(a[k])
            if permuted is not None and k in permuted:
                assert order is not None
                want = want[order]
            assert b[k].dtype == a[k].dtype, k
            assert same(want, read_all(b[k])), k
