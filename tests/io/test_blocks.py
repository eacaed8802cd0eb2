"""Decoded-chunk LRU and block reads: each chunk decoded once while it stays cached."""

import pickle
import threading

import h5py
import numpy as np
import pytest

from nn_handler._io.chunks import codecs
from nn_handler._io.chunks.block_fillers import Geometry
from nn_handler._io.chunks.codecs import ChunkPipeline
from nn_handler._io.chunks.window import Window
from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler._io.rows.reader import RowReader
from nn_handler.dataloaders import H5LazyDataset

from helpers.files import images
from helpers.process import as_if_forked

ROW_BYTES = 3 * 4 * 4  # images(): rows of 3x4 float32


@pytest.fixture
def decodes(monkeypatch):
    """Count chunk decodes (from any thread)."""
    calls = []
    lock = threading.Lock()

    def counting_into(self, raw, filter_mask, out):
        with lock:
            calls.append(1)
        return original_into(self, raw, filter_mask, out)

    def counting_many(raw, spans, out):
        with lock:
            calls.extend([1] * len(spans))
        return original_many(raw, spans, out)

    original_into = ChunkPipeline.decode_into
    original_many = codecs.inflate_many
    monkeypatch.setattr(ChunkPipeline, "decode_into", counting_into)  # every decoding source
    monkeypatch.setattr(codecs, "inflate_many", counting_many)  # runs of small deflate chunks
    return calls


def reader(path, **options):
    return RowReader(H5Source(path, FileOptions(**options)), "x")


def test_consecutive_batches_decode_each_chunk_once(make_h5, decodes):
    data = images(64)
    r = reader(make_h5({"x": (data, "gzip")}))  # 8 chunks of 8 rows
    np.testing.assert_array_equal(r.read([1, 9, 2, 10]), data[[1, 9, 2, 10]])
    assert len(decodes) == 2
    np.testing.assert_array_equal(r.read([3, 11, 17]), data[[3, 11, 17]])
    assert len(decodes) == 3  # chunks 0 and 1 came from the cache
    r.read([0, 8, 16])
    assert len(decodes) == 3


def test_zero_budget_caches_nothing(make_h5, decodes):
    data = images(64)
    r = reader(make_h5({"x": (data, "gzip")}), rdcc_nbytes=0)
    r.read([1, 2])
    r.read([3, 4])
    assert len(decodes) == 2


def test_budget_bounds_the_cache(make_h5):
    data = images(64)
    chunk_bytes = 8 * ROW_BYTES
    r = reader(make_h5({"x": (data, "gzip")}), rdcc_nbytes=3 * chunk_bytes)
    r.read(np.arange(64))
    cache = r._rows.engine.cache
    assert len(cache) == 3 and cache.nbytes == 3 * chunk_bytes


def test_read_range_decodes_whole_chunks_into_the_output(make_h5, decodes):
    data = images(64)
    r = reader(make_h5({"x": (data, "gzip")}))
    out = np.empty((40, 3, 4), np.float32)
    assert r.read_range(8, 48, out=out) is out
    np.testing.assert_array_equal(out, data[8:48])
    assert len(r._rows.engine.cache) == 0  # sequential reads do not fill the cache
    np.testing.assert_array_equal(r.read_range(3, 13), data[3:13])
    assert len(r._rows.engine.cache) == 2  # partial chunks at both ends are kept
    assert len(decodes) == 7


GEOMETRY = Geometry("f.h5", "/x", 100, (10,), np.dtype("u1"), 1)  # blocks of 10 bytes


def _keep(window, blocks, capacity):
    """Claim ``blocks`` in ``window`` as a batch does, fill them with their number, release."""
    claim = window.claim(np.array(blocks), capacity)
    for b in claim.fresh:
        claim.arena[claim.slot(b)] = b
    window.settle(claim, ok=True)
    window.release(claim)
    return claim


def test_block_cache_is_lru():
    window = Window(GEOMETRY)
    for k in range(3):
        _keep(window, [k], capacity=3)
    assert _keep(window, [0], capacity=3).fresh == []  # 0 is now the most recent
    _keep(window, [3], capacity=3)
    assert not window.holds(1) and window.holds(0) and window.holds(3)
    assert len(window) == 3 and window.nbytes == 30
    claim = _keep(window, [0], capacity=1)  # a smaller budget starts a window that size
    assert claim.fresh == [0] and len(window) == 1 and window.nbytes == 10


