"""Datasets on URLs against real servers: the same samples as the local file, byte for byte."""

from __future__ import annotations

import gc
import pickle
import threading
import time

import h5py
import numpy as np
import pytest
import torch

from nn_handler import cli
from nn_handler._io.rows import ranged
from nn_handler._io.storage.remote import object_file
from nn_handler._io.storage.remote.failures import RetryPolicy
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    CombinedHDF5Dataset,
    FileChangedError,
    H5LazyDataset,
    H5SampleDataset,
    H5SparseDataset,
    RankMemCachedH5Dataset,
    RemoteAccessError,
    RemoteReadError,
    batched_loader,
    wait_advice,
)

from helpers.object_servers import put_object
from helpers.recordings import write_recording
from helpers.samples import trajectories, write_samples
from helpers.sparse_files import write_anndata

N, WIDTH, CHUNK = 3000, 16, 64


def _write(path, seed=0, n=N):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "x",
            data=rng.standard_normal((n, WIDTH)).astype(np.float32),
            chunks=(CHUNK, WIDTH),
            compression="gzip",
        )
        f.create_dataset("y", data=rng.integers(0, 10, n))  # contiguous
    return path


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("local") / "f.h5")


@pytest.fixture(scope="module")
def s3_url(s3, local):
    put_object(s3, "data", "f.h5", local.read_bytes())
    return "s3://data/f.h5"


def _epoch(ds, workers, seed=3):
    sampler = ChunkShuffleSampler(ds, seed=seed, world_size=1, rank=0)
    loader = batched_loader(ds, 100, sampler=sampler, num_workers=workers)
    xs, ys = zip(*loader, strict=True)
    order = np.asarray(list(ChunkShuffleSampler(ds, seed=seed, world_size=1, rank=0)))
    return torch.cat(xs).numpy(), torch.cat(ys).numpy(), order


def test_s3_single_rows_and_lists_equal_the_local_file(s3, s3_url, local):
    remote = H5LazyDataset(s3_url, "x", "y", storage_options=s3)
    mine = H5LazyDataset(local, "x", "y")
    for i in (0, 63, 64, 1777, N - 1):
        assert all(torch.equal(a, b) for a, b in zip(remote[i], mine[i], strict=True))
    rows = [5, 2999, 64, 5, 1200, 0]
    assert all(torch.equal(a, b) for a, b in zip(remote[rows], mine[rows], strict=True))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_s3_chunk_shuffle_epoch_equals_the_local_file(s3, s3_url, local, workers, tmp_path):
    remote = H5LazyDataset(s3_url, "x", "y", storage_options=s3, cache_dir=tmp_path / "c")
    x, y, order = _epoch(remote, workers)
    with h5py.File(local) as f:
        assert np.array_equal(x, f["x"][:][order])
        assert np.array_equal(y, f["y"][:][order])
    assert sorted(order.tolist()) == list(range(N))


def test_rank_cache_on_s3_equals_the_local_file(s3, s3_url, local):
    remote = RankMemCachedH5Dataset(s3_url, "x", "y", storage_options=s3, rank=0, world_size=1)
    mine = RankMemCachedH5Dataset(local, "x", "y", rank=0, world_size=1)
    rows = list(range(0, N, 7))
    assert all(torch.equal(a, b) for a, b in zip(remote[rows], mine[rows], strict=True))


@pytest.mark.slow  # DataLoader workers
@pytest.mark.timeout(120)
def test_second_epoch_reads_from_the_cache_only(http, tmp_path):
    _write(http.root / "f.h5")
    ds = H5LazyDataset(http.url("f.h5"), "x", "y", cache_dir=tmp_path / "c")
    first = _epoch(ds, 0)
    requests = http.requests
    second = _epoch(ds, 2)  # new worker processes: they open the cached entry
    assert http.requests == requests
    assert np.array_equal(first[0], second[0])


def test_a_second_dataset_on_the_node_fetches_only_the_version(http, tmp_path):
    _write(http.root / "f.h5")
    _epoch(H5LazyDataset(http.url("f.h5"), "x", "y", cache_dir=tmp_path / "c"), 0)
    requests = http.requests
    again = H5LazyDataset(http.url("f.h5"), "x", "y", cache_dir=tmp_path / "c")
    _epoch(again, 0)
    assert http.requests == requests + 1  # the version check at construction


def test_object_replaced_between_reads_fails_naming_the_url(http):
    _write(http.root / "f.h5", n=30_000)  # 2 MB: more than the metadata reads bring along
    ds = H5LazyDataset(http.url("f.h5"), "x", "y")
    assert ds[0]
    _write(http.root / "f.h5", seed=1, n=30_000)  # same shape, other bytes
    with pytest.raises(FileChangedError, match=r"f\.h5.*changed after"):
        ds[list(range(0, 30_000, 1000))]


