"""The dataset core (``dataloaders/_core``): a dataset class written in a few hooks gets the
chunk cache, windows, read-ahead, close and the context manager, and reads what h5py reads,
in this process and in DataLoader workers."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler._io.rows.plan import WindowPlan
from nn_handler._io.rows.reader import RowReader
from nn_handler.dataloaders import batched_loader
from nn_handler.dataloaders._contracts.protocols import (
    AdjacentChunks,
    ChunkAware,
    ExplainsWaits,
    PlansWindow,
    ReadsAhead,
    indexes_batches,
)
from nn_handler.dataloaders._core import ChunkedDataset, FileDataset, RowReaderDataset

ROWS, WIDTH, CHUNK = 96, 5, 8


class Rows(RowReaderDataset[torch.Tensor]):
    """A new dataset class as the core's docstring says to write one: the rows of one key."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        key: str = "x",
        transform: Callable[[Any], Any] | None = None,
        *,
        rdcc_nbytes: int = 1 << 20,
        decoded_budget: int | str | None = 0,
        file_options: FileOptions | None = None,
    ) -> None:
        self.transform = transform
        self._source = H5Source(path, self._file_options(Rows.__init__, locals()))
        try:
            self._x = RowReader(self._source, key)
        finally:
            self._source.close()

    @property
    def chunk_rows(self) -> int | None:
        return self._x.chunk_rows

    def __len__(self) -> int:
        return self._x.length

    def _sources(self) -> list[H5Source]:
        return [self._source]

    def _row_readers(self) -> list[RowReader]:
        return [self._x]

    def _transforms(self) -> list[Callable[[Any], Any] | None]:
        return [self.transform]

    def _sample(self, index: Any) -> torch.Tensor:
        return torch.from_numpy(self._x.read_row(index))

    def _batch(self, indices: Any) -> torch.Tensor:
        return self._read_rows(self._x, indices, None)


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> tuple[Path, np.ndarray]:
    path = tmp_path_factory.mktemp("core") / "rows.h5"
    x = np.random.default_rng(0).standard_normal((ROWS, WIDTH)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=x, chunks=(CHUNK, WIDTH), compression="gzip")
    return path, x


def test_a_subclass_has_every_capability_of_the_core(stored):
    ds = Rows(stored[0])
    for capability in (ChunkAware, PlansWindow, ReadsAhead, AdjacentChunks, ExplainsWaits):
        assert isinstance(ds, capability), capability
    assert indexes_batches(ds) and ds.adjacent_chunks == 1 and ds.chunk_rows == CHUNK
    assert ds.wait_causes(random_order=False) == []
    assert ds.reads_release_gil is ds._x.releases_gil
    assert Rows(stored[0], transform=torch.neg).reads_release_gil is False


def test_reads_match_h5py(stored):
    path, x = stored
    ds = Rows(path)
    assert len(ds) == ROWS
    assert torch.equal(ds[3], torch.from_numpy(x[3]))
    assert torch.equal(ds[-1], torch.from_numpy(x[-1]))
    assert torch.equal(ds[[5, 1, 70]], torch.from_numpy(x[[5, 1, 70]]))
    assert torch.equal(ds[np.arange(10, 30)], torch.from_numpy(x[10:30]))


def test_chunk_cache_and_window(stored):
    ds = Rows(stored[0], rdcc_nbytes=256)
    assert ds.chunk_cache_nbytes == 256
    one_block = CHUNK * WIDTH * 4
    assert ds.window_cache_nbytes(None, 3) == ds._x.window_cache_nbytes(CHUNK, 3) >= 3 * one_block
    ds.plan_window(WindowPlan(None, 4))  # grows the cache to a window and its two borders
    assert ds.chunk_cache_nbytes == ds.window_cache_nbytes(None, 6) > 256
    ds.plan_window(WindowPlan(None, 1))  # never shrinks it
    assert ds.chunk_cache_nbytes == ds.window_cache_nbytes(None, 6)
    ds.set_chunk_cache(4096, nslots=101)
    assert ds._source.options == FileOptions(rdcc_nbytes=4096, rdcc_nslots=101, decoded_budget=0)
    assert torch.equal(ds[[0, 50]], torch.from_numpy(stored[1][[0, 50]]))


def test_read_ahead_serves_the_batch_it_announced(stored):
    path, x = stored
    ds = Rows(path)
    ds.plan_window(WindowPlan(CHUNK, 2))
    assert ds.readahead_rows == ds._x.readahead_rows > 0
    batch = [40, 8, 17, 95]
    ds.read_ahead(batch)
    assert torch.equal(ds[batch], torch.from_numpy(x[batch]))


def test_close_and_the_context_manager(stored):
    ds = Rows(stored[0])
    assert not ds.is_open  # built without keeping a handle
    with ds as same:
        assert same is ds
        ds[0]
        assert ds.is_open
    assert not ds.is_open
    ds.close()  # twice is fine
    assert torch.equal(ds[1], torch.from_numpy(stored[1][1]))  # a read reopens


def test_file_options_resolve_as_for_every_dataset(stored):
    options = FileOptions(locking=False, decoded_budget=0)
    assert Rows(stored[0], file_options=options)._source.options == options
    with pytest.raises(TypeError, match=r"Rows: got file_options= and rdcc_nbytes=5"):
        Rows(stored[0], rdcc_nbytes=5, file_options=options)


def test_a_class_missing_a_hook_cannot_be_built(stored):
    class NoReaders(RowReaderDataset[torch.Tensor]):
        chunk_rows = None

        def __len__(self) -> int:
            return 0

        def _sources(self) -> list[H5Source]:
            return []

        def _sample(self, index: Any) -> Any:
            return index

        def _batch(self, indices: Any) -> Any:
            return indices

    with pytest.raises(TypeError, match="_row_readers"):
        NoReaders()
    assert issubclass(RowReaderDataset, ChunkedDataset) and issubclass(ChunkedDataset, FileDataset)


def test_output_buffer_is_private_memory_outside_workers():
    assert FileDataset._output_buffer((4, 2), np.dtype(np.float32)) is None


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataloader_reads_what_h5py_reads(stored, workers):
    path, x = stored
    timeout = 60 if workers else 0
    plain = DataLoader(Rows(path), batch_size=7, num_workers=workers, timeout=timeout)
    assert torch.equal(torch.cat(list(plain)), torch.from_numpy(x))
    batched = batched_loader(Rows(path), 7, num_workers=workers, timeout=timeout)
    assert torch.equal(torch.cat(list(batched)), torch.from_numpy(x))
