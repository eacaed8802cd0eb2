"""Writers for files like the ones users keep: tables, encoded images, strings, odd types.

Each writer takes a folder and returns the path it wrote. Writers that need a third-party
package (pandas, PyTables, netCDF4, anndata, Pillow) skip the calling test when it is missing.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

TABLE_DTYPE = np.dtype([("id", "<i8"), ("pixels", "<f4", (2, 3)), ("label", "<i4"), ("w", ">f8")])
LABELS = ["cat", "dog", "bird"]


def table_rows(n: int, seed: int = 0) -> np.ndarray:
    """``n`` records of ``TABLE_DTYPE``: id i, label i % 3, random pixels, weight 0.5 i."""
    rng = np.random.default_rng(seed)
    rows = np.zeros(n, dtype=TABLE_DTYPE)
    rows["id"] = np.arange(n)
    rows["pixels"] = rng.standard_normal((n, 2, 3)).astype(np.float32)
    rows["label"] = np.arange(n) % 3
    rows["w"] = np.arange(n) * 0.5
    return rows


def write_compound(folder: Path, n: int = 50) -> Path:
    """Compound tables in three layouts (contiguous, chunked, chunked+gzip) and a ':' name."""
    path = folder / "compound.h5"
    rows = table_rows(n)
    with h5py.File(path, "w") as f:
        f["contiguous"] = rows
        f.create_dataset("chunked", data=rows, chunks=(7,))
        f.create_dataset("grp/gzip", data=rows, chunks=(8,), compression="gzip", shuffle=True)
        f["odd:name"] = np.arange(n, dtype=np.int16)  # a real ':' in a dataset name
        f["plain"] = np.arange(n, dtype=np.float32)
    return path


def image_bytes(seed: int, fmt: str, size: tuple[int, int], mode: str = "RGB") -> bytes:
    """Encode a random image of ``size`` (w, h) with Pillow."""
    image_mod = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "L": 1, "RGBA": 4}[mode]
    pixels = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
    img = image_mod.fromarray(pixels[..., 0] if channels == 1 else pixels, mode=mode)
    buf = io.BytesIO()
    img.save(buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


def write_encoded(folder: Path, n: int = 12) -> Path:
    """Real JPEG and PNG bytes, one image per row (vlen uint8), of differing sizes, + labels."""
    path = folder / "encoded.h5"
    blobs = []
    for i in range(n):
        fmt = "JPEG" if i % 2 else "PNG"
        mode = "L" if i % 5 == 4 else "RGB"
        blobs.append(np.frombuffer(image_bytes(i, fmt, (8 + i % 3, 6 + i % 4), mode), np.uint8))
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("images", (n,), dtype=h5py.vlen_dtype(np.uint8))
        for i, blob in enumerate(blobs):
            ds[i] = blob
        f["labels"] = np.array([LABELS[i % 3] for i in range(n)], dtype=h5py.string_dtype())
        same = f.create_dataset("same_len", (n,), dtype=h5py.vlen_dtype(np.float32))
        for i in range(n):
            same[i] = np.full(4, i, np.float32)
    return path


def write_strings(folder: Path, n: int = 30) -> Path:
    """Labels as fixed-length bytes, variable-length UTF-8 str and fixed UTF-8, + an input."""
    path = folder / "strings.h5"
    labels = [LABELS[i % 3] for i in range(n)]
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
        f["fixed"] = np.array(labels, dtype="S8")
        f["vlen"] = np.array(labels, dtype=object).astype(h5py.string_dtype())
        utf8 = np.array([("é" + s).encode() for s in labels], dtype="S12")
        fixed_utf8 = f.create_dataset("utf8", shape=(n,), dtype=h5py.string_dtype("utf-8", 12))
        fixed_utf8.id.write(h5py.h5s.ALL, h5py.h5s.ALL, utf8, mtype=fixed_utf8.id.get_type())
        f["ids"] = np.array([f"id-{i}" for i in range(n)], dtype=h5py.string_dtype())
    return path


def write_odd_types(folder: Path) -> Path:
    """A missing filter (LZO, id 305), float128, quad precision, an HDF5 time type, + good data.

    The LZO dataset is written with the filter in its pipeline as *optional* (HDF5 lets one
    create that without the filter) and raw chunks written around the pipeline, so reading it
    needs a plugin this environment lacks: exactly what a user's file compressed elsewhere is.
    """
    path = folder / "odd.h5"
    with h5py.File(path, "w") as f:
        f["good"] = np.arange(8, dtype=np.float32)
        _missing_filter_dataset(f, "lzo", 305)
        f["ld"] = np.arange(8, dtype=np.longdouble)
        space = h5py.h5s.create_simple((8,))
        quad = h5py.h5t.IEEE_F64LE.copy()
        quad.set_size(16)
        quad.set_precision(128)
        quad.set_fields(127, 112, 15, 0, 112)
        quad.set_ebias(16383)
        h5py.h5d.create(f.id, b"quad", quad, space)
        h5py.h5d.create(f.id, b"time", h5py.h5t.UNIX_D32LE.copy(), space)
    return path


def _missing_filter_dataset(f: h5py.File, name: str, code: int) -> None:
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((4,))
    dcpl.set_filter(code, h5py.h5z.FLAG_OPTIONAL)
    space = h5py.h5s.create_simple((8,))
    dsid = h5py.h5d.create(f.id, name.encode(), h5py.h5t.STD_I32LE, space, dcpl=dcpl)
    for start in (0, 4):
        raw = np.arange(start, start + 4, dtype="<i4").tobytes()
        dsid.write_direct_chunk((start,), raw, filter_mask=0)


def write_inspect_cases(folder: Path) -> Path:
    """Edge cases for inspect: empty, tiny and dimension-scale datasets, multi-line attrs."""
    path = folder / "cases.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "empty",
            (0, 4),
            dtype=np.float32,
            chunks=(16, 4),
            maxshape=(None, 4),
            compression="gzip",
        )
        f.create_dataset(
            "tiny", data=np.ones((10, 4), np.float32), chunks=(10, 4), compression="gzip"
        )
        f.create_dataset(
            "big", data=np.ones((4000, 4), np.float32), chunks=(1000, 4), compression="gzip"
        )
        f.create_dataset("unwritten", (100, 4), dtype=np.float32)
        f["time"] = np.arange(4000.0)
        f["time"].make_scale("time")
        f["big"].dims[0].attach_scale(f["time"])
        f.attrs["note"] = "line one\nline two\n\x1b[31mred\x1b[0m"
        f.attrs["numbers"] = np.arange(5)
        f.attrs["big_numbers"] = np.arange(1000)
        f.attrs["bytes"] = b"\x80\x03pickled\n"
        for i in range(30):
            f[f"runs/r{i:02d}"] = np.zeros((5, 2), np.int16)
    return path


def write_sparse_10x(folder: Path) -> Path:
    """A 10x Genomics v3 layout: ``matrix/{data, indices, indptr, shape, barcodes, features}``."""
    path = folder / "tenx.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("matrix")
        g["data"] = np.array([1, 2, 3, 4], np.int32)
        g["indices"] = np.array([0, 2, 1, 0], np.int64)
        g["indptr"] = np.array([0, 2, 3, 4], np.int64)
        g["shape"] = np.array([3, 3], np.int32)
        g["barcodes"] = np.array([b"AAA", b"CCC", b"GGG"])
        g.create_group("features")["id"] = np.array([b"g1", b"g2", b"g3"])
    return path


def write_pandas(folder: Path, n: int = 40) -> tuple[Path, Path, Any]:
    """pandas ``to_hdf`` in table format (one data column) and fixed format; and the frame."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("tables")
    frame = pd.DataFrame(
        {
            "a": np.arange(n, dtype=np.float64),
            "b": np.arange(n, dtype=np.float64) * 2,
            "k": np.arange(n, dtype=np.int64) % 4,
            "name": [LABELS[i % 3] for i in range(n)],
        }
    )
    table, fixed = folder / "pandas_table.h5", folder / "pandas_fixed.h5"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame.to_hdf(table, key="df", format="table", data_columns=["k"])
        frame.to_hdf(fixed, key="df", format="fixed")
    return table, fixed, frame


