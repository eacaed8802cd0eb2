"""Hostile arguments: every public numeric keyword, given each of a few hostile values.

Each value is either one the keyword documents as valid (listed in ``VALID``: the call must then
work, and a loader must serve its epoch) or refused by a ``ValueError`` / ``TypeError`` whose
message names the keyword and shows the value. Never an ``OverflowError``, a NumPy or torch
error from deep inside, a hang, or nonsense accepted in silence.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils import MP_STATUS_CHECK_INTERVAL
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from nn_handler import NNHandler, World
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    CombinedHDF5Dataset,
    DevicePrefetcher,
    DistributedEpochSampler,
    EpochShuffleSampler,
    H5LazyDataset,
    H5SampleDataset,
    RankMemCachedH5Dataset,
    ShardEpochSampler,
    ShardSampler,
    batched_loader,
    create_optimized_dataloader,
    epoch_permutation,
    fit_chunk_cache,
    pad_collate,
    set_decode_threads,
)

from helpers.integrations import quiet
from helpers.recordings import write_recording

NAN, INF, HUGE = math.nan, math.inf, 2**70
HOSTILE = (-1, 0, HUGE, NAN, INF, "3", 1.5, True, None)


class Files:
    """The small files every case reads (built once per module)."""

    def __init__(self, root: Path) -> None:
        self.lazy = root / "lazy.h5"
        with h5py.File(self.lazy, "w") as f:
            x = np.arange(400, dtype=np.float32).reshape(100, 4)
            f.create_dataset("x", data=x, chunks=(10, 4), compression="gzip")
            f.create_dataset("y", data=np.arange(100, dtype=np.int64), chunks=(10,))
        self.recording = write_recording(root / "rec.h5", 40, seed=0, uid_start=0)
        self.samples = root / "samples.h5"
        with h5py.File(self.samples, "w") as f:
            for i in range(5):
                f.create_dataset(f"s{i}", data=np.zeros(3, np.float32)).attrs["label"] = i

    def lazy_ds(self) -> H5LazyDataset:
        return H5LazyDataset(self.lazy, "x", "y")


def _train(files: Files, **kw: Any) -> Any:
    handler = NNHandler(torch.nn.Linear(4, 1), log_fn=None)
    handler.set_optimizer(torch.optim.SGD, lr=0.0)
    handler.set_loss_fn(lambda out, y: out.sum() * 0)
    handler.set_train_loader(files.lazy_ds(), batch_size=50)
    return handler.train(**{"epochs": 1, **kw})


def _samples(n: int) -> list[dict[str, Any]]:
    return [{"data": torch.zeros(2 + i, dtype=torch.float32), "labels": {}} for i in range(n)]


def _int_samples() -> list[dict[str, Any]]:
    return [{"data": torch.zeros(2 + i, dtype=torch.int16), "labels": {}} for i in range(2)]


Build = Callable[..., Any]
#: case: (call with the keyword, {keyword: the hostile values documented as valid there})
CASES: dict[str, tuple[Build, dict[str, tuple[Any, ...]]]] = {
    "H5LazyDataset": (
        lambda f, **kw: H5LazyDataset(f.lazy, "x", "y", **kw),
        {"rdcc_nbytes": (0,), "rdcc_nslots": (0,), "rdcc_w0": (0,), "cache_limit": (None,)},
    ),
    "RankMemCachedH5Dataset": (
        lambda f, **kw: RankMemCachedH5Dataset(f.lazy, "x", "y", log_fn=quiet, **kw),
        {
            "rdcc_nbytes": (0,),
            "rdcc_nslots": (0,),
            "rdcc_w0": (0,),
            "rank": (0, None),
            "world_size": (None,),
            "cache_limit": (None,),
        },
    ),
    "CombinedHDF5Dataset": (
        lambda f, **kw: CombinedHDF5Dataset([f.recording], **kw),
        {
            # thresholds compared with the file's own float field: any number but NaN
            "epoch_min": (-1, 0, HUGE, INF, 1.5, None),
            "epoch_max": (-1, 0, HUGE, INF, 1.5, None),
            "label": (0, None),
            "cache_size": (0,),
            "min_valid_fraction": (0, None),
            # checked against the data's shape where a filter reads it (test_combined_*)
            "time_axis": (-1, 0, HUGE),
            "max_open_files": (),
            "rdcc_nbytes": (0,),
            "rdcc_nslots": (0,),
            "rdcc_w0": (0,),
            "cache_limit": (None,),
        },
    ),
    "H5SampleDataset": (
        lambda f, **kw: H5SampleDataset(f.samples, **kw),
        {"limit": (-1, HUGE), "cache_limit": (None,)},  # -1: every sample; a limit above: all
    ),
    "EpochShuffleSampler": (
        lambda f, **kw: EpochShuffleSampler(**{"data_len": 10, **kw}),
        {"data_len": (0,), "seed": (0,), "num_samples": (0, None)},
    ),
    "DistributedEpochSampler": (
        lambda f, **kw: DistributedEpochSampler(**{"data_len": 10, **kw}),
        {"data_len": (0,), "seed": (0,), "rank": (0, None), "world_size": (None,)},
    ),
    "ChunkShuffleSampler": (
        lambda f, **kw: ChunkShuffleSampler(f.lazy_ds(), **kw),
        {
            "seed": (0,),
            "window_chunks": (None,),
            "block_size": (None,),
            "rank": (0, None),
            "world_size": (None,),
            "batch_size": (None,),
            "num_workers": (0,),
        },
    ),
    "ShardEpochSampler": (
        lambda f, **kw: ShardEpochSampler(**{"total": 10, "world": World(), **kw}),
        {"total": (0,), "seed": (0,)},
    ),
    "ShardSampler": (lambda f, **kw: ShardSampler(**{"data_len": 10, **kw}), {"data_len": (0,)}),
    "epoch_permutation": (
        lambda f, **kw: epoch_permutation(**{"n": 10, "seed": 0, "epoch": 0, **kw}),
        {"n": (0,), "seed": (0,), "epoch": (0,)},
    ),
    "set_epoch": (lambda f, **kw: EpochShuffleSampler(10).set_epoch(**kw), {"epoch": (0,)}),
    "DevicePrefetcher": (lambda f, **kw: DevicePrefetcher([1], **kw), {"depth": ()}),
    "batched_loader": (
        lambda f, **kw: batched_loader(f.lazy_ds(), **{"batch_size": 8, **kw}),
        {"batch_size": (), "num_workers": (0,), "prefetch_factor": (None,), "timeout": (0,)},
    ),
    "batched_loader with a worker": (
        lambda f, **kw: batched_loader(f.lazy_ds(), 8, num_workers=1, **kw),
        {"prefetch_factor": (None,), "timeout": (0, 1.5)},
    ),
    "batched_loader with threads": (
        lambda f, **kw: batched_loader(
            f.lazy_ds(), 8, worker_mode="thread", **{"num_workers": 2, **kw}
        ),
        {"num_workers": (0,), "prefetch_factor": (None,)},
    ),
    "create_optimized_dataloader": (
        # no worker processes (quick): timeout=1.5 waits for none, and is refused
        lambda f, **kw: create_optimized_dataloader(
            [f.recording], **{"batch_size": 8, "num_workers": 0, **kw}
        ),
        {
            "batch_size": (),
            "num_workers": (0, None),  # None: chosen from the CPUs
            "rank": (0, None),
            "world_size": (None,),
            "seed": (0,),
            "prefetch_factor": (None,),
            "timeout": (0,),
        },
    ),
    "NNHandler.set_train_loader": (
        lambda f, **kw: NNHandler(torch.nn.Linear(4, 1), log_fn=None).set_train_loader(
            f.lazy_ds(), **{"batch_size": 8, **kw}
        ),
        # batch_size=None: torch's DataLoader without batching
        {"batch_size": (None,), "num_workers": (0,), "prefetch_factor": (None,), "timeout": (0,)},
    ),
    # None: the default, as every test runs with
    "set_decode_threads": (lambda f, **kw: set_decode_threads(**kw), {"threads": (None,)}),
    "fit_chunk_cache": (lambda f, **kw: fit_chunk_cache(f.lazy_ds(), **kw), {"sampler": ()}),
    "set_chunk_cache": (
        lambda f, **kw: f.lazy_ds().set_chunk_cache(**{"nbytes": 2**20, **kw}),
        {"nbytes": (0,), "nslots": (0, None), "w0": (0, None)},
    ),
    "pad_collate (float data)": (
        lambda f, **kw: pad_collate(_samples(2), **kw),
        # any float pads float data (NaN is a common pad); axes=-1 counts from the end
        {"padding_value": (-1, 0, HUGE, NAN, INF, 1.5), "axes": (-1, 0, None)},
    ),
    "pad_collate (int16 data)": (
        lambda f, **kw: pad_collate(_int_samples(), **kw),
        {"padding_value": (-1, 0)},
    ),
    "World": (
        lambda f, **kw: World(**kw),
        {"rank": (0,), "world_size": (), "local_rank": (0,)},
    ),
    "NNHandler": (
        lambda f, **kw: NNHandler(torch.nn.Linear(4, 1), log_fn=None, **kw),
        # any positive bound, infinite included, as torch's clip_grad_norm_ takes it
        {"seed": (0,), "grad_accum_steps": (), "grad_clip_norm": (HUGE, INF, 1.5, None)},
    ),
    "NNHandler.train": (
        _train,
        {"epochs": (0,), "max_steps": (None,), "checkpoint_every_steps": (None,)},
    ),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return Files(tmp_path_factory.mktemp("hostile"))


def _same(a: Any, b: Any) -> bool:
    """Equal and of one type (``True == 1`` and ``0 == False`` do not count); NaN is NaN."""
    if type(a) is not type(b):
        return False
    return a is b or a == b


def _use(result: Any) -> None:
    """A loader must serve its epoch: errors that only show while iterating count."""
    if isinstance(result, DataLoader):
        with _no_race_with_the_clock(result):
            for _ in result:
                pass


@contextlib.contextmanager
def _no_race_with_the_clock(loader: DataLoader[Any]) -> Iterator[None]:
    """Serve a loader with ``timeout > 0`` its epoch however busy the machine is.

    torch bounds each wait for a worker's batch by ``timeout`` seconds of wall time, and raises
    "DataLoader timed out after 1.5 seconds" past it. The first wait covers the worker's start
    and its first read (0.2 to 0.5 s on 2 cores beside two CPU burners; more on a machine shared
    with other jobs): a worker short of CPU misses 1.5 s by chance, which says nothing about the
    value. Each wait still goes to torch's queue with the loader's own timeout (checked below:
    the value reaches the wait unchanged); one that runs out waits again with torch's own
    worker-status checks (a dead worker still raises), so the test checks the value, not the
    machine's load.
    """
    if not loader.timeout:
        yield
        return
    timed: Any = _MultiProcessingDataLoaderIter._try_get_data
    asked: list[float] = []

    def patient(it: Any, timeout: float = MP_STATUS_CHECK_INTERVAL) -> Any:
        if timeout != it._timeout:  # one of torch's status checks: not the bound
            return timed(it, timeout)
        asked.append(timeout)
        success, data = timed(it, timeout)
        while not success:  # late, not lost: torch would raise "timed out" here
            success, data = timed(it)
        return success, data

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_MultiProcessingDataLoaderIter, "_try_get_data", patient)
        yield
    assert asked, f"no wait for a batch was bounded by timeout={loader.timeout!r}"
    assert all(_same(t, loader.timeout) for t in asked), asked


@pytest.mark.parametrize(
    ("case", "keyword"), [(case, kw) for case, (_, valid) in CASES.items() for kw in valid]
)
def test_hostile_values_are_valid_or_refused_in_words(files, case, keyword):
    build, valid = CASES[case]
    for value in HOSTILE:
        if any(_same(value, ok) for ok in valid[keyword]):
            _use(build(files, **{keyword: value}))
            continue
        with pytest.raises((ValueError, TypeError)) as info:
            _use(build(files, **{keyword: value}))
        text = str(info.value)
        assert keyword in text and repr(value) in text, f"{case}({keyword}={value!r}): {text}"
