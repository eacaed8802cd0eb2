"""Sparse matrices: CSR rows in chunks of whole entries, indptr recomputed, shuffled alike."""

import h5py
import numpy as np
import pytest

from nn_handler.rewrite import ANNDATA_ROW_ORDER_KEY, ROW_ORDER_KEY, rewrite_file

from helpers.rewrite_files import csr_dense, write_csr


@pytest.mark.parametrize("shuffle", [None, 3])
def test_csr_round_trips_with_obs_aligned(tmp_path, shuffle):
    src, dst = write_csr(tmp_path / "in.h5ad"), tmp_path / "out.h5ad"
    # 64 entries per block of rows: many blocks, rows spanning the new chunks' edges
    report = rewrite_file(src, dst, shuffle_rows=shuffle, sparse_chunk_bytes=256, memory="16MiB")
    (x,) = [d for d in report.plan.datasets if d.path == "X"]
    assert x.action == "csr" and x.chunks == (64,)
    want, got = csr_dense(src), csr_dense(dst)
    with h5py.File(src) as a, h5py.File(dst) as b:
        order = b[ANNDATA_ROW_ORDER_KEY][...] if shuffle is not None else np.arange(len(want))
        assert np.array_equal(got, want[order])
        assert np.array_equal(b["obs/label"][...], a["obs/label"][...][order])
        assert np.array_equal(b["obs/_index"][...], a["obs/_index"][...][order])
        assert np.array_equal(b["var/_index"][...], a["var/_index"][...])  # not rows
        assert b["X"].attrs["encoding-type"] == "csr_matrix"
        assert b["X/data"].chunks == (64,) and b["X/indices"].chunks == (64,)
        assert b["X/indptr"][0] == 0 and b["X/indptr"][-1] == a["X/indptr"][-1]
    assert any(v.path == "X" and v.rows_checked == len(want) for v in report.verified)


def test_anndata_reads_the_rewritten_h5ad(tmp_path):
    ad = pytest.importorskip("anndata")
    from helpers.sparse_files import write_anndata

    src, dst = write_anndata(tmp_path / "in.h5ad", "csr-lzf-tiny"), tmp_path / "out.h5ad"
    rewrite_file(src, dst, shuffle_rows=0, memory="16MiB")
    with h5py.File(dst) as f:
        order = f[ANNDATA_ROW_ORDER_KEY][...]
    before, after = ad.read_h5ad(src), ad.read_h5ad(dst)
    assert np.array_equal(after.X.toarray(), before.X.toarray()[order])
    assert list(after.obs_names) == list(before.obs_names[order])
    assert np.array_equal(after.uns["_nn_handler"]["row_order"], order)


def test_csc_is_copied_as_stored_and_refused_under_shuffle(tmp_path):
    src = tmp_path / "in.h5ad"
    write_csr(src)
    with h5py.File(src, "a") as f:
        f["X"].attrs["encoding-type"] = "csc_matrix"  # the same arrays read as CSC
        f["X"].attrs["shape"] = np.array([40, 301])
    report = rewrite_file(src, tmp_path / "out.h5ad", memory="16MiB")
    assert any(c.startswith("X:") and "csc_matrix" in c for c in report.copied)
    with h5py.File(src) as a, h5py.File(tmp_path / "out.h5ad") as b:
        assert np.array_equal(a["X/data"][...], b["X/data"][...])
    with pytest.raises(ValueError, match="shuffle_rows: cannot permute the rows of 'X'"):
        rewrite_file(src, tmp_path / "other.h5ad", shuffle_rows=1, memory="16MiB")
    assert not (tmp_path / "other.h5ad").exists()


def test_10x_cells_are_rows(tmp_path):
    pytest.importorskip("anndata")
    from helpers.sparse_files import tenx_reference, write_10x

    src, dst = write_10x(tmp_path / "in.h5"), tmp_path / "out.h5"
    report = rewrite_file(src, dst, shuffle_rows=4, memory="16MiB")
    assert [d.action for d in report.plan.datasets if d.path == "matrix"] == ["csr"]
    with h5py.File(dst) as f, h5py.File(src) as a:
        order = f[ROW_ORDER_KEY][...]
        assert np.array_equal(f["matrix/barcodes"][...], a["matrix/barcodes"][...][order])
        assert np.array_equal(f["matrix/features/name"][...], a["matrix/features/name"][...])
    assert np.array_equal(tenx_reference(dst), tenx_reference(src)[order])
