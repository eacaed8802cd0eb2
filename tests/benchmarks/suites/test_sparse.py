"""The sparse benchmark's pieces on a tiny file: data, quality numbers, the tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from benchmarks.cases import Conversion, PeerUnavailableError
from benchmarks.peers.annbatch import AnnbatchUnavailableError, ensure_env
from benchmarks.peers.scdataset import sparse_contender
from benchmarks.registry import PEERS, Peer
from benchmarks.suites.sparse import chunks_per_batch, csc_choice, main, run_sparse_bench
from benchmarks.suites.sparse_data import sparse_counts, write_sparse_h5ad
from benchmarks.suites.stores import prepare_stores, run_vs_stores

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
    if sparse_contender(str(path), 64, 16, 16) is not None:
        assert "scDataset BlockShuffling(16), fetch_factor=16" in names
        assert names[1].startswith("ChunkShuffleSampler, window_chunks=")  # the matched window
    csc = csc_choice(str(tmp_path), n_rows=400, n_cols=100, seconds=0.05)
    assert "csc='sidecar'" in csc and "csc='direct'" in csc


def _table_rows(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("| ")][1:]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


def test_vs_annbatch_without_annbatch_prints_ours_and_the_reason(tmp_path):
    path = tmp_path / "cells.h5ad"
    write_sparse_h5ad(path, 300, 50, 0.1, compression=None)
    skip = AnnbatchUnavailableError("annbatch needs Python >= 3.12; none runs here")
    peers = {"annbatch": skip}
    text = run_vs_stores(str(path), peers, seconds=0.01, repeats=1, batch=32, workers=(0,))
    rows = _table_rows(text)
    assert [(r[0], r[1]) for r in rows] == [
        ("H5SparseDataset + EpochShuffleSampler, num_workers=0", "sparse_csr"),
        ("H5SparseDataset + EpochShuffleSampler, num_workers=0", "dense"),
    ]
    assert all(float(r[2].replace(",", "")) > 0 and r[4] == "-" for r in rows)
    assert 1 < float(rows[0][5]) <= 5  # 32 random cells of 300 touch most of the 5 blocks
    assert "- annbatch: skipped (annbatch needs Python >= 3.12; none runs here)." in text
    assert "uncompressed" in text


def test_main_skips_annbatch_it_may_not_install(tmp_path, capsys):
    argv = ["--rows", "200", "--genes", "40", "--seconds", "0.01", "--repeats", "1"]
    argv += ["--tables", "annbatch", "--workdir", str(tmp_path), "--store-batch-size", "32"]
    argv += ["--store-workers", "0", "--envs", str(tmp_path / "none")]
    assert main([*argv, "--no-install"]) == 0
    out = capsys.readouterr().out
    assert f"annbatch: skipped (no annbatch environment at {tmp_path / 'none'}" in out
    assert "H5SparseDataset + EpochShuffleSampler, num_workers=0 | sparse_csr" in out


_VENV = Path(__file__).resolve().parents[3] / "build" / "annbatch-venv"  # the repository's


@pytest.mark.slow  # converts and loads with annbatch in its own Python
def test_vs_annbatch_with_annbatch(tmp_path):
    try:
        env = ensure_env(str(_VENV), install=False)  # never installs from the tests
    except AnnbatchUnavailableError as err:
        pytest.skip(f"no annbatch environment: {err}")
    path = tmp_path / "cells.h5ad"
    write_sparse_h5ad(path, 3000, 100, 0.05, compression=None)
    peers = {"annbatch": env}
    text = run_vs_stores(str(path), peers, seconds=0.05, repeats=1, batch=256, workers=(0,))
    rows = _table_rows(text)
    assert [r[1] for r in rows[:2]] == ["SciPy CSR", "SciPy CSR + .toarray()"]
    assert all(r[0].startswith("annbatch 0.3.1") and r[4] == "1.00" for r in rows[:2])
    # annbatch's batches mix like a full shuffle: 256 random cells of 3,000 touch ~45 of 47
    assert all(40 < float(r[5]) <= 47 for r in rows)
    assert "annbatch's conversion first" in text and "skipped" not in text


def test_vs_annbatch_on_a_compressed_file_reads_ours_chunk_by_chunk(tmp_path):
    path = tmp_path / "cells-gzip.h5ad"
    write_sparse_h5ad(path, 300, 50, 0.1, compression="gzip")
    peers = {"annbatch": AnnbatchUnavailableError("not here")}
    text = run_vs_stores(str(path), peers, seconds=0.01, repeats=1, batch=32, workers=(0,))
    assert "CSR, gzip" in text
    assert [r[0] for r in _table_rows(text)] == [
        "H5SparseDataset + ChunkShuffleSampler, num_workers=0"
    ] * 2


class _FakeRunner:
    """A store peer's runner that converts nothing and reports fixed rates."""

    label = "fake store 1.0"

    def __init__(self, h5ad: str, batch: int) -> None:
        self.store, self.batch = h5ad + ".fake", batch
        self.batches = {"csr": "fake CSR", "dense": "fake dense"}

    def convert(self):
        return Conversion(1.5, 10**9, 2 * 10**9)

    def load(self, seconds, seed=0, order_out=None, cold=False):
        if order_out is not None:  # file order: one 64-cell block per 64 cells
            n = 4 * self.batch
            np.save(order_out, np.arange(n).reshape(4, self.batch))
        return {"csr": 100.0, "dense": 50.0}


class _FakeStore:
    name = "fake store"

    def runner(self, h5ad, batch, dataset_size):
        return _FakeRunner(h5ad, batch)

    def notes(self, batch):
        return [f"fake store: batches of {batch}"]


def test_a_registered_store_peer_gets_its_rows_with_one_module_and_line(tmp_path, monkeypatch):
    monkeypatch.setitem(PEERS, "fake store", Peer("fake store", "peer", {"sparse-store": _prep}))
    peers = prepare_stores(str(tmp_path), install=False, say=lambda _: None)
    assert isinstance(peers["fake store"], _FakeStore)
    assert all(isinstance(p, PeerUnavailableError) for n, p in peers.items() if n != "fake store")
    path = tmp_path / "cells.h5ad"
    write_sparse_h5ad(path, 300, 50, 0.1, compression=None)
    text = run_vs_stores(str(path), peers, seconds=0.01, repeats=1, batch=32, workers=(0,))
    rows = [r for r in _table_rows(text) if r[0] == "fake store 1.0"]
    assert [(r[1], r[2], r[5]) for r in rows] == [
        ("fake CSR", "100", "1"),
        ("fake dense", "50", "1"),
    ]
    assert "- fake store's conversion first: 1.5 s" in text and "fake store: batches of 32" in text


def _prep(envs, python=None, install=True):
    return _FakeStore()