@pytest.mark.timeout(60)
def test_server_stopped_mid_epoch_fails_within_the_bound(http, monkeypatch):
    monkeypatch.setattr(object_file, "RetryPolicy", lambda: RetryPolicy(total_s=2, attempt_s=1))
    _write(http.root / "f.h5", n=30_000)
    ds = H5LazyDataset(http.url("f.h5"), "x", "y")
    sampler = ChunkShuffleSampler(ds, window_chunks=2, world_size=1, rank=0)
    loader = batched_loader(ds, 100, sampler=sampler)
    batches = iter(loader)
    next(batches)
    http.stop()
    began = time.monotonic()
    with pytest.raises(RemoteReadError, match=r"f\.h5"):
        for _ in batches:
            pass
    assert time.monotonic() - began < 10


def test_unknown_protocol_and_bad_options_are_explained(tmp_path):
    with pytest.raises((ValueError, ImportError), match="nosuchproto"):
        H5LazyDataset("nosuchproto://b/f.h5", "x")
    with pytest.raises(TypeError, match="storage_options"):
        H5LazyDataset("s3://b/f.h5", "x", storage_options=["key"])
    with pytest.raises(ValueError, match="cache_limit"):
        H5LazyDataset("s3://b/f.h5", "x", cache_limit=0)


@pytest.mark.parametrize("whole", [True, False])
def test_contiguous_rows_are_read_by_ranges(http, monkeypatch, whole):
    if not whole:  # every batch by ranges, not the whole dataset once
        monkeypatch.setattr(ranged, "WHOLE_BYTES", 0)
    path = _write(http.root / "f.h5")
    remote = H5LazyDataset(http.url("f.h5"), "y", "x")
    assert remote._x.strategy == "ranges"
    mine = H5LazyDataset(path, "y", "x")
    rows = [2999, 5, 6, 7, 5, 100, 0]
    assert all(torch.equal(a, b) for a, b in zip(remote[rows], mine[rows], strict=True))
    assert torch.equal(remote[17][0], mine[17][0])


def test_every_dataset_class_reads_a_url_like_the_file(http, tmp_path):
    write_samples(http.root / "s.h5", trajectories(12))
    write_recording(http.root / "r.h5", 30, seed=1, uid_start=0, guid_kind="vlen-str")
    write_anndata(http.root / "a.h5ad", "csr-gzip")
    cache = {"cache_dir": tmp_path / "c"}
    sample = H5SampleDataset(http.url("s.h5"), **cache)
    assert len(sample) == len(H5SampleDataset(http.root / "s.h5"))
    assert torch.equal(sample[3]["data"], H5SampleDataset(http.root / "s.h5")[3]["data"])
    combined = CombinedHDF5Dataset([http.url("r.h5")], **cache)
    mine = CombinedHDF5Dataset([http.root / "r.h5"])
    for key, value in mine[7].items():
        got = combined[7][key]
        if torch.is_tensor(value):  # (recordings hold NaN gaps)
            torch.testing.assert_close(got, value, rtol=0, atol=0, equal_nan=True)
        else:
            assert got == value
    sparse = H5SparseDataset(http.url("a.h5ad"), **cache)
    assert torch.equal(sparse[[0, 5, 9]], H5SparseDataset(http.root / "a.h5ad")[[0, 5, 9]])


def test_inspect_reads_a_url(http, capsys):
    _write(http.root / "f.h5")
    assert cli.main(["inspect", http.url("f.h5")]) == 0
    out = capsys.readouterr().out
    assert http.url("f.h5") in out
    assert "reads: decode" in out


