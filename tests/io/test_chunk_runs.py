"""Sequential reads of small chunks in runs (``TableChunks.fill_run``, ``decode_many``).

Every read is compared with a direct h5py read of the same rows.
"""

import zlib

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nn_handler._io.chunks import block_fillers
from nn_handler._io.chunks.block_fillers import TableChunks
from nn_handler._io.chunks.codecs import pipeline_for
from nn_handler._io.chunks.decoders import ChunkDecodeError
from nn_handler._io.errors import CorruptFileError
from nn_handler._io.file.chunk_walk import read_chunk_index
from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler._io.rows.reader import RowReader

from helpers.files import h5_rows

hdf5plugin = pytest.importorskip("hdf5plugin")

N = 403  # a short last chunk for every chunk length below
COMPOUND = np.dtype([("a", "<i4"), ("b", "<f8"), ("c", "S3")])

FILTERS = {
    "gzip": {"compression": "gzip"},
    "shuffle+gzip": {"compression": "gzip", "shuffle": True},
    "fletcher32+gzip": {"compression": "gzip", "fletcher32": True},
    "shuffle+gzip+fletcher32": {"compression": "gzip", "shuffle": True, "fletcher32": True},
    "zstd": dict(hdf5plugin.Zstd(clevel=3)),  # decoded one chunk at a time (not batched)
    "lzf": {"compression": "lzf"},  # h5py decodes: no runs
}


def values(dtype, shape=(N, 3)):
    rng = np.random.default_rng(0)
    if dtype == COMPOUND:
        out = np.zeros(shape[0], COMPOUND)
        out["a"] = np.arange(shape[0])
        out["b"] = rng.standard_normal(shape[0])
        out["c"] = [b"x%d" % (i % 50) for i in range(shape[0])]
        return out
    return (rng.standard_normal(shape) * 100).astype(dtype)


def reader(path, key="x"):
    return RowReader(H5Source(str(path), FileOptions()), key)


@pytest.fixture
def runs(monkeypatch):
    """Record the blocks each ``fill_run`` call fills."""
    seen = []
    original = TableChunks.fill_run

    def spy(self, first, dest):
        seen.append((first, len(dest) // self.geometry.block_rows))
        return original(self, first, dest)

    monkeypatch.setattr(TableChunks, "fill_run", spy)
    return seen


@pytest.mark.parametrize("name", list(FILTERS))
@pytest.mark.parametrize("rows", [1, 3, 200])  # 200 rows: 2400 bytes, one inflate each
def test_small_chunks_read_in_order_equal_h5py(tmp_path, runs, name, rows):
    path = tmp_path / "f.h5"
    data = values(np.float32)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(rows, 3), **FILTERS[name])
    r = reader(path)
    for start, stop in [(0, N), (1, N - 1), (5, 6), (0, rows), (N - 1, N), (7, 100)]:
        np.testing.assert_array_equal(r.read_range(start, stop), data[start:stop])
    assert bool(runs) == (name != "lzf")  # h5py decodes lzf: it reads a range in one call


@pytest.mark.parametrize("dtype", [np.int64, np.uint8, np.float16, COMPOUND])
def test_runs_serve_every_dtype_and_several_datasets(tmp_path, runs, dtype):
    path = tmp_path / "f.h5"
    x, y = values(dtype), values(dtype, (N,))
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=x, chunks=(2, *x.shape[1:]), compression="gzip", shuffle=True)
        f.create_dataset("g/y", data=y, chunks=(1,), compression="gzip")
    source = H5Source(str(path), FileOptions())
    for key, want in (("x", x), ("g/y", y)):
        got = RowReader(source, key).read_range(0, N)
        assert got.tobytes() == want.tobytes() == h5_rows(path, key).tobytes()
    assert len(runs) == 2


def test_chunks_out_of_file_order(tmp_path, runs):
    path = tmp_path / "f.h5"
    data = values(np.int32)
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data.shape, data.dtype, chunks=(2, 3), compression="gzip")
        for a in reversed(range(0, N, 2)):  # the last chunk first in the file
            d[a : a + 2] = data[a : a + 2]
    index = read_chunk_index(h5py.File(path)["x"], "x")
    assert np.all(np.diff(index.offsets[np.argsort(index.coords[:, 0])]) < 0)
    np.testing.assert_array_equal(reader(path).read_range(3, N), data[3:])
    assert runs


