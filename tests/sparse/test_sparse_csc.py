"""CSC matrices served as rows: the CSR sidecar (build, reuse, validation) and csc='direct'."""

from __future__ import annotations

import logging
import os

import h5py
import numpy as np
import pytest

from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler._io.formats import sparse_csr
from nn_handler._io.formats.sparse_csr import ensure_csr_sidecar, sidecar_path
from nn_handler._io.formats.sparse_layout import detect_layout
from nn_handler.dataloaders import H5SparseDataset

from helpers.sparse_files import dense_x, reference, sp, write_anndata

LOGGER = sparse_csr._log.name  # the sidecar logs under its own module's name


@pytest.fixture
def csc_file(tmp_path):
    path = write_anndata(tmp_path / "c.h5ad", "csc-gzip")
    return path, dense_x(reference(path))


def test_sidecar_is_the_csr_of_the_matrix(csc_file):
    path, expected = csc_file
    ds = H5SparseDataset(path)
    assert ds.origins == ["built"]
    side = sidecar_path(str(path), "X", None)
    assert os.path.exists(side) and not os.path.exists(side + ".lock")
    with h5py.File(side, "r") as f:
        csr = sp.csr_matrix(
            (f["data"][()], f["indices"][()], f["indptr"][()]), shape=expected.shape
        )
        assert f["data"].compression == "gzip" and f["data"].shuffle
    np.testing.assert_array_equal(csr.toarray(), expected)
    assert csr.has_sorted_indices
    np.testing.assert_array_equal(ds[[9, 3, 3]].numpy(), expected[[9, 3, 3]])
    assert [e for e in os.listdir(path.parent) if e.endswith(".tmp")] == []


def test_sidecar_is_reused_while_the_file_is_unchanged(csc_file, caplog):
    path, expected = csc_file
    H5SparseDataset(path)
    side = sidecar_path(str(path), "X", None)
    before = os.stat(side).st_mtime_ns
    again = H5SparseDataset(path)
    assert again.origins == ["sidecar"] and os.stat(side).st_mtime_ns == before
    os.utime(path, ns=(before, os.stat(path).st_mtime_ns + 10**9))  # touched: stale
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert H5SparseDataset(path).origins == ["built"]
    assert "is stale" in caplog.text
    np.testing.assert_array_equal(H5SparseDataset(path)[:].numpy(), expected)


def test_changed_content_with_the_same_size_and_mtime_is_caught(tmp_path):
    path = write_anndata(tmp_path / "p.h5ad", "csc-plain")  # unfiltered: rewritten in place
    assert H5SparseDataset(path).origins == ["built"]
    st = os.stat(path)
    with h5py.File(path, "a") as f:
        f["X/data"][:] = f["X/data"][()] * 2
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size
    ds = H5SparseDataset(path)
    assert ds.origins == ["built"]  # the fingerprint differs
    np.testing.assert_array_equal(ds[:].numpy(), dense_x(reference(path)))


def test_corrupt_sidecar_is_rebuilt(csc_file, caplog):
    path, expected = csc_file
    H5SparseDataset(path)
    side = sidecar_path(str(path), "X", None)
    with open(side, "r+b") as fh:
        fh.truncate(100)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        ds = H5SparseDataset(path)
    assert ds.origins == ["built"] and "unreadable" in caplog.text
    np.testing.assert_array_equal(ds[:].numpy(), expected)


def test_sidecar_dir_and_unwritable_folder(csc_file, tmp_path):
    path, expected = csc_file
    elsewhere = tmp_path / "cache"
    elsewhere.mkdir()
    ds = H5SparseDataset(path, sidecar_dir=elsewhere)
    assert os.listdir(elsewhere) == ["c.h5ad.nnh-csr-X.h5"]
    np.testing.assert_array_equal(ds[[1, 2]].numpy(), expected[[1, 2]])
    missing = tmp_path / "no" / "such" / "folder"
    with pytest.raises(
        OSError, match=r"cannot write the CSR copy .*no/such/folder.*pass sidecar_dir"
    ):
        H5SparseDataset(path, sidecar_dir=missing)


@pytest.mark.parametrize("band", [13, 400, 10**9])  # 13: the full row needs a band alone
def test_build_in_bands_of_rows_gives_the_same_matrix(csc_file, tmp_path, band):
    path, expected = csc_file
    source = H5Source(path, FileOptions())
    layout = detect_layout(source.file, None, str(path))
    target, origin = ensure_csr_sidecar(source, layout, str(tmp_path), band_entries=band)
    source.close()
    assert origin == "built"
    with h5py.File(target, "r") as f:
        csr = sp.csr_matrix(
            (f["data"][()], f["indices"][()], f["indptr"][()]), shape=expected.shape
        )
    np.testing.assert_array_equal(csr.toarray(), expected)


@pytest.mark.parametrize("layout", ["csc-gzip", "csc-plain"])
def test_direct_reads_equal_the_sidecar(tmp_path, layout):
    path = write_anndata(tmp_path / "d.h5ad", layout)
    expected = dense_x(reference(path))
    direct = H5SparseDataset(path, csc="direct", output="sparse_csr")
    assert direct.origins == ["direct"] and direct.block_starts is None
    idx = np.random.default_rng(0).integers(0, len(direct), 50)
    np.testing.assert_array_equal(direct[idx].to_dense().numpy(), expected[idx])
    assert not os.path.exists(sidecar_path(str(path), "X", None))


def test_rows_out_of_range_in_a_csc_file(tmp_path):
    path = write_anndata(tmp_path / "bad.h5ad", "csc-gzip")
    with h5py.File(path, "a") as f:
        f["X/indices"][3] = 10_000
    with pytest.raises(ValueError, match=r"bad\.h5ad', group 'X': stores row index 10000"):
        H5SparseDataset(path)
    direct = H5SparseDataset(path, csc="direct")
    with pytest.raises(ValueError, match=r"group 'X': entry 3 stores row index 10000"):
        direct[[0]]
