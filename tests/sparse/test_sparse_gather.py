"""Gathering ranges of 1-d datasets (sparse data / indices) through RowReader, every layout."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler._io.indices import plan_pieces
from nn_handler._io.rows.reader import RowReader
from nn_handler.dataloaders._sparse.gather import gather_ranges

N = 300
# name -> create_dataset keywords for a 1-d dataset of N float32 values
KINDS = {
    "contiguous": {},
    "chunked": {"chunks": (13,)},
    "gzip": {"chunks": (13,), "compression": "gzip"},
    "gzip-shuffle": {"chunks": (11,), "compression": "gzip", "shuffle": True},
    "lzf": {"chunks": (17,), "compression": "lzf"},
}
STRATEGY = {
    "contiguous": "memmap",
    "chunked": "memmap",
    "gzip": "decode",
    "gzip-shuffle": "decode",
    "lzf": "chunks",
}
VALUES = np.arange(N, dtype=np.float32) * 1.5


@pytest.fixture(scope="module")
def readers(tmp_path_factory):
    path = tmp_path_factory.mktemp("gather") / "d.h5"
    with h5py.File(path, "w") as f:
        for name, kw in KINDS.items():
            f.create_dataset(name, data=VALUES, **kw)
    source = H5Source(path, FileOptions(rdcc_nbytes=4 * 13 * 5))
    return {name: RowReader(source, name) for name in KINDS}


@st.composite
def ranges(draw):
    cuts = sorted(draw(st.sets(st.integers(0, N), max_size=30)))
    pairs = [(cuts[i], cuts[i + 1]) for i in range(0, len(cuts) - 1, 2)]
    empty = draw(st.lists(st.integers(0, N), max_size=3))  # empty ranges in between
    pairs = sorted(pairs + [(e, e) for e in empty if all(not a < e < b for a, b in pairs)])
    starts = np.array([a for a, _ in pairs], dtype=np.int64)
    stops = np.array([b for _, b in pairs], dtype=np.int64)
    return starts, stops


@pytest.mark.parametrize("kind", KINDS)
@given(picked=ranges())
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_gather_equals_slices(readers, kind, picked):
    starts, stops = picked
    reader = readers[kind]
    assert reader.strategy == STRATEGY[kind]
    got = gather_ranges(reader, starts, stops)
    expected = np.concatenate(
        [VALUES[a:b] for a, b in zip(starts, stops, strict=True)] + [VALUES[:0]]
    )
    np.testing.assert_array_equal(got, expected)
    # each range to its own place (a batch's rows in request order), cast as it is copied
    order = np.random.default_rng(starts.size).permutation(starts.size)
    lengths = (stops - starts)[order]
    dst = np.empty_like(starts)
    dst[order] = np.cumsum(lengths) - lengths
    out = np.full(int(lengths.sum()), -1.0)
    gather_ranges(reader, starts, stops, dst, out)
    parts = [VALUES[starts[k] : stops[k]] for k in order.tolist()]
    np.testing.assert_array_equal(out, np.concatenate([*parts, VALUES[:0]]).astype(np.float64))


def test_plan_pieces():
    starts, stops = np.array([0, 12, 30]), np.array([5, 27, 31])
    chunk_id, lo, hi, to, spill = plan_pieces(starts, stops, np.array([0, 5, 20]), 10)
    assert chunk_id.tolist() == [0, 1, 2, 3]
    assert list(zip(lo.tolist(), hi.tolist(), strict=True)) == [
        (0, 5),
        (12, 20),
        (20, 27),
        (30, 31),
    ]
    assert to.tolist() == [0, 5, 13, 20] and spill.tolist() == [False, False, True, False]


def test_read_chunks_and_heads(readers):
    gz, shuffled = readers["gzip"], readers["gzip-shuffle"]
    gz.clear_cache()
    np.testing.assert_array_equal(gz.read_chunk_head(2, 4), VALUES[26:30])
    assert len(gz._rows.engine.cache) == 0  # a head of a plain deflate chunk is not cached
    blocks = gz.read_chunks([2, 23])
    np.testing.assert_array_equal(blocks[0], VALUES[26:39])
    np.testing.assert_array_equal(blocks[1], VALUES[299:300])  # the short last chunk
    assert len(gz._rows.engine.cache) == 2
    np.testing.assert_array_equal(gz.read_chunk_head(2, 13), VALUES[26:39])  # from the cache
    shuffled.clear_cache()
    np.testing.assert_array_equal(shuffled.read_chunk_head(1, 3), VALUES[11:14])
    # shuffled over deflate: inflated whole, only the head's elements put back, nothing kept
    assert len(shuffled._rows.engine.cache) == 0
    readers["lzf"].clear_cache()
    np.testing.assert_array_equal(readers["lzf"].read_chunk_head(1, 3), VALUES[17:20])
    assert len(readers["lzf"]._rows.engine.cache) == 1  # h5py decodes: the whole chunk, kept
    np.testing.assert_array_equal(readers["chunked"].read_chunk_head(1, 2), VALUES[13:15])
    np.testing.assert_array_equal(readers["lzf"].read_chunks([0])[0], VALUES[:17])
    with pytest.raises(ValueError, match="is not chunked"):
        readers["contiguous"].read_chunks([0])
    with pytest.raises(IndexError, match="chunk 24 is out of range for 24 chunks"):
        gz.read_chunks([24])
    with pytest.raises(IndexError, match=r"rows \[0, 14\) of chunk 0 are outside"):
        gz.read_chunk_head(0, 14)
    with pytest.raises(IndexError, match=r"rows \[0, 2\) of chunk 23 are outside"):
        gz.read_chunk_head(23, 2)


@pytest.mark.parametrize("kind", ["gzip", "gzip-shuffle", "lzf"])
@given(chunks=st.lists(st.integers(0, 22), max_size=12))
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_read_chunks_in_any_order_and_number(readers, kind, chunks):
    # up to 12 chunks against a window of 5: beyond it they are read row by row instead
    reader = readers[kind]
    rows = reader.chunk_rows
    chunks = [c % -(-N // rows) for c in chunks]  # in range for this kind's chunk count
    got = reader.read_chunks(chunks)
    assert len(got) == len(chunks)
    for c, block in zip(chunks, got, strict=True):
        np.testing.assert_array_equal(block, VALUES[c * rows : (c + 1) * rows])
    if got:
        got[0][...] = -1  # a copy: the window's block is untouched
        again = reader.read_chunks([chunks[0]])[0]
        np.testing.assert_array_equal(again, VALUES[chunks[0] * rows : (chunks[0] + 1) * rows])


@pytest.mark.parametrize(
    ("kind", "heads"), [("gzip", True), ("gzip-shuffle", True), ("lzf", False)]
)
def test_heads_are_read_alone_only_where_they_decode_partly(readers, kind, heads, monkeypatch):
    # a range that ends early in a chunk no other range reaches: its head alone is needed. A
    # pipeline with no cheaper head would decode the whole chunk in a call of its own: read it
    # with the other whole chunks in one call instead
    reader = readers[kind]
    assert reader.decodes_heads is heads
    called = []
    original = RowReader.read_chunk_heads

    def spy(self, wanted):
        called.extend(chunk for chunk, _ in wanted)
        return original(self, wanted)

    monkeypatch.setattr(RowReader, "read_chunk_heads", spy)
    reader.clear_cache()
    chunk = reader.chunk_rows
    starts = np.array([5 * chunk - 3, 9 * chunk], dtype=np.int64)  # the first spills 2 rows
    stops = np.array([5 * chunk + 2, 9 * chunk + 4], dtype=np.int64)
    got = gather_ranges(reader, starts, stops)
    expected = np.concatenate([VALUES[a:b] for a, b in zip(starts, stops, strict=True)])
    np.testing.assert_array_equal(got, expected)
    assert called == ([5] if heads else [])
