"""WaitMeter measures how long a loop waits for its batches; wait_advice says why."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from nn_handler._io.chunks import decoded as decoded_module
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    DevicePrefetcher,
    H5LazyDataset,
    WaitMeter,
    batched_loader,
    wait_advice,
)

from helpers.files import h5_rows

TIMEOUT = 120
ROWS = 203  # gzip + shuffle chunks of 8 rows of 12 KiB: 26 blocks, 2.4 MB decoded


class SlowBatches(Dataset[Any]):
    """Each batch takes ``delay`` seconds to read."""

    supports_batch_indexing = True

    def __init__(self, n: int, delay: float) -> None:
        self.n, self.delay = n, delay

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: Any) -> Any:
        time.sleep(self.delay)
        idx = torch.as_tensor(index)
        return idx.float().reshape(-1, 1), idx


@pytest.fixture
def gzip_file(make_h5: Any) -> Path:
    data = np.random.default_rng(0).standard_normal((ROWS, 3, 32, 32)).astype(np.float32)
    data[:, 0, 0, 0] = np.arange(ROWS)
    path: Path = make_h5({"x": (data, "gzip-shuffle"), "y": np.arange(ROWS)})
    return path


def test_a_slow_loader_waits_nearly_all_the_time_and_is_told_why() -> None:
    meter = WaitMeter(batched_loader(SlowBatches(400, 0.01), 20))
    for _batch in meter:
        pass  # an instant step
    s = meter.summary()
    assert s.batches == 20 and s.samples == 400
    assert s.wait_share > 0.9
    assert 9 < s.wait_p50_ms < 200 and s.wait_max_ms >= s.wait_p99_ms >= s.wait_p50_ms
    assert any("num_workers=0" in line for line in s.advice)
    assert "nn-handler bench" in s.advice[-1]
    assert "waited" in str(s) and "num_workers=0" in str(s)


def test_a_loader_that_keeps_up_waits_nearly_never_and_is_told_nothing() -> None:
    batches = [(torch.full((8, 2), float(i)), torch.arange(8)) for i in range(30)]
    meter = WaitMeter(batches)
    for _batch in meter:
        time.sleep(0.005)  # the step
    s = meter.summary()
    assert s.wait_share < 0.05 and s.advice == ()
    assert s.step_p50_ms >= 5 and s.elapsed_s >= 30 * 0.005
    assert s.samples_per_s == pytest.approx(s.samples / s.elapsed_s)  # type: ignore[operator]


def test_batches_and_their_order_are_unchanged(gzip_file: Path) -> None:
    ds = H5LazyDataset(gzip_file, "x", "y")

    def loader() -> Any:
        return batched_loader(ds, 16, shuffle=True, generator=torch.Generator().manual_seed(3))

    plain = list(loader())
    metered = list(WaitMeter(loader()))
    assert len(plain) == len(metered) == -(-ROWS // 16)
    for (x0, y0), (x1, y1) in zip(plain, metered, strict=True):
        assert torch.equal(x0, x1) and torch.equal(y0, y1)
        np.testing.assert_array_equal(x1.numpy(), h5_rows(gzip_file, "x", y1.tolist()))


@pytest.mark.slow
def test_worker_batches_are_unchanged(gzip_file: Path) -> None:
    ds = H5LazyDataset(gzip_file, "x", "y")
    loader = batched_loader(
        ds, 16, shuffle=True, num_workers=2, multiprocessing_context="fork", timeout=TIMEOUT
    )
    meter = WaitMeter(loader)
    for _epoch in range(2):
        ys = []
        for xb, yb in meter:
            np.testing.assert_array_equal(xb.numpy(), h5_rows(gzip_file, "x", yb.tolist()))
            ys.append(yb)
        assert sorted(torch.cat(ys).tolist()) == list(range(ROWS))
        assert meter.summary().batches == len(loader)


def test_each_pass_is_its_own_record_and_a_break_ends_it() -> None:
    meter = WaitMeter([torch.zeros(2, 3)] * 10)
    assert len(meter) == 10
    assert [b.shape for b in meter] == [(2, 3)] * 10
    for i, _batch in enumerate(meter):
        if i == 3:
            break
    s = meter.summary()
    assert (s.batches, s.samples) == (4, 8)
    assert meter.summary().elapsed_s == s.elapsed_s  # the pass ended at the break


def test_warmup_leaves_the_first_batches_out() -> None:
    def slow_start() -> Any:
        time.sleep(0.2)  # workers starting
        yield from ({"x": torch.zeros(4)} for _ in range(20))

    meter = WaitMeter(slow_start(), warmup=1)
    for _batch in meter:
        time.sleep(0.002)
    s = meter.summary()
    assert s.batches == 19 and s.samples == 19 * 4 and s.wait_share < 0.2
    assert s.first_wait_s >= 0.2  # reported apart


def test_batches_without_tensors_are_counted_but_not_their_samples() -> None:
    meter = WaitMeter(["a", "b"])
    assert list(meter) == ["a", "b"]
    s = meter.summary()
    assert (s.batches, s.samples, s.samples_per_s) == (2, None, None)
    assert "samples/s" not in str(s).split(";")[1]


def test_bad_arguments_and_misuse_are_named() -> None:
    with pytest.raises(ValueError, match=r"threshold must be a share between 0 and 1, got 1\.5"):
        WaitMeter([], threshold=1.5)
    with pytest.raises(ValueError, match="warmup"):
        WaitMeter([], warmup=-1)
    with pytest.raises(RuntimeError, match="iterate the meter first"):
        WaitMeter([]).summary()
    with pytest.raises(TypeError, match="generator has no length"):
        len(WaitMeter(x for x in []))


def test_as_dict_holds_the_numbers_for_a_logger() -> None:
    meter = WaitMeter([torch.zeros(3)] * 4)
    list(meter)
    values = meter.summary().as_dict()
    assert {"wait_share", "wait_s", "batches", "samples", "samples_per_s"} <= set(values)
    assert all(isinstance(v, float) for v in values.values())


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(decoded_module.BUDGET_ENV, "1MiB")


@pytest.mark.usefixtures("small_budget")
def test_advice_names_a_random_order_over_chunks_too_big_to_keep(gzip_file: Path) -> None:
    ds = H5LazyDataset(gzip_file, "x", "y", rdcc_nbytes=4 * 8 * 12288)  # a window of 4 blocks
    random = wait_advice(batched_loader(ds, 64, shuffle=True, num_workers=1))
    assert any("ChunkShuffleSampler" in line and "nn-handler rewrite" in line for line in random)
    chunked = wait_advice(batched_loader(ds, 64, sampler=ChunkShuffleSampler(ds), num_workers=1))
    assert not any("random order" in line for line in chunked)
    assert chunked == [random[-1]]  # only how to measure


def test_advice_says_nothing_of_an_order_the_budget_holds(gzip_file: Path) -> None:
    ds = H5LazyDataset(gzip_file, "x", "y")  # 2.4 MB decoded: within the default budget
    assert not any("random order" in a for a in wait_advice(DataLoader(ds, 16, shuffle=True)))


def test_advice_on_copies_to_a_cuda_device(gzip_file: Path) -> None:
    ds = H5LazyDataset(gzip_file, "x", "y")
    pageable = wait_advice(batched_loader(ds, 16, num_workers=1), "cuda")
    assert any("DevicePrefetcher" in line for line in pageable)
    pinned = wait_advice(batched_loader(ds, 16, num_workers=1, pin_memory=True), "cuda:0")
    assert not any("DevicePrefetcher" in line for line in pinned)
    prefetched = wait_advice(DevicePrefetcher(batched_loader(ds, 16, num_workers=1), "cpu"))
    assert not any("DevicePrefetcher" in line for line in prefetched)
    assert not any("DevicePrefetcher" in line for line in wait_advice(ds, "cuda"))  # not a loader
