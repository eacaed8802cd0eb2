"""The chunk table read for pread: offsets checked against the file, bytes equal to HDF5's."""

import os
import pickle
import shutil

import h5py
import numpy as np
import pytest

from nn_handler._io.chunks.table import ChunkTable
from nn_handler.errors import FileChangedError

from helpers.files import images
from helpers.process import as_if_forked


def table(path, key="x"):
    with h5py.File(path, "r") as f:
        return ChunkTable.build(f[key], str(path))


def test_raw_bytes_equal_read_direct_chunk(make_h5):
    path = make_h5({"x": (images(61), "gzip-shuffle")})
    t = table(path)
    with h5py.File(path, "r") as f:
        for block in range(8):
            mask, raw = f["x"].id.read_direct_chunk((block * 8, 0, 0))
            got, got_mask = t.read(block)
            assert got.tobytes() == raw and got_mask == mask


def test_only_whole_row_chunks_that_are_all_written(make_h5, tmp_path):
    assert table(make_h5({"x": (images(20), "chunked-split-rows")})) is None
    path = tmp_path / "sparse.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", shape=(40, 3), dtype="f4", chunks=(8, 3), compression="gzip")
        d[0:8] = 1  # chunks 1..4 never written: HDF5 serves the fill value
    assert table(path) is None


def test_chunk_past_the_end_of_the_file_is_refused(make_h5, tmp_path):
    path = make_h5({"x": (images(64), "gzip")})
    t = table(path)
    short = tmp_path / "short.h5"
    shutil.copy(path, short)
    end = int((t.offsets + t.sizes).max())
    os.truncate(short, end - 1)
    with (
        h5py.File(path, "r") as f,
        pytest.raises(FileChangedError, match=r"short\.h5.*dataset '/x'.*has \d+ bytes"),
    ):
        ChunkTable.build(f["x"], str(short))
    os.truncate(path, end - 1)  # the file shrinks after the table was read
    with pytest.raises(FileChangedError, match=r"dataset '/x'.*truncated or corrupt"):
        t.read(0)


def test_a_replaced_file_is_refused(make_h5):
    path = make_h5({"x": (images(64), "gzip")})
    t = table(path)
    clone = pickle.loads(pickle.dumps(t))  # no descriptor travels: opened on first read
    assert clone.file._fd.peek() is None
    os.replace(make_h5({"x": (images(64, seed=5), "gzip")}), path)
    with pytest.raises(FileChangedError, match="was replaced"):
        clone.read(0)


def test_descriptor_is_per_process(make_h5):
    path = make_h5({"x": (images(16), "gzip")})
    t = table(path)
    t.read(0)
    old = t.file._fd.peek()
    assert old is not None and old.fd >= 0
    as_if_forked()  # the next read opens its own descriptor
    assert t.file._fd.inherited
    t.read(1)
    mine = t.file._fd.peek()
    assert mine is not None and mine is not old and not t.file._fd.inherited
    t.close()
    assert t.file._fd.peek() is None
    np.testing.assert_array_equal(np.frombuffer(t.read(1)[0], np.uint8).size > 0, True)


def test_built_from_the_layout_checks_index_without_walking_again(make_h5, monkeypatch):
    from nn_handler._io.file import chunk_walk
    from nn_handler._io.file.layout import inspect_layout
    from nn_handler._io.file.options import FileOptions
    from nn_handler._io.file.source import H5Source

    path = make_h5({"x": (images(61), "gzip-shuffle")})
    source = H5Source(str(path), FileOptions())
    dset = source.dataset("x")
    layout = inspect_layout(dset, source, "x")
    walked = ChunkTable.build(dset, str(path))

    def no_walk(*_):
        raise AssertionError("the chunk index was walked again")

    monkeypatch.setattr(chunk_walk, "visit_chunks", no_walk)
    given = ChunkTable.build(dset, str(path), layout.chunks)
    for name in ("offsets", "sizes", "masks"):
        np.testing.assert_array_equal(getattr(given, name), getattr(walked, name))
    source.close()


def test_read_many_equals_read(make_h5):
    path = make_h5({"x": (images(61), "gzip-shuffle")})
    t = table(path)
    blocks = [3, 0, 1, 2, 7, 3]  # adjacent chunks, and one twice
    buffers = [np.empty(int(t.sizes[b]), np.uint8) for b in blocks]
    masks = t.read_many(blocks, buffers)
    for block, buf, mask in zip(blocks, buffers, masks, strict=True):
        raw, one_mask = t.read(block)
        assert buf.tobytes() == raw.tobytes() and mask == one_mask
