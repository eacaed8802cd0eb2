"""Rows read cold: a batch's rows asked of the disk at once (memory map, raw chunks)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nn_handler._io.rows import mapped
from nn_handler._io.storage import byte_source
from nn_handler.dataloaders import H5LazyDataset

from helpers.files import h5_rows, images


@pytest.fixture
def advised(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[int], list[int]]]:
    """Each ``MappedFile.advise`` call: the byte ranges asked for."""
    calls: list[tuple[list[int], list[int]]] = []
    advise = byte_source.MappedFile.advise

    def spy(self: Any, starts: np.ndarray[Any, Any], ends: np.ndarray[Any, Any]) -> None:
        calls.append((starts.tolist(), ends.tolist()))
        advise(self, starts, ends)

    monkeypatch.setattr(byte_source.MappedFile, "advise", spy)
    return calls


def rows_of(ds: H5LazyDataset) -> Any:
    return ds._row_readers()[0]._rows


def h5_offsets(source: Any, rows: list[int]) -> list[int]:
    """Where the rows' bytes start in the file (from the chunk offsets HDF5 reports)."""
    per, n = source.rows_per_chunk, source.rows.row_nbytes
    return [int(source.offsets[r // per]) + (r % per) * n for r in rows]


@pytest.mark.parametrize("layout", ["contiguous", "chunked"])
def test_a_cold_batch_asks_for_all_its_rows_first(
    make_h5: Any, advised: list[tuple[list[int], list[int]]], layout: str
) -> None:
    path: Path = make_h5({"x": (images(300), layout)})
    ds = H5LazyDataset(path, "x", decoded_budget=1)  # the rows do not fit in memory
    source = rows_of(ds)
    assert source.strategy == "memmap" and not source._temperature.fits
    advised.clear()  # (the layout check's probe of the first and last row)
    source._temperature.cold = True
    rows = [250, 3, 3, 120, 7]
    np.testing.assert_array_equal(ds[rows].numpy(), h5_rows(path, "x", rows))
    assert len(advised) == 1
    starts, ends = advised[0]
    assert sorted(set(starts)) == sorted(h5_offsets(source, [250, 3, 120, 7]))
    assert all(e - s == source.rows.row_nbytes for s, e in zip(starts, ends, strict=True))
    source._temperature.cold = False  # warm: a gather asks for nothing first
    np.testing.assert_array_equal(ds[rows].numpy(), h5_rows(path, "x", rows))
    assert len(advised) == 1


def test_only_rows_beyond_memory_are_read_without_read_around(
    make_h5: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    randomly: list[str] = []
    monkeypatch.setattr(
        byte_source.MappedFile, "read_randomly", lambda self: randomly.append(self.path)
    )
    path: Path = make_h5({"x": (images(300), "contiguous")})
    fits = H5LazyDataset(path, "x")  # 14 KB: the kernel's read-around brings it in at once
    fits[[5, 9]]
    assert rows_of(fits)._temperature.fits and randomly == []
    beyond = H5LazyDataset(path, "x", decoded_budget=1)
    beyond[[5, 9]]
    assert not rows_of(beyond)._temperature.fits and randomly == [str(path)]


def test_temperature_follows_the_gathers() -> None:
    t = mapped._Temperature(12288)
    row_s = t._ROW_S + 12288 / t._BYTES_PER_S  # one row gathered from memory
    assert t.cold
    t.after(time.perf_counter(), 256)  # as fast as memory
    assert not t.cold
    t.after(time.perf_counter() - 256 * 40 * row_s, 256)  # 40x a copy from memory
    assert t.cold
    t.after(time.perf_counter() - 256 * 5 * row_s, 256)  # 5x: still cold
    assert t.cold
    t.after(time.perf_counter(), 10_000, runs=8)  # runs copied at memory speed
    assert not t.cold


def test_advise_on_a_real_map_reads_the_same_bytes(make_h5: Any) -> None:
    path: Path = make_h5({"x": (images(300), "contiguous")})
    local = byte_source.LocalFile(str(path))
    mapped_file = local.map()
    offsets = np.array([0, 4096, 10_000, mapped_file.data.size - 8], dtype=np.int64)
    mapped_file.advise(offsets, offsets + 16)  # (no error past the end: clipped to the file)
    local.advise(offsets, offsets + 8)
    assert bytes(mapped_file.data[:8]) == path.read_bytes()[:8]
