"""Recognising AnnData / 10x sparse groups, and the constructor call inspect prints."""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np

from nn_handler._io.formats.sparse_layout import (
    constructor_call,
    describe_layout,
    detect_layout,
    sparse_layouts,
)
from nn_handler.dataloaders import H5SparseDataset

from helpers.sparse_files import N_OBS, N_VARS, write_10x, write_anndata


def test_anndata_layouts(tmp_path):
    path = write_anndata(tmp_path / "a.h5ad", "csc-gzip")
    with h5py.File(path, "a") as f:
        f.copy("X", "layers/counts")
        f.copy("X", "raw/X")
        f.copy("var", "raw/var")
    with h5py.File(path, "r") as f:
        found = {lay.group: lay for lay in sparse_layouts(f)}
        assert set(found) == {"X", "layers/counts", "raw/X"}
        x = detect_layout(f, None, str(path))
        # anndata >= 0.13 with pandas 3 stores a string index as a group {values, mask}
        index = "_index/values" if isinstance(f["var/_index"], h5py.Group) else "_index"
    assert x == found["X"]
    assert (x.encoding, x.n_rows, x.n_cols) == ("csc_matrix", N_OBS, N_VARS)
    assert (x.var_key, x.obs_key, x.rows_compressed) == (f"var/{index}", "obs", False)
    assert found["raw/X"].var_key == f"raw/var/{index}"
    assert x.data_key == "X/data" and x.indptr_key == "X/indptr" and x.compressed_len == N_VARS


def test_10x_layouts(tmp_path):
    path = write_10x(tmp_path / "t.h5")
    with h5py.File(path, "a") as f:  # Cell Ranger 2: one group per genome, gene_names
        g = f.create_group("GRCh38")
        for key in ("data", "indices", "indptr", "shape"):
            f.copy(f"matrix/{key}", g, name=key)
        g["gene_names"] = np.array([f"g{j}" for j in range(N_VARS)], dtype="S")
    with h5py.File(path, "r") as f:
        layouts = {lay.group: lay for lay in sparse_layouts(f)}
        auto = detect_layout(f, None, str(path))
    assert auto.group == "matrix" and auto.encoding == "10x" and auto.rows_compressed
    assert (auto.n_rows, auto.n_cols, auto.var_key) == (N_OBS, N_VARS, "matrix/features/name")
    assert layouts["GRCh38"].var_key == "GRCh38/gene_names"
    v2 = H5SparseDataset(path, group="GRCh38")
    np.testing.assert_array_equal(v2[[3, 10]].numpy(), H5SparseDataset(path)[[3, 10]].numpy())
    assert v2.column_names[:2] == ["g0", "g1"]


def _described(path: Any) -> tuple[str, str]:
    with h5py.File(path, "r") as f:
        return describe_layout(f, detect_layout(f, None, str(path)), str(path))


def test_describe_gives_the_constructor_to_use(tmp_path):
    h5ad = write_anndata(tmp_path / "a.h5ad", "csr-gzip")
    text, call = _described(h5ad)
    with h5py.File(h5ad, "r") as f:
        assert text == f"{f['X/data'].shape[0]} stored values"
    assert call == f"H5SparseDataset({str(h5ad)!r}, label='cell_type')"
    ds = eval(call, {"H5SparseDataset": H5SparseDataset})  # the printed call works
    assert ds.label_categories == ["a", "b", "c"]
    csc = write_anndata(tmp_path / "c.h5ad", "csc-plain")
    assert _described(csc)[0].endswith("(served through a CSR copy next to the file)")
    tenx = write_10x(tmp_path / "t.h5")
    assert _described(tenx)[1] == f"H5SparseDataset({str(tenx)!r})"


def test_constructor_call_names_a_group_that_is_not_found_automatically(tmp_path):
    path = write_anndata(tmp_path / "a.h5ad", "csr-gzip")
    with h5py.File(path, "a") as f:
        f.copy("X", "layers/counts")
    with h5py.File(path, "r") as f:
        layer = detect_layout(f, "layers/counts", str(path))
    assert constructor_call("a.h5ad", layer) == "H5SparseDataset('a.h5ad', group='layers/counts')"
