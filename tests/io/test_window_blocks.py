"""The window reader: one gather from decoded slots, threads, readahead, workers: h5py's bytes."""

import threading

import h5py
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from nn_handler._io.chunks.block_fillers import TableChunks
from nn_handler._io.chunks.read_ahead import whole_runs
from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler._io.rows.reader import RowReader
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    H5LazyDataset,
    batched_loader,
    fit_chunk_cache,
)

from helpers.files import h5_rows, images

ROW = 3 * 4 * 4


def reader(path, key="x", **options):
    return RowReader(H5Source(path, FileOptions(**options)), key)


@pytest.mark.parametrize("layout", ["gzip", "gzip-shuffle", "chunked-one-row"])
def test_batches_and_ranges_equal_h5py(make_h5, layout):
    data = images(203)
    path = make_h5({"y": np.arange(3)} if layout == "chunked-one-row" else {"x": (data, layout)})
    if layout == "chunked-one-row":  # one image per chunk: decoded straight into the batch
        with h5py.File(path, "a") as f:
            f.create_dataset("x", data=data, chunks=(1, 3, 4), compression="gzip")
    r = reader(path)
    assert isinstance(r._rows.engine.source, TableChunks) and r.releases_gil
    rng = np.random.default_rng(0)
    for _ in range(5):
        idx = rng.integers(-203, 203, 77)
        assert r.read(idx).tobytes() == data[idx].tobytes()
    for start, stop in ((0, 203), (5, 6), (7, 9), (8, 16), (3, 200), (200, 203)):
        assert r.read_range(start, stop).tobytes() == data[start:stop].tobytes()
    out = np.empty((20, 3, 4), np.float32)[::2]  # not contiguous
    assert r.read(np.arange(10), out=out) is out
    np.testing.assert_array_equal(out, data[:10])


def test_batch_wider_than_the_window_and_no_budget(make_h5):
    data = images(200)
    path = make_h5({"x": (data, "gzip")})
    small = reader(path, rdcc_nbytes=3 * 8 * ROW)  # 3 slots, batches touch 25 chunks
    none = reader(path, rdcc_nbytes=0)
    idx = np.random.default_rng(1).permutation(200)
    for r in (small, none):
        assert r.read(idx).tobytes() == data[idx].tobytes()
    assert len(small._rows.engine.cache) == 3 and len(none._rows.engine.cache) == 0


def test_threads_reading_at_once_get_h5py_bytes(make_h5):
    data = images(400)
    path = make_h5({"x": (data, "gzip-shuffle")})
    r = reader(path, rdcc_nbytes=6 * 8 * ROW)  # small window: slots are reused under load
    errors, rng = [], np.random.default_rng(2)
    batches = [rng.integers(0, 400, 40) for _ in range(60)]

    def work(part):
        try:
            for idx in part:
                assert r.read(idx).tobytes() == data[idx].tobytes()
                r.read_ahead(np.random.default_rng(int(idx[0])).integers(0, 400, 20))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(batches[k::4],)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in threads)
    assert r._rows.engine.cache.pins == 0  # every pin released


def test_prefetch_decodes_ahead_and_read_uses_it(make_h5):
    data = images(160)
    path = make_h5({"x": (data, "gzip")})
    ds = H5LazyDataset(path, "x")
    fit_chunk_cache(ds, ChunkShuffleSampler(ds, window_chunks=4))  # readahead of 4 chunks
    assert ds.readahead_rows == 32
    blocks = ds._x._rows.engine
    decoded = []
    original = blocks.source.fill
    blocks.source.fill = lambda b, dest: decoded.append(b) or original(b, dest)
    ds.read_ahead([0, 9, 17])
    for _ in range(200):  # the pool finishes in the background
        if len(blocks.cache) == 3:
            break
        threading.Event().wait(0.01)
    x = ds[[17, 0, 9]]
    np.testing.assert_array_equal(x.numpy(), data[[17, 0, 9]])
    assert sorted(decoded) == [0, 1, 2]  # decoded once, by the prefetch