def test_readahead_claims_what_the_free_slots_hold():
    window = Window(GEOMETRY)
    running = window.claim(np.arange(6), 10)  # a batch pins 6 of 10 slots
    assert window.claim_ahead(np.arange(6, 14), 10) is None  # 4 free, 4 kept for running reads
    part = window.claim_ahead(np.arange(6, 10), 10)  # 4 free, 2 kept: the first 2 blocks
    assert part is not None and part.fresh == [6, 7]
    assert window.claim_ahead(np.arange(6, 10), 10) is None  # 2 free, 2 kept
    window.settle(running, ok=True)
    window.release(running)
    rest = window.claim_ahead(np.arange(6, 12), 10)  # the batch is done: room for all
    assert rest is not None and rest.fresh == [8, 9, 10, 11]
    for claim in (part, rest):
        for block in claim.fresh:
            window.settle_ahead(claim, block, ok=True)
    assert window.pins == 0 and len(window) == 10


def test_block_cache_is_per_process(make_h5):
    data = images(64)
    r = reader(make_h5({"x": (data, "gzip")}))
    np.testing.assert_array_equal(r.read([1]), data[[1]])
    assert len(r._rows.engine.cache) == 1
    clone = pickle.loads(pickle.dumps(r))
    assert len(clone._rows.engine.cache) == 0
    np.testing.assert_array_equal(clone.read([17]), data[[17]])
    assert clone._rows.engine.cache.holds(2)
    as_if_forked()
    assert not r._rows.engine.cache.holds(0) and len(r._rows.engine.cache) == 0


def test_set_chunk_cache_resizes_both_caches(make_h5):
    data = images(64)
    path = make_h5({"x": (data, "gzip"), "y": np.arange(64)})
    ds = H5LazyDataset(path, "x", "y", rdcc_nbytes=10**6)
    ds[[0, 9, 17]]
    assert len(ds._x._rows.engine.cache) == 3
    ds.set_chunk_cache(2 * 8 * ROW_BYTES, nslots=101, w0=0.5)
    assert ds.chunk_cache_nbytes == 2 * 8 * ROW_BYTES
    assert ds._source.options.rdcc_nslots == 101 and ds._source.options.rdcc_w0 == 0.5
    assert not ds.is_open and len(ds._x._rows.engine.cache) == 0
    x, _ = ds[[0, 9, 17, 25]]
    np.testing.assert_array_equal(x.numpy(), data[[0, 9, 17, 25]])
    assert len(ds._x._rows.engine.cache) == 2
    with ds._source.file as f:
        assert f.id.get_access_plist().get_cache()[2] == 2 * 8 * ROW_BYTES
    with pytest.raises(ValueError, match="rdcc_nbytes must be >= 0, got -1"):
        ds.set_chunk_cache(-1)
    with pytest.raises(ValueError, match=r"rdcc_w0 must be in \[0, 1\], got 2"):
        ds.set_chunk_cache(100, w0=2)


def test_window_cache_nbytes(make_h5):
    data = images(64)
    path = make_h5({"x": (data, "gzip"), "c": data, "s": (data, "chunked-split-rows")})
    ds = H5LazyDataset(path, "x")
    assert ds.window_cache_nbytes(8, 10) == 10 * 8 * ROW_BYTES  # blocks = chunks
    assert ds.window_cache_nbytes(16, 10) == 10 * 16 * ROW_BYTES  # 2 chunks per block
    assert ds.window_cache_nbytes(4, 10) == 10 * 8 * ROW_BYTES  # blocks inside one chunk
    assert ds.window_cache_nbytes(5, 10) == 10 * 2 * 8 * ROW_BYTES  # straddling: 2 chunks
    assert H5LazyDataset(path, "c").window_cache_nbytes(8, 10) == 0  # contiguous: no cache
    assert H5LazyDataset(path, "s").window_cache_nbytes(5, 3) == 3 * 5 * ROW_BYTES


