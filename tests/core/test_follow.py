"""Datasets, loaders and samplers that follow a file a SWMR writer appends to.

The writer is a real process (``_writer``): it creates ``x`` (row ``i`` holds ``4i .. 4i+3``)
and ``y`` (row ``i`` holds ``i``), turns SWMR on, then appends rows when told and says when
they are flushed. Every wait has a timeout and every process is joined with one.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import time
from collections.abc import Iterator

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    CombinedHDF5Dataset,
    FileChangedError,
    H5LazyDataset,
    batched_loader,
)

from helpers.platform_marks import needs_fork

WAIT_S = 60


def _ctx() -> mp.context.BaseContext:
    """Where the writer runs: a forked process (the tests that start one need fork)."""
    return mp.get_context("fork")


def _rows(start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(start * 4, stop * 4, dtype=np.float32).reshape(-1, 4)
    return x, np.arange(start, stop, dtype=np.int64)


def _writer(path: str, compression: str | None, todo: mp.Queue, done: mp.Queue) -> None:
    """Create the file with 100 rows, turn SWMR on, append ``n`` rows per ``n`` received."""
    with h5py.File(path, "w", libver="latest") as f:
        x0, y0 = _rows(0, 100)
        x = f.create_dataset(
            "x", data=x0, maxshape=(None, 4), chunks=(16, 4), compression=compression
        )
        y = f.create_dataset("y", data=y0, maxshape=(None,), chunks=(16,))
        f.swmr_mode = True
        done.put(100)
        while (n := todo.get(timeout=WAIT_S)) is not None:
            if isinstance(n, np.ndarray):  # rows to read back, as h5py reads them
                done.put(x[np.sort(n)][np.argsort(np.argsort(n))])
                continue
            keys = (x, y)
            if isinstance(n, tuple):  # ("x", n) / ("y", n): one key, as a writer mid-append
                keys, n = ((x,) if n[0] == "x" else (y,)), n[1]
            for dset in keys:
                old = dset.shape[0]
                dset.resize(old + n, axis=0)
                dset[old:] = _rows(old, old + n)[0 if dset is x else 1]
                dset.flush()
            done.put(min(x.shape[0], y.shape[0]))


class Writer:
    """The writer process, driven from the test."""

    def __init__(self, path: str, compression: str | None) -> None:
        ctx = _ctx()
        self.todo, self.done = ctx.Queue(), ctx.Queue()
        self.proc = ctx.Process(target=_writer, args=(path, compression, self.todo, self.done))
        self.proc.start()
        self.length = self.done.get(timeout=WAIT_S)

    def append(self, n: int | tuple[str, int]) -> int:
        self.todo.put(n)
        self.length = self.done.get(timeout=WAIT_S)
        return self.length

    def read(self, rows: np.ndarray) -> np.ndarray:
        """Rows of ``x`` as the writer's h5py reads them.

        (Not read here: HDF5 shares one open file among the opens of a process, and a second
        SWMR open beside the dataset's would read through the same metadata.)
        """
        self.todo.put(np.asarray(rows))
        return self.done.get(timeout=WAIT_S)

    def stop(self) -> None:
        self.todo.put(None)
        self.proc.join(timeout=WAIT_S)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=WAIT_S)
        assert self.proc.exitcode == 0


@contextlib.contextmanager
def writing(tmp_path, compression: str | None = None) -> Iterator[tuple[str, Writer]]:
    path = str(tmp_path / "growing.h5")
    writer = Writer(path, compression)
    try:
        yield path, writer
    finally:
        writer.stop()


def _epoch(loader, writer: Writer, append: int) -> tuple[np.ndarray, np.ndarray]:
    """One epoch's ``(x, y)``; ``append`` rows are appended once its first batch arrived."""
    xs, ys = [], []
    for k, (x, y) in enumerate(loader):
        if k == 0 and append:
            writer.append(append)
        xs.append(x.numpy().copy())
        ys.append(y.numpy().copy())
    return np.concatenate(xs), np.concatenate(ys)


CASES = [(0, "shuffle", None), (2, "shuffle", "gzip"), (0, "chunks", "gzip"), (2, "chunks", None)]


@needs_fork
@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("workers", "order", "compression"), CASES)
def test_loader_follows_the_writer_epoch_by_epoch(tmp_path, workers, order, compression):
    with writing(tmp_path, compression) as (path, writer):
        ds = H5LazyDataset(path, "x", "y")
        sampler = None
        if order == "chunks":
            sampler = ChunkShuffleSampler(ds, seed=1, batch_size=16, num_workers=workers)
        loader = batched_loader(
            ds,
            16,
            shuffle=sampler is None,
            sampler=sampler,
            num_workers=workers,
            persistent_workers=workers > 0,
            timeout=WAIT_S if workers else 0,
        )
        for epoch in range(3):
            at_start = writer.length
            if sampler is not None:
                sampler.set_epoch(epoch)
            x, y = _epoch(loader, writer, append=40 if epoch < 2 else 0)
            # every row present at the epoch's start exactly once; none appended during it
            assert np.array_equal(np.sort(y), np.arange(at_start))
            assert np.array_equal(x, writer.read(y))
        assert ds.refresh() == writer.length == 180
        ds.close()


