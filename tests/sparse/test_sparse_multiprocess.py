"""H5SparseDataset across processes: DataLoader workers (fork / spawn / forkserver) and gloo DDP."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nn_handler.dataloaders import ChunkShuffleSampler, H5SparseDataset, batched_loader

from helpers.ddp import run_ddp
from helpers.sparse_files import N_OBS, dense_x, reference, write_anndata
from helpers.sparse_ranks import split_rows_rank

pytestmark = [
    pytest.mark.slow,
    # CSR batches cross in ring slots, rebuilt by us without a warning; these tiny ones put
    # all four parts in one ring of small slots, so a batch can find it full and go the old
    # way, which torch rebuilds with its own warning (once per process)
    pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta"),
]


@pytest.fixture(scope="module")
def gz(tmp_path_factory):
    path = write_anndata(tmp_path_factory.mktemp("mp") / "g.h5ad", "csr-gzip-tiny")
    return path, dense_x(reference(path))


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_workers_with_chunk_shuffle(gz, context, monkeypatch):
    from nn_handler.dataloaders._sparse import rows as _sparse_rows

    path, expected = gz
    sparse = context == "spawn"  # spawn also: CSR batches, and indptr read again in workers
    if sparse:
        monkeypatch.setattr(_sparse_rows, "_PICKLE_INDPTR_BYTES", 0)  # "large": not pickled
    ds = H5SparseDataset(path, label="n_genes", output="sparse_csr" if sparse else "dense")
    ds[[1, 2]]  # the parent reads first: forked workers inherit an open handle
    sampler = ChunkShuffleSampler(ds, window_chunks=3, batch_size=8, num_workers=2)
    loader = batched_loader(
        ds,
        8,
        sampler=sampler,
        num_workers=2,
        multiprocessing_context=context,
        persistent_workers=True,
        timeout=120,
    )
    orders = []
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        xs, ys = zip(*loader, strict=True)
        x = np.concatenate([b.to_dense().numpy() if sparse else b.numpy() for b in xs])
        rows = torch.cat(ys).numpy() // 3  # n_genes = 3 * row: says which row came
        assert sorted(rows.tolist()) == list(range(N_OBS))
        np.testing.assert_array_equal(x, expected[rows])
        orders.append(rows.tolist())
    assert orders[0] != orders[1]


def test_ddp_ranks_split_the_rows(gz, tmp_path):
    path, expected = gz
    csc_path = write_anndata(tmp_path / "c.h5ad", "csc-gzip")
    csc_expected = dense_x(reference(csc_path))
    results = run_ddp(split_rows_rank, 2, tmp_path / "out", str(path), str(csc_path), timeout=240)
    for kind in ("chunk", "distributed"):
        for epoch in (0, 1):
            parts = [r[kind][epoch][1] for r in results]
            assert len(parts[0]) == len(parts[1])
            union = np.concatenate(parts)
            if kind == "distributed":  # even="drop": disjoint
                assert len(set(union.tolist())) == union.size == N_OBS // 2 * 2
            else:  # even="pad": every row, one repeated
                assert set(union.tolist()) == set(range(N_OBS)) and union.size == N_OBS + 1
            for r in results:
                x, rows = r[kind][epoch]
                np.testing.assert_array_equal(x, expected[rows])
    for r in results:
        np.testing.assert_array_equal(r["csc"][0], csc_expected)
        assert r["csc"][1].tolist() == list(range(N_OBS))
    assert sorted(r["origin"] for r in results) in (["built", "sidecar"], ["built", "built"])