def test_h5py_decoded_chunks_are_cached_too(make_h5, monkeypatch):
    data = images(64)
    r = reader(make_h5({"x": (data, "lzf-fletcher")}))  # 6-row chunks h5py decodes
    assert r.strategy == "chunks"
    calls = []
    dset = r.source.dataset("x", chunk_cache=False)  # the handle the engine asks h5py through
    assert dset.id.get_access_plist().get_chunk_cache()[1] == 0  # no second, HDF5-side cache
    original = type(dset).read_direct

    def spy(self, dest, source_sel=None, dest_sel=None):
        calls.append(source_sel)
        return original(self, dest, source_sel, dest_sel)

    monkeypatch.setattr(type(dset), "read_direct", spy)
    np.testing.assert_array_equal(r.read([1, 7, 2, 8]), data[[1, 7, 2, 8]])
    np.testing.assert_array_equal(r.read([3, 9, 13]), data[[3, 9, 13]])
    assert len(calls) == 3  # blocks 0, 1, then 2: each read once
    np.testing.assert_array_equal(r.read_range(5, 40), data[5:40])


@pytest.mark.parametrize("budget", [0, 3 * 8 * ROW_BYTES, 10**6])
def test_raw_chunks_read_through_h5py_decode_with_the_pipeline(tmp_path, budget):
    """Chunks that split rows, chunks never written, file objects: our decode, h5py's bytes."""
    import h5py

    hdf5plugin = pytest.importorskip("hdf5plugin")
    data = images(203)
    path = tmp_path / "raw.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("split", data=data, chunks=(8, 2, 3), compression="gzip", shuffle=True)
        f.create_dataset("blosc", data=data, chunks=(8, 3, 3), **hdf5plugin.Blosc())
        holes = f.create_dataset("holes", (203, 3, 4), "f4", chunks=(8, 3, 4), compression="gzip")
        holes[16:40] = data[16:40]
    with h5py.File(path, "r") as f:
        expected = {key: f[key][()] for key in ("split", "blosc", "holes")}
    rng = np.random.default_rng(3)
    with open(path, "rb") as handle:
        for file in (path, handle):
            for key, values in expected.items():
                r = RowReader(H5Source(file, FileOptions(rdcc_nbytes=budget)), key)
                assert r.strategy == "decode" and not r.releases_gil, key
                idx = rng.integers(0, 203, 90)
                assert r.read(idx).tobytes() == values[idx].tobytes(), key
                assert r.read_range(3, 203).tobytes() == values[3:].tobytes(), key
                assert r.read_chunk_head(2, 5).tobytes() == values[16:21].tobytes(), key


@pytest.mark.parametrize("decode", [True, False], ids=["DirectChunks", "H5pyBlocks"])
def test_sources_that_fill_one_block_at_a_time_fill_many_and_runs(tmp_path, decode):
    """``fill_many`` and ``fill_run`` of a source without a chunk table: a ``fill`` each."""
    from nn_handler._io.chunks.block_fillers import DirectChunks, H5pyBlocks
    from nn_handler._io.chunks.h5py_rows import H5pyDataset
    from nn_handler._io.rows.choice import block_filler

    data = np.arange(40 * 6, dtype=np.float32).reshape(40, 6)
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:  # chunks split rows: no chunk table
        f.create_dataset("x", data=data, chunks=(4, 3), compression="gzip")
    source = H5Source(str(path), FileOptions())
    dset = source.dataset("x")
    blocks = block_filler(dset, source, H5pyDataset(source, "x"), decode=decode)
    assert isinstance(blocks, DirectChunks if decode else H5pyBlocks)
    assert not blocks.batches_reads and not blocks.reads_runs
    out = np.zeros((3, 4, 6), np.float32)
    assert blocks.fill_many([(1, out[0]), (7, out[1]), (9, out[2])], parallel=decode) == [
        None,
        None,
        None,
    ]
    np.testing.assert_array_equal(
        out, data[[*range(4, 8), *range(28, 32), *range(36, 40)]].reshape(3, 4, 6)
    )
    run = np.zeros((12, 6), np.float32)
    blocks.fill_run(2, run)
    np.testing.assert_array_equal(run, data[8:20])
    real = blocks.fill

    def fill(block, dest):
        if block == 3:
            raise OSError("block 3 failed")
        real(block, dest)

    blocks.fill = fill  # one failing block: its error, the others filled
    errors = blocks.fill_many([(2, out[0]), (3, out[1])], parallel=False)
    assert errors[0] is None and str(errors[1]) == "block 3 failed"
    source.close()
