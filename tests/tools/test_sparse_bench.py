"""The sparse benchmark's pieces on a tiny file: data, quality numbers, the tables."""

from __future__ import annotations

import numpy as np
import pytest

from nn_handler.bench.sparse import chunks_per_batch, csc_choice, run_sparse_bench, scdataset
from nn_handler.bench.sparse_data import sparse_counts, write_sparse_h5ad
from nn_handler.dataloaders import H5SparseDataset

from helpers.sparse_files import ad


def test_counts_have_the_asked_density_and_varying_rows():
    x = sparse_counts(2000, 400, 0.05, seed=1)
    assert x.shape == (2000, 400) and 0.04 < x.nnz / (2000 * 400) < 0.06
    lengths = np.diff(x.indptr)
    assert lengths.std() > 0.2 * lengths.mean()  # library sizes vary, as in real cells
    assert x.data.min() >= 2 and np.all(x.data == np.round(x.data))  # counts


def test_written_file_reads_back(tmp_path):
    path = tmp_path / "c.h5ad"
    write_sparse_h5ad(path, 300, 50, 0.1, fmt="csc")
    adata = ad.read_h5ad(path)
    ds = H5SparseDataset(path, label="cell_type")
    np.testing.assert_array_equal(ds[:][0].numpy(), adata.X.toarray())
    assert len(ds.label_categories) == adata.obs["cell_type"].cat.categories.size


def test_chunks_per_batch():
    indptr = np.array([0, 5, 5, 25, 30])
    assert chunks_per_batch(np.array([0, 1, 2, 3]), indptr, 10, 2) == 2.0  # {0}, {0, 1, 2}
    assert chunks_per_batch(np.array([2, 0, 3, 1]), indptr, 10, 4) == 3.0


@pytest.mark.slow  # several timed passes
def test_tables(tmp_path):
    path = tmp_path / "cells.h5ad"
    write_sparse_h5ad(path, 3000, 200, 0.05)
    text = run_sparse_bench(str(path), seconds=0.05, repeats=1, batch=64)
    rows = [line for line in text.splitlines() if line.startswith("| ")][1:]
    names = [r.split(" | ")[0][2:] for r in rows]
    assert names[0] == "ChunkShuffleSampler" and names[-2:] == ["full shuffle", "file order"]
    if scdataset(str(path), 64, 16, 16) is not None:
        assert "scDataset BlockShuffling(16), fetch_factor=16" in names
        assert names[1].startswith("ChunkShuffleSampler, window_chunks=")  # the matched window
    csc = csc_choice(str(tmp_path), n_rows=400, n_cols=100, seconds=0.05)
    assert "csc='sidecar'" in csc and "csc='direct'" in csc
