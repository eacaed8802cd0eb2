"""Every ``RowStrategy`` serves what h5py reads, through every method of the protocol.

For each layout: the source ``choose_rows`` picks, h5py's slabs (``SlabRows``, which can serve
any dataset), and for chunked data the chunk engine with h5py decoding (``H5pyBlocks``). The
sources are called through ``RowReader``, which checks the arguments, so what differs between
them is only how the rows are read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nn_handler._io.chunks.engine import ChunkEngine
from nn_handler._io.chunks.h5py_rows import H5pyDataset
from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler._io.rows.choice import block_filler
from nn_handler._io.rows.chunked import ChunkedRows
from nn_handler._io.rows.reader import RowReader
from nn_handler._io.rows.slabs import SlabRows
from nn_handler._io.rows.strategy import BaseRows, RowStrategy

from helpers.files import LAYOUTS, images

N = 53  # no chunk size of LAYOUTS divides it: every edge chunk is partial


def _readers(path: Path) -> dict[str, RowReader]:
    """A reader per source that can serve ``path``'s ``x``, named by how it reads."""
    chosen = RowReader(H5Source(str(path), FileOptions()), "x")
    readers = {f"chosen-{chosen.strategy}": chosen}
    slabs = RowReader(H5Source(str(path), FileOptions()), "x")
    slabs._rows = SlabRows(slabs.rows, slabs.source)
    readers["slabs"] = slabs
    if chosen.chunk_rows is not None:
        h5 = RowReader(H5Source(str(path), FileOptions()), "x")
        h5py_rows = H5pyDataset(h5.source, "x")
        blocks = block_filler(h5.source.dataset("x"), h5.source, h5py_rows, decode=False)
        assert blocks is not None
        h5._rows = ChunkedRows(h5.rows, h5.source, ChunkEngine(h5.source, blocks, h5py_rows))
        readers["chunks-h5py"] = h5
    return readers


@pytest.fixture(scope="module", params=list(LAYOUTS))
def layout(request: Any, tmp_path_factory: Any) -> tuple[dict[str, RowReader], np.ndarray]:
    from helpers.files import write_layout

    path = tmp_path_factory.mktemp("rows") / f"{request.param}.h5"
    with h5py.File(path, "w") as f:
        write_layout(f, "x", images(N), request.param)
    with h5py.File(path, "r") as f:
        expected = f["x"][()]
    return _readers(path), expected


def test_every_source_is_a_row_source(layout: tuple[dict[str, RowReader], np.ndarray]) -> None:
    readers, _ = layout
    for reader in readers.values():
        source: RowStrategy = reader._rows  # the protocol, checked by mypy on this line
        assert isinstance(source, BaseRows) and source.strategy == reader.strategy


_settings = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_settings
@given(st.lists(st.integers(-N, N - 1), max_size=40))
def test_read_and_read_row(layout: tuple[dict[str, RowReader], np.ndarray], idx: list[int]) -> None:
    readers, expected = layout
    for name, reader in readers.items():
        assert reader.read(idx).tobytes() == expected[idx].tobytes(), name
        out = np.full((len(idx), 3, 4), np.nan, np.float32)
        assert reader.read(idx, out=out) is out and out.tobytes() == expected[idx].tobytes()
        strided = np.zeros((len(idx), 3, 8), np.float32)[:, :, ::2]  # not C-contiguous
        assert reader.read(idx, out=strided) is strided, name
        assert strided.tobytes() == expected[idx].tobytes(), name
        for i in idx[:3]:
            assert reader.read_row(i).tobytes() == expected[i].tobytes(), name


@_settings
@given(st.lists(st.tuples(st.integers(0, N), st.integers(0, 12)), max_size=12))
def test_read_range_and_runs(
    layout: tuple[dict[str, RowReader], np.ndarray], runs: list[tuple[int, int]]
) -> None:
    readers, expected = layout
    starts = np.array([s for s, _ in runs], dtype=np.int64)
    stops = np.minimum(starts + np.array([n for _, n in runs], dtype=np.int64), N)
    lengths = stops - starts
    dst = np.cumsum(lengths) - lengths
    want = [expected[s:e] for s, e in zip(starts.tolist(), stops.tolist(), strict=True)]
    for name, reader in readers.items():
        out = np.zeros((int(lengths.sum()), 3, 4), np.float32)
        reader.read_runs(starts, stops, dst, out)
        assert out.tobytes() == b"".join(w.tobytes() for w in want), name
        for (s, e), w in zip(zip(starts.tolist(), stops.tolist(), strict=True), want, strict=True):
            assert reader.read_range(s, e).tobytes() == w.tobytes(), name
            strided = np.zeros((e - s, 3, 8), np.float32)[:, :, ::2]  # not C-contiguous
            assert reader.read_range(s, e, out=strided) is strided, name
            assert strided.tobytes() == w.tobytes(), name


@_settings
@given(st.data())
def test_read_chunks_and_heads(layout: tuple[dict[str, RowReader], np.ndarray], data: Any) -> None:
    readers, expected = layout
    for name, reader in readers.items():
        rows = reader.chunk_rows
        if rows is None:
            with pytest.raises(ValueError, match="not chunked"):
                reader.read_chunks([0])
            continue
        count = -(-N // rows)
        chunks = data.draw(st.lists(st.integers(0, count - 1), max_size=6))
        got = reader.read_chunks(chunks)
        for c, block in zip(chunks, got, strict=True):
            assert block.tobytes() == expected[c * rows : (c + 1) * rows].tobytes(), name
        c = data.draw(st.integers(0, count - 1))
        n = data.draw(st.integers(1, min(rows, N - c * rows)))
        head = reader.read_chunk_head(c, n)
        assert head.tobytes() == expected[c * rows : c * rows + n].tobytes(), name


def test_window_bytes_and_plans(layout: tuple[dict[str, RowReader], np.ndarray]) -> None:
    """Planning a window changes no read; only a memory map or unchunked data needs no cache."""
    readers, expected = layout
    for name, reader in readers.items():
        needs = reader.window_cache_nbytes(16, 4)
        if reader.strategy == "memmap" or reader.chunk_rows is None:
            assert needs == 0, name
        else:
            assert needs >= 4 * 16 * reader.row_nbytes, name
        reader.plan_window(16, 4)
        reader.read_ahead(np.arange(16))
        idx = list(range(N - 1, -1, -3))
        assert reader.read(idx).tobytes() == expected[idx].tobytes(), name
        reader.clear_cache()
        assert reader.read(idx).tobytes() == expected[idx].tobytes(), name
