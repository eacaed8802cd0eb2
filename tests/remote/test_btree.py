"""The B-tree readahead hint: the children it names are exactly the nodes h5py reads next."""

from __future__ import annotations

import io

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nn_handler._io.storage.remote import object_file
from nn_handler._io.storage.remote.btree import btree_children
from nn_handler.dataloaders import H5LazyDataset


class _Logged(io.RawIOBase):
    """A local file that records every read h5py makes: (offset, bytes)."""

    def __init__(self, path):
        super().__init__()
        self.file = open(path, "rb")  # noqa: SIM115 (closed in close())
        self.reads: list[tuple[int, bytes]] = []

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, offset, whence=io.SEEK_SET):
        return self.file.seek(offset, whence)

    def tell(self):
        return self.file.tell()

    def readinto(self, buffer):
        pos = self.file.tell()
        n = self.file.readinto(buffer)
        self.reads.append((pos, bytes(memoryview(buffer)[:n])))
        return n

    def close(self):
        self.file.close()
        super().close()


def _walk_reads(path, key):
    """Every read of ``key``'s chunk index walk, after the open."""
    logged = _Logged(path)
    try:
        with h5py.File(logged, "r") as f:
            dset = f[key]
            start = len(logged.reads)
            dset.id.chunk_iter(lambda info: None)
            return logged.reads[start:]
    finally:
        logged.close()


@pytest.mark.parametrize(
    ("shape", "chunks"),
    [((40_000,), (16,)), ((40_000, 3), (16, 3)), ((4000, 4, 5), (2, 4, 5)), ((300, 300), (10, 10))],
)
def test_children_are_the_nodes_the_walk_reads(tmp_path, shape, chunks):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        data = np.arange(np.prod(shape), dtype=np.int16).reshape(shape)
        f.create_dataset("x", data=data, chunks=chunks, compression="gzip")
    size = path.stat().st_size
    reads = _walk_reads(path, "x")
    nodes = {pos: data for pos, data in reads if data[:4] == b"TREE"}
    assert len(nodes) == len(reads) > 3  # the walk reads whole nodes, one per read
    named: set[int] = set()
    internal = 0
    for data in nodes.values():
        children = btree_children(data, size)
        if data[5] == 0:
            assert children == []  # a leaf's children are chunks: never fetched ahead
        else:
            internal += 1
            assert children and set(children) <= set(nodes)
            named |= set(children)
    root = reads[0][0]
    assert internal >= 1 and named == set(nodes) - {root}


def test_no_guess_for_what_is_not_a_chunk_node():
    assert btree_children(b"", 100) == []
    assert btree_children(b"HEAP" + bytes(100), 10_000) == []
    assert btree_children(b"TREE\x00\x01" + bytes(600), 10_000) == []  # a group B-tree


@pytest.fixture(scope="module")
def internal_node(tmp_path_factory):
    """An internal node of a real chunk index, and the size of its file."""
    path = tmp_path_factory.mktemp("b") / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.zeros((20_000, 2)), chunks=(8, 2), compression="gzip")
    node = next(d for _, d in _walk_reads(path, "x") if d[5] > 0)
    return node, path.stat().st_size


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_damaged_nodes_never_raise_and_stay_in_the_file(internal_node, data):
    original, size = internal_node
    assert btree_children(original, size)
    node = bytearray(original)
    for _ in range(data.draw(st.integers(1, 8))):
        node[data.draw(st.integers(0, len(node) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(node)))
    children = btree_children(bytes(node[:cut] if data.draw(st.booleans()) else node), size)
    assert all(0 < c < size for c in children)


def test_a_url_walks_the_index_in_a_few_rounds(http, monkeypatch):
    with h5py.File(http.root / "f.h5", "w") as f:
        f.create_dataset("x", data=np.zeros((100_000, 2)), chunks=(16, 2), compression="gzip")
    rounds = [0]
    read = object_file.RemoteFile.read_ranges

    def counted(self, ranges, buffers):
        rounds[0] += 1  # one call: one round of concurrent requests
        return read(self, ranges, buffers)

    monkeypatch.setattr(object_file.RemoteFile, "read_ranges", counted)
    ds = H5LazyDataset(http.url("f.h5"), "x")
    with h5py.File(http.root / "f.h5") as f:
        nodes = len(_walk_reads(http.root / "f.h5", "x"))
        assert np.array_equal(ds[[0, 99_999]].numpy(), f["x"][[0, 99_999]])
    assert nodes > 80 and rounds[0] < 25  # instead of one round per node
