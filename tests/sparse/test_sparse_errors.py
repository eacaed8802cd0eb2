"""H5SparseDataset: bad files and bad arguments give errors that name the file, group and fix."""

from __future__ import annotations

import os
import re

import h5py
import numpy as np
import pytest
import torch

from nn_handler.dataloaders import H5SparseDataset

from helpers.sparse_files import write_10x, write_anndata


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return write_anndata(tmp_path_factory.mktemp("good") / "g.h5ad", "csr-gzip-tiny")


def _copy(good, tmp_path, name="bad.h5ad"):
    target = tmp_path / name
    target.write_bytes(good.read_bytes())
    return target


def test_missing_group_lists_the_sparse_groups(good):
    with pytest.raises(
        KeyError,
        match=r"group='layers/counts' not found in .*g\.h5ad'; sparse groups in the file: 'X'",
    ):
        H5SparseDataset(good, group="layers/counts")


def test_wrong_encoding(good, tmp_path):
    path = _copy(good, tmp_path)
    with h5py.File(path, "a") as f:
        f["X"].attrs["encoding-type"] = "coo_matrix"
        f["dense"] = np.zeros((3, 2))
    with pytest.raises(
        ValueError,
        match=r"group='X' in .* has encoding-type 'coo_matrix'; H5SparseDataset reads csr_matrix",
    ):
        H5SparseDataset(path, group="X")
    with pytest.raises(ValueError, match=r"group='obs' in .* has encoding-type 'dataframe'"):
        H5SparseDataset(path, group="obs")
    with pytest.raises(ValueError, match=r"is a dense dataset of shape \(3, 2\).*H5LazyDataset"):
        H5SparseDataset(path, group="dense")


def test_no_sparse_group(tmp_path):
    dense = tmp_path / "dense.h5ad"
    with h5py.File(dense, "w") as f:
        f["X"] = np.zeros((4, 3), dtype=np.float32)
    with pytest.raises(
        KeyError, match=r"holds X as a dense dataset of shape \(4, 3\).*H5LazyDataset"
    ):
        H5SparseDataset(dense)
    empty = tmp_path / "other.h5"
    with h5py.File(empty, "w") as f:
        f.create_group("stuff")
    with pytest.raises(
        KeyError, match=r"no sparse matrix found in .*top-level groups: 'stuff'; pass group="
    ):
        H5SparseDataset(empty)


def test_group_without_parts(tmp_path):
    path = tmp_path / "half.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("m")
        g.attrs["encoding-type"] = "csr_matrix"
        g["data"] = np.ones(3)
    with pytest.raises(ValueError, match=r"lacks the dataset.*indices, indptr"):
        H5SparseDataset(path, group="m")


def test_indices_out_of_range_in_the_file(good, tmp_path):
    path = _copy(good, tmp_path)
    with h5py.File(path, "a") as f:
        indptr = f["X/indptr"][()]
        f["X/indices"][indptr[20] + 1] = 999
    ds = H5SparseDataset(path)
    ds[[1, 2, 19]]  # other rows still read
    with pytest.raises(
        ValueError,
        match=r"bad\.h5ad', group 'X': row 20 stores column index 999, outside \[0, 45\)",
    ):
        ds[[3, 20]]


@pytest.mark.parametrize("bad", [999, 2**32 + 5], ids=["past-the-columns", "past-int32"])
def test_indices_out_of_range_in_csr_batches(good, tmp_path, bad):
    # int64 indices read into a CSR batch (int32 indices) are checked before any cast: one
    # past 2**32 would otherwise wrap into a column that exists
    path = _copy(good, tmp_path)
    with h5py.File(path, "a") as f:
        g = f["X"]
        _replace(g, "indices", g["indices"][()].astype(np.int64))
        g["indices"][g["indptr"][20] + 1] = bad
    ds = H5SparseDataset(path, output="sparse_csr")
    assert ds[[19, 2, 1]].col_indices().dtype == torch.int32
    with pytest.raises(ValueError, match=rf"row 20 stores column index {bad}, outside \[0, 45\)"):
        ds[[20, 3]]


def test_inconsistent_indptr(good, tmp_path):
    cases = {
        "short": lambda g: _replace(g, "indptr", g["indptr"][:-1]),
        "decreasing": lambda g: g["indptr"].__setitem__(5, 0),
        "end": lambda g: g["indptr"].__setitem__(-1, 3),
        "lengths": lambda g: _replace(g, "indices", g["indices"][:-1]),
        "shape": lambda g: g.attrs.__setitem__("shape", [1]),
    }
    messages = {
        "short": "indptr has 157 entries, expected 158",
        "decreasing": "indptr decreases after row 4",
        "end": "indptr must run from 0 to the",
        "lengths": "data has .* entries but indices has",
        "shape": "attribute 'shape' must be two non-negative integers",
    }
    for name, damage in cases.items():
        path = _copy(good, tmp_path, f"{name}.h5ad")
        with h5py.File(path, "a") as f:
            damage(f["X"])
        with pytest.raises(ValueError, match=messages[name]):
            H5SparseDataset(path, group="X")