def _loader_rows(path, context, workers):
    ds = H5LazyDataset(path, "x", "y")
    sampler = ChunkShuffleSampler(ds, batch_size=16, num_workers=workers, seed=4)
    kw = {"multiprocessing_context": context} if workers else {}
    loader = batched_loader(ds, 16, sampler=sampler, num_workers=workers, **kw)
    xs, ys = zip(*[(x, y) for x, y in loader], strict=True)
    return torch.cat(xs).numpy(), torch.cat(ys).numpy()


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_read_h5py_bytes(make_h5, context):
    data = images(150)
    path = make_h5({"x": (data, "gzip-shuffle"), "y": np.arange(150)})
    x, y = _loader_rows(path, context, 2)
    assert sorted(y.tolist()) == list(range(150))
    np.testing.assert_array_equal(x, h5_rows(path, "x", y))
    x0, y0 = _loader_rows(path, context, 0)
    np.testing.assert_array_equal(x0, h5_rows(path, "x", y0))


def test_plain_dataloader_over_window_reader(make_h5):
    data = images(50)
    path = make_h5({"x": (data, "gzip")})
    ds = H5LazyDataset(path, "x")
    got = torch.cat(list(DataLoader(ds, batch_size=8)))
    np.testing.assert_array_equal(got.numpy(), data)


@pytest.mark.parametrize("budget", [3 * 8 * ROW, 0, 256 * 1024**2])
def test_chunks_we_do_not_decode_are_read_by_h5py_with_its_bytes(make_h5, monkeypatch, budget):
    from nn_handler._io.chunks.codecs import ChunkPipeline
    from nn_handler._io.chunks.decoders import UnsupportedChunkError

    data = images(203)  # edge chunk included: 203 rows in chunks of 8
    path = make_h5({"x": (data, "gzip")})
    r = reader(path, rdcc_nbytes=budget)
    assert isinstance(r._rows.engine.source, TableChunks)

    def unsupported(self, raw, mask, out):
        out[:] = 0xAB  # whatever a failed decode left behind must not reach the batch
        raise UnsupportedChunkError("a variant we do not decode")

    monkeypatch.setattr(ChunkPipeline, "decode_into", unsupported)
    rng = np.random.default_rng(2)
    for _ in range(4):
        idx = rng.integers(0, 203, 64)
        assert r.read(idx).tobytes() == data[idx].tobytes()
    assert r.read_range(0, 203).tobytes() == data.tobytes()
    assert r.read_chunk_head(25, 3).tobytes() == data[200:203].tobytes()


def test_a_chunk_that_fails_to_decode_raises_naming_it(make_h5, monkeypatch):
    from nn_handler._io.chunks.codecs import ChunkPipeline
    from nn_handler._io.chunks.decoders import ChunkDecodeError
    from nn_handler.dataloaders import CorruptFileError

    data = images(40)
    path = make_h5({"x": (data, "gzip")})
    r = reader(path)

    def short(self, raw, mask, out):
        raise ChunkDecodeError("chunk decoded to 12 bytes, expected 384")

    monkeypatch.setattr(ChunkPipeline, "decode_into", short)
    with pytest.raises(CorruptFileError, match=r"the chunk at \(16, 0, 0\) is corrupt .*12 bytes"):
        r.read([17])


@given(st.lists(st.integers(0, 199), max_size=30), st.integers(1, 9), st.integers(1, 200))
def test_whole_runs_are_the_aligned_runs_the_blocks_touch(ids, run, count):
    ids = np.unique(np.array([i for i in ids if i < count], dtype=np.int64))
    got = whole_runs(ids, run, count)
    starts = {i // run * run for i in ids.tolist()}
    expected = sorted(b for s in starts for b in range(s, s + run) if b < count)
    assert got.tolist() == expected


def test_prefetch_is_the_old_name_of_read_ahead(make_h5):
    data = images(40)
    ds = H5LazyDataset(make_h5({"x": (data, "gzip")}), "x")
    with pytest.warns(DeprecationWarning, match=r"prefetch\(\) is now read_ahead\(\)"):
        ds.prefetch([0, 9, 17])
    np.testing.assert_array_equal(ds[[17, 0]].numpy(), data[[17, 0]])