def write_pytables(folder: Path, n: int = 25) -> Path:
    """A PyTables table with an array column, compressed with zlib (gzip)."""
    tables = pytest.importorskip("tables")

    class Row(tables.IsDescription):  # type: ignore[misc, name-defined]
        idx = tables.Int64Col(pos=0)
        vec = tables.Float32Col(shape=(3,), pos=1)
        tag = tables.StringCol(8, pos=2)

    path = folder / "pytables.h5"
    with tables.open_file(str(path), "w") as f:
        table = f.create_table("/", "t", Row, filters=tables.Filters(complevel=3, complib="zlib"))
        row = table.row
        for i in range(n):
            row["idx"], row["vec"], row["tag"] = i, [i, i + 0.5, -i], LABELS[i % 3].encode()
            row.append()
        table.flush()
    return path


def write_netcdf(folder: Path) -> Path:
    """netCDF4 with dimension-only variables (0 bytes stored) and a data variable."""
    netcdf = pytest.importorskip("netCDF4")
    path = folder / "data.nc"
    with netcdf.Dataset(str(path), "w") as ds:
        ds.createDimension("sample", 20)
        ds.createDimension("feature", 3)
        var = ds.createVariable("signal", "f4", ("sample", "feature"))
        var[:] = np.arange(60, dtype=np.float32).reshape(20, 3)
        var.long_name = "a signal"
    return path


def write_anndata(folder: Path) -> Path:
    """An AnnData ``.h5ad`` with a sparse CSR ``X``, a categorical obs column and a layer."""
    anndata = pytest.importorskip("anndata")
    sparse = pytest.importorskip("scipy.sparse")
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    x = sparse.random(30, 8, density=0.3, format="csr", random_state=0, dtype=np.float32)
    obs = pd.DataFrame(
        {"cell_type": pd.Categorical([LABELS[i % 3] for i in range(30)])},
        index=[f"c{i}" for i in range(30)],
    )
    adata = anndata.AnnData(X=x, obs=obs)
    adata.layers["dense"] = rng.standard_normal((30, 8)).astype(np.float32)
    path = folder / "cells.h5ad"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(path)
    return path