@needs_fork
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_refresh_in_the_main_process_and_in_a_persistent_worker(tmp_path):
    with writing(tmp_path, "gzip") as (path, writer):
        ds = H5LazyDataset(path, "x", "y")
        assert ds.refresh() == len(ds) == 100
        assert not ds.is_open  # a refresh leaves no handle for a forked worker to inherit
        lengths = DataLoader(
            _Refreshes(ds), batch_size=None, num_workers=1, persistent_workers=True, timeout=WAIT_S
        )
        assert list(lengths) == [100]
        writer.append(30)
        assert list(lengths) == [130]  # the worker's copy, refreshed in the worker
        assert ds.refresh() == len(ds) == 130
        x, y = ds[list(range(95, 130))]
        assert np.array_equal(y.numpy(), np.arange(95, 130))
        assert np.array_equal(x.numpy(), writer.read(np.arange(95, 130)))
        assert ds[129][1].item() == 129
        with pytest.raises(IndexError):
            ds[130]
        ds.close()


@needs_fork
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_rows_appended_before_the_writer_closed_the_file_are_followed(tmp_path):
    with writing(tmp_path) as (path, writer):
        ds = H5LazyDataset(path, "x", "y")
        writer.append(25)
    assert ds.refresh() == 125  # opened without SWMR now: the writer is gone
    assert ds[124][1].item() == 124
    assert ds.refresh() == 125
    ds.close()


def _appender(path: str, n: int, todo: mp.Queue, done: mp.Queue) -> None:
    """Open an existing file for SWMR writing, append ``n`` rows, hold it until told."""
    with h5py.File(path, "a", libver="latest") as f:
        f.swmr_mode = True
        x, y = f["x"], f["y"]
        old = x.shape[0]
        new_x, new_y = _rows(old, old + n)
        for dset, new in ((x, new_x), (y, new_y)):
            dset.resize(old + n, axis=0)
            dset[old:] = new
            dset.flush()
        done.put(old + n)
        todo.get(timeout=WAIT_S)


@needs_fork
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_decoded_copy_of_the_old_size_is_never_served_as_the_grown_file(tmp_path):
    path = str(tmp_path / "decoded.h5")
    x, y = _rows(0, 80_000)  # 1.3 MB of gzip chunks: decoded once, shared by the node
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("x", data=x, maxshape=(None, 4), chunks=(1024, 4), compression="gzip")
        f.create_dataset("y", data=y, maxshape=(None,), chunks=(1024,))
    ds = H5LazyDataset(path, "x", "y")
    assert np.array_equal(ds[np.arange(80_000)][0].numpy(), x)
    assert ds._x._rows.engine.decoded.blocks is not None  # the whole decoded copy served that
    ds.close()
    ctx = _ctx()
    todo, done = ctx.Queue(), ctx.Queue()
    writer = ctx.Process(target=_appender, args=(path, 1000, todo, done))
    writer.start()
    try:
        assert done.get(timeout=WAIT_S) == 81_000
        assert ds.refresh() == 81_000
        got_x, got_y = ds[np.arange(79_500, 81_000)]
        assert np.array_equal(got_y.numpy(), np.arange(79_500, 81_000))
        assert np.array_equal(got_x.numpy(), _rows(79_500, 81_000)[0])
        assert ds._x._rows.engine.decoded.blocks is None  # no copy of a file that grows
    finally:
        todo.put(None)
        writer.join(timeout=WAIT_S)
        ds.close()
    assert writer.exitcode == 0