def test_a_chunk_whose_filter_was_skipped(tmp_path):
    path = tmp_path / "f.h5"
    data = values(np.int16, (20, 4))
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data.shape, data.dtype, chunks=(2, 4), compression="gzip")
        for a in range(0, 20, 2):
            block = data[a : a + 2]
            if a == 6:  # stored as it is: HDF5 skips deflate for this chunk (mask bit 0)
                d.id.write_direct_chunk((a, 0), block.tobytes(), filter_mask=1)
            else:
                d.id.write_direct_chunk((a, 0), zlib.compress(block.tobytes()))
    np.testing.assert_array_equal(reader(path).read_range(0, 20), h5_rows(path, "x"))
    np.testing.assert_array_equal(h5_rows(path, "x"), data)


@pytest.mark.parametrize("fletcher32", [False, True])
def test_a_corrupt_chunk_in_a_run_is_named(tmp_path, fletcher32):
    path = tmp_path / "f.h5"
    data = values(np.float32)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(2, 3), compression="gzip", fletcher32=fletcher32)
    index = read_chunk_index(h5py.File(path)["x"], "x")
    bad = 17
    with open(path, "r+b") as fh:  # flip bytes in the middle of chunk 17's stream
        fh.seek(int(index.offsets[bad] + index.sizes[bad] // 2))
        fh.write(b"\xff\x00\xff")
    with pytest.raises(CorruptFileError, match=r"chunk at \(34, 0\)"):
        reader(path).read_range(0, N)


def test_decode_many_refuses_streams_of_the_wrong_length():
    data = np.arange(8, dtype=np.uint8)
    with h5py.File("mem.h5", "w", driver="core", backing_store=False) as f:
        pipe = pipeline_for(f.create_dataset("x", data=data, chunks=(4,), compression="gzip"))
    assert pipe is not None
    good, long = zlib.compress(data[:4].tobytes()), zlib.compress(data.tobytes())
    raw = np.frombuffer(good + long + good[:-2], np.uint8)
    out = np.empty((1, 4), np.uint8)
    pipe.decode_many(raw, [(0, len(good))], [0], out)
    assert out.tobytes() == data[:4].tobytes()
    for span in [(len(good), len(long)), (len(good) + len(long), len(good) - 2)]:
        with pytest.raises(ChunkDecodeError):  # inflates too far; truncated
            pipe.decode_many(raw, [span], [0], out)


@settings(max_examples=60, deadline=None)
@given(
    offsets=st.lists(st.integers(0, 1 << 24), min_size=1, max_size=40, unique=True),
    size=st.integers(1, 200_000),
)
def test_spans_cover_every_chunk_once_in_file_order(offsets, size):
    off = np.array(offsets, dtype=np.int64)
    sizes = np.full(len(off), size, dtype=np.int64)
    spans = block_fillers._spans(off, sizes)
    order = np.concatenate(spans)
    assert sorted(order.tolist()) == list(range(len(off)))
    assert np.all(np.diff(off[order]) > 0)  # file order
    for span in spans:
        starts, ends = off[span], off[span] + sizes[span]
        assert np.all(starts[1:] - np.maximum.accumulate(ends)[:-1] <= block_fillers._GAP_BYTES)
        assert starts[-1] - starts[0] < block_fillers._SPAN_BYTES
        parts = block_fillers._parts(span, 7)
        covered = [b for a, z in parts for b in range(a, z)]
        assert sorted(covered) == sorted(span.tolist())
        assert all(0 < z - a <= 7 for a, z in parts)


@settings(max_examples=25, deadline=None)
@given(bounds=st.tuples(st.integers(0, N), st.integers(0, N)).map(sorted))
def test_any_range_equals_h5py(tmp_path_factory, bounds):
    path = tmp_path_factory.getbasetemp() / "runs_any_range.h5"
    if not path.exists():
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=values(np.float64), chunks=(3, 3), compression="gzip",
                             shuffle=True)  # fmt: skip
    start, stop = bounds
    np.testing.assert_array_equal(
        reader(path).read_range(start, stop), h5_rows(path, "x")[start:stop]
    )