def _replace(group, key, values):
    del group[key]
    group[key] = values


def test_10x_group_needs_its_shape(tmp_path):
    path = write_10x(tmp_path / "t.h5")
    with h5py.File(path, "a") as f:
        del f["matrix/shape"]
    with pytest.raises(
        ValueError, match="neither an AnnData encoding-type attribute nor a 10x 'shape'"
    ):
        H5SparseDataset(path, group="matrix")


def test_labels(good, tmp_path):
    with pytest.raises(
        KeyError,
        match=r"label='kind' is neither an obs column nor a dataset .*obs columns: 'cell_type', "
        r"'is_b', 'n_genes', 'score'",
    ):
        H5SparseDataset(good, label="kind")
    path = _copy(good, tmp_path)
    with h5py.File(path, "a") as f:
        f["short"] = np.arange(5)
        f["text"] = np.zeros((157, 2))
        f.create_group("obs/grp").attrs["encoding-type"] = "dict"
    with pytest.raises(
        ValueError, match=r"label='short' .* has shape \(5,\), but the matrix has 157 rows"
    ):
        H5SparseDataset(path, label="short")
    with pytest.raises(ValueError, match=r"label='text' .* has shape \(157, 2\)"):
        H5SparseDataset(path, label="text")
    with pytest.raises(TypeError, match="is a group with encoding-type 'dict', not a label column"):
        H5SparseDataset(path, label="grp")


def test_mixed_label_kinds_across_files(good, tmp_path):
    other = _copy(good, tmp_path)
    with h5py.File(other, "a") as f:
        del f["obs/cell_type"]
        f["obs/cell_type"] = np.arange(157.0)
    with pytest.raises(TypeError, match=r"categorical .* in some files and numbers in others"):
        H5SparseDataset([good, other], label="cell_type")


def test_files_with_other_columns(good, tmp_path):
    small = tmp_path / "small.h5"
    write_10x(small)
    with h5py.File(small, "a") as f:
        f["matrix/shape"][0] = 50
        del f["matrix/features"]
    with pytest.raises(ValueError, match=r"has 50 columns but .*g\.h5ad' has 45; pass columns="):
        H5SparseDataset([good, small])


def test_the_same_file_twice_is_refused_whatever_its_spelling(good, tmp_path, monkeypatch):
    (tmp_path / "link.h5ad").symlink_to(good)
    os.link(good, tmp_path / "hard.h5ad")
    monkeypatch.chdir(good.parent)
    for other in (good, "./g.h5ad", tmp_path / "link.h5ad", tmp_path / "hard.h5ad"):
        with pytest.raises(ValueError, match="the same file; each file may appear once") as info:
            H5SparseDataset([good, other])
        assert repr(os.fspath(other)) in str(info.value)
        assert "paths lists" in str(info.value) and repr(str(good)) in str(info.value)


def test_bad_arguments(good):
    with pytest.raises(ValueError, match="output must be one of 'dense', 'sparse_csr'; got 'coo'"):
        H5SparseDataset(good, output="coo")
    with pytest.raises(ValueError, match="csc must be one of 'sidecar', 'direct'; got 'copy'"):
        H5SparseDataset(good, csc="copy")
    with pytest.raises(TypeError, match="dtype must be a numeric NumPy dtype"):
        H5SparseDataset(good, dtype="U3")
    with pytest.raises(TypeError, match="dtype must be a NumPy dtype"):
        H5SparseDataset(good, dtype="float99")
    with pytest.raises(TypeError, match="group must be a non-empty string or None"):
        H5SparseDataset(good, group=3)
    with pytest.raises(
        ValueError, match=re.escape("paths must name at least one HDF5 file, got []")
    ):
        H5SparseDataset([])
    with pytest.raises(TypeError, match="paths must be a path or a sequence of paths or file obj"):
        H5SparseDataset([good, 3])
    with pytest.raises(FileNotFoundError, match="HDF5 file not found"):
        H5SparseDataset(good.parent / "missing.h5ad")
    with pytest.raises(TypeError, match="unexpected keyword argument 'lable'"):
        H5SparseDataset(good, lable="x")
    ds = H5SparseDataset(good)
    with pytest.raises(IndexError, match="index 157 is out of range for a dataset of length 157"):
        ds[157]
    with pytest.raises(IndexError, match="index -158 is out of range"):
        ds[[0, -158]]
    with pytest.raises(TypeError, match="indices must be integers"):
        ds[[0.5]]