@needs_fork
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_only_rows_every_key_holds_are_served(tmp_path):
    with writing(tmp_path) as (path, writer):
        ds = H5LazyDataset(path, "x", "y")
        writer.append(("x", 30))  # x resized and written, y not yet
        assert ds.refresh() == 100
        writer.append(("y", 20))
        assert ds.refresh() == 120
        x, y = ds[[119, 0]]
        assert y.tolist() == [119, 0] and x[0].tolist() == [476.0, 477.0, 478.0, 479.0]
        with pytest.raises(IndexError):
            ds[125]  # x holds it, y does not: not served
        ds.close()


class _Refreshes(Dataset):
    """One item: the dataset's length as ``refresh()`` gives it in the process that asks."""

    def __init__(self, ds: H5LazyDataset) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> int:
        return self.ds.refresh()


@needs_fork
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_mid_epoch_state_resumes_exactly_after_the_file_grew(tmp_path):
    with writing(tmp_path) as (path, writer):
        writer.append(60)
        ds = H5LazyDataset(path, "x", "y")
        whole = ChunkShuffleSampler(ds, seed=7)
        whole.set_epoch(1)
        order = list(whole)
        sampler = ChunkShuffleSampler(ds, seed=7)
        sampler.set_epoch(1)
        it = iter(sampler)
        head = [next(it) for _ in range(70)]
        state = sampler.state_dict()
        assert state["data_len"] == 160
        writer.append(50)
        again = H5LazyDataset(path, "x", "y")
        resumed = ChunkShuffleSampler(again, seed=0)
        resumed.load_state_dict(state)
        rest = list(resumed)
        assert head + rest == order
        x, y = again[rest]
        assert np.array_equal(y.numpy(), rest)
        assert np.array_equal(x.numpy(), writer.read(np.array(rest)))
        resumed.set_epoch(2)
        assert sorted(resumed) == list(range(210))
        ds.close()
        again.close()


@needs_fork
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_combined_keeps_its_index_and_says_it_does_not_follow(tmp_path, caplog):
    with writing(tmp_path) as (path, writer):
        ds = CombinedHDF5Dataset(
            path, load_fields=["x", "y"], field_names={"x": "x", "y": "y"}, cache_size=0
        )
        writer.append(20)
        with caplog.at_level(logging.WARNING, logger="nn_handler"):
            assert ds.refresh() == len(ds) == 100
        assert "CombinedHDF5Dataset does not follow files that grow" in caplog.text
        batch = ds[[0, 99]]
        assert batch["y"].tolist() == [0, 99]
        ds.close()


def _plain(path, n: int) -> None:
    x, y = _rows(0, n)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=x, chunks=(16, 4))
        f.create_dataset("y", data=y)


def test_refresh_of_a_file_nobody_writes_costs_a_stat(tmp_path):
    path = tmp_path / "still.h5"
    _plain(path, 50)
    ds = H5LazyDataset(path, "x", "y")
    start = time.perf_counter()
    for _ in range(200):
        assert ds.refresh() == 50
    per_call = (time.perf_counter() - start) / 200
    assert not ds.is_open
    assert per_call < 2e-3  # one stat (~5 us): generous for a busy machine
    loader = batched_loader(ds, 16, shuffle=True)
    assert sorted(torch.cat([y for _, y in loader]).tolist()) == list(range(50))


def test_a_replaced_file_raises(tmp_path):
    path = tmp_path / "d.h5"
    _plain(path, 50)
    ds = H5LazyDataset(path, "x", "y")
    _plain(tmp_path / "new.h5", 60)
    os.replace(tmp_path / "new.h5", path)
    with pytest.raises(FileChangedError, match="replaced by another file"):
        ds.refresh()


@pytest.mark.parametrize("rows", [30, 50])
def test_a_file_rewritten_in_place_raises(tmp_path, rows):
    path = tmp_path / "d.h5"
    _plain(path, 50)
    ds = H5LazyDataset(path, "x", "y")
    time.sleep(0.01)
    with h5py.File(path, "r+") as f:  # shrunk, or rows rewritten: the same inode either way
        if rows < 50:
            del f["x"], f["y"]
            x, y = _rows(0, rows)
            f["x"], f["y"] = x, y
        else:
            f["x"][0] = -1
    with pytest.raises(FileChangedError, match="changed after the dataset was built"):
        ds.refresh()
    with pytest.raises(FileChangedError):
        ds[[0, 1]]