def test_readahead_asks_for_a_window_of_chunks_in_one_call(http, monkeypatch):
    _write(http.root / "f.h5", n=30_000)
    calls: list[int] = []
    read_ranges = object_file.RemoteFile.read_ranges

    def counting(self, ranges, buffers):
        calls.append(len(ranges))
        return read_ranges(self, ranges, buffers)

    monkeypatch.setattr(object_file.RemoteFile, "read_ranges", counting)
    ds = H5LazyDataset(http.url("f.h5"), "x", "y")
    calls.clear()  # construction: metadata, one chunk checked against h5py
    sampler = ChunkShuffleSampler(ds, window_chunks=16, world_size=1, rank=0)
    for _ in batched_loader(ds, 100, sampler=sampler):
        pass
    chunks = -(-30_000 // CHUNK)
    assert sum(n for n in calls if n >= 8) >= 0.9 * chunks  # windows, not chunk by chunk
    assert len([n for n in calls if n]) < chunks / 4


def test_a_pickled_dataset_reopens_the_url_and_its_cache(http, tmp_path):
    path = _write(http.root / "f.h5")
    ds = H5LazyDataset(http.url("f.h5"), "x", "y", cache_dir=tmp_path / "c")
    rows = [3, 2000, 64]
    first = ds[rows]
    copy = pickle.loads(pickle.dumps(ds))  # what a spawn / forkserver worker gets
    requests = http.requests
    again = copy[rows]
    assert http.requests == requests  # the same version, read from the node's cache
    mine = H5LazyDataset(path, "x", "y")[rows]
    assert all(torch.equal(a, b) for a, b in zip(again, mine, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(first, mine, strict=True))


def test_any_fsspec_url_reads_through_the_generic_fetcher(tmp_path):
    import fsspec

    path = _write(tmp_path / "f.h5")
    fsspec.filesystem("memory").pipe("/bucket/f.h5", path.read_bytes())
    remote = H5LazyDataset("memory://bucket/f.h5", "x", "y", cache_dir=tmp_path / "c")
    mine = H5LazyDataset(path, "x", "y")
    rows = [0, 2999, 640, 7]
    assert all(torch.equal(a, b) for a, b in zip(remote[rows], mine[rows], strict=True))
    fsspec.filesystem("memory").rm("/bucket/f.h5")


def test_a_url_reads_runs_of_adjacent_chunks_with_fewer_requests(http):
    local = _write(http.root / "f.h5", n=100_000)
    ds = H5LazyDataset(http.url("f.h5"), "x", "y")
    assert ds.adjacent_chunks == 8  # 4 KB chunks: capped at 8
    sampler = ChunkShuffleSampler(ds, seed=2, rank=0, world_size=1)
    assert sampler.block_size == 8 * 64
    requests = http.requests
    xs, ys = zip(*batched_loader(ds, 100, sampler=sampler), strict=True)
    runs = http.requests - requests
    order = np.fromiter(ChunkShuffleSampler(ds, seed=2, rank=0, world_size=1), np.int64)
    with h5py.File(local) as f:
        assert np.array_equal(np.concatenate(xs), f["x"][:][order])
        assert np.array_equal(np.concatenate(ys), f["y"][:][order])
    single = ChunkShuffleSampler(ds, seed=2, rank=0, world_size=1, block_size=64)
    requests = http.requests
    for _ in batched_loader(ds, 100, sampler=single):
        pass
    assert runs * 3 < http.requests - requests  # a request per run instead of per chunk


class _Cycle:
    """A reference cycle that holds an h5py object: only a collection frees it."""


@pytest.mark.timeout(120)
def test_construction_does_not_stall_while_another_thread_makes_h5py_garbage(
    http, tmp_path, monkeypatch
):
    # h5py holds its lock across its reads of the file's metadata; a collection starting on
    # the event loop's thread (or the server's) between two of them freed an h5py object
    # there, waited for that lock, and the next read waited for the loop: "did not answer".
    monkeypatch.setattr(object_file, "RetryPolicy", lambda: RetryPolicy(total_s=2, attempt_s=1))
    _write(http.root / "f.h5", n=30_000)
    with h5py.File(tmp_path / "local.h5", "w") as f:
        f["z"] = np.arange(3)
    local = h5py.File(tmp_path / "local.h5")
    stop = threading.Event()

    def make_garbage():
        while not stop.is_set():
            for _ in range(5):
                cycle = _Cycle()
                cycle.me, cycle.dset = cycle, local["z"]
            time.sleep(0.001)

    maker = threading.Thread(target=make_garbage)
    thresholds = gc.get_threshold()
    gc.set_threshold(50)  # collections often, on whichever thread allocates
    maker.start()
    try:
        for _ in range(60):  # the old code stalled in about one construction in 20-40
            H5LazyDataset(http.url("f.h5"), "x", "y").close()
    finally:
        stop.set()
        maker.join(10)
        gc.set_threshold(*thresholds)
        local.close()


def test_a_store_failing_while_h5py_opens_the_file_is_not_called_damaged(http):
    _write(http.root / "f.h5")
    ds = H5LazyDataset(http.url("f.h5"), "x", "y")  # the object's version is known
    state = pickle.dumps(ds)
    ds.close()
    http.fail_next = [403] * 50
    with pytest.raises(RemoteAccessError, match=r"f\.h5.*refused access"):
        pickle.loads(state)[0]  # a fresh copy opens the file again, through h5py


def test_wait_advice_names_a_url_read_without_a_cache(http, tmp_path):
    _write(http.root / "f.h5")
    bare = batched_loader(H5LazyDataset(http.url("f.h5"), "x", "y"), 64, num_workers=1)
    assert any("cache_dir=" in line and "f.h5" in line for line in wait_advice(bare))
    cached = H5LazyDataset(http.url("f.h5"), "x", "y", cache_dir=tmp_path / "c")
    assert not any("cache_dir=" in a for a in wait_advice(batched_loader(cached, 64)))


def test_a_random_order_over_a_url_is_said_truthfully(http, caplog):
    # a URL is never decoded whole, whatever the budget: the warning says so, and does not ask
    # to raise a budget that would change nothing
    _write(http.root / "f.h5", n=20_000)  # 1.2 MiB decoded: a local file would be decoded whole
    ds = H5LazyDataset(http.url("f.h5"), "x", "y", rdcc_nbytes=4 * CHUNK * WIDTH * 4)
    caplog.set_level("WARNING")
    for _ in batched_loader(ds, 256, shuffle=True, generator=torch.Generator().manual_seed(0)):
        pass
    said = [r.getMessage() for r in caplog.records if "random order" in r.getMessage()]
    assert len(said) == 1, said
    assert "read over a URL (never decoded whole)" in said[0]
    assert "budget" not in said[0] and "ChunkShuffleSampler" in said[0]
