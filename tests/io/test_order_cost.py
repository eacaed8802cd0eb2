"""A random order over a dataset too big to keep decoded is said once, with the fixes."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from nn_handler._io.chunks import decoded as decoded_module
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    H5LazyDataset,
    batched_loader,
    set_decode_threads,
)

from helpers.files import h5_rows

TIMEOUT = 120
ROWS = 203  # gzip + shuffle chunks of 8 rows of 12 KiB: 26 blocks, 2.4 MB decoded


@pytest.fixture
def gzip_file(make_h5: Any) -> Path:
    data = np.random.default_rng(0).standard_normal((ROWS, 3, 32, 32)).astype(np.float32)
    path: Path = make_h5({"x": (data, "gzip-shuffle"), "y": np.arange(ROWS)})
    return path


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(decoded_module.BUDGET_ENV, "1MiB")


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "random order" in r.getMessage()]


def epochs(loader: Any, n: int = 2) -> torch.Tensor:
    return torch.cat([xb for _ in range(n) for xb, _ in loader])


@pytest.mark.usefixtures("small_budget")
def test_shuffle_over_budget_is_said_once_with_both_fixes(
    gzip_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    ds = H5LazyDataset(gzip_file, "x", "y", rdcc_nbytes=4 * 8 * 12288)  # a window of 4 blocks
    epochs(batched_loader(ds, 64, shuffle=True))
    lines = said(caplog)
    assert len(lines) == 1, lines
    assert "ChunkShuffleSampler" in lines[0] and "nn-handler rewrite" in lines[0]
    assert "exceeds the decoded budget (1.0 MiB)" in lines[0] and "decodes of 8 rows" in lines[0]


@pytest.mark.usefixtures("small_budget")
def test_a_chunk_order_is_not_said(gzip_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    ds = H5LazyDataset(gzip_file, "x", "y", rdcc_nbytes=4 * 8 * 12288)
    order = list(ChunkShuffleSampler(ds, seed=1))
    got = epochs(batched_loader(ds, 64, sampler=ChunkShuffleSampler(ds, seed=1)), 1)
    np.testing.assert_array_equal(got.numpy(), h5_rows(gzip_file, "x", order))
    assert said(caplog) == []


@pytest.mark.usefixtures("small_budget")  # (else it is decoded whole: no window to judge)
def test_a_wide_chunk_window_is_not_taken_for_a_random_order(
    make_h5: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # each batch draws its rows from ~49 chunks of the window: many chunks, few decodes (the
    # decode threads fill the next window ahead: as many as the machine has, whatever an earlier
    # test set)
    set_decode_threads(None)
    data = np.random.default_rng(1).standard_normal((1000, 3, 32, 32)).astype(np.float32)
    path = make_h5({"x": (data, "gzip-shuffle"), "y": np.arange(1000)})
    caplog.set_level(logging.WARNING)
    ds = H5LazyDataset(path, "x", "y", rdcc_nbytes=100 * 8 * 12288)  # 100 of 125 blocks
    sampler = ChunkShuffleSampler(ds, seed=2)
    assert sampler.window_chunks > 2 * (64 // 8 + 2)  # (what a batch touches, at most)
    got = epochs(batched_loader(ds, 64, sampler=ChunkShuffleSampler(ds, seed=2)), 1)
    np.testing.assert_array_equal(got.numpy(), h5_rows(path, "x", list(sampler)))
    assert said(caplog) == []


def test_not_said_where_the_window_or_the_budget_holds_it(
    gzip_file: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING)
    epochs(batched_loader(H5LazyDataset(gzip_file, "x", "y"), 64, shuffle=True), 1)  # budget
    monkeypatch.setenv(decoded_module.BUDGET_ENV, "1MiB")
    epochs(batched_loader(H5LazyDataset(gzip_file, "x", "y"), 64, shuffle=True), 1)  # window
    assert said(caplog) == []


def log_to_stderr(_worker: int) -> None:
    # (pytest's log capture in the parent would swallow a forked worker's records)
    logger = logging.getLogger("nn_handler.dataloaders")
    logger.handlers = [logging.StreamHandler(sys.stderr)]
    logger.propagate = False


@pytest.mark.slow
@pytest.mark.usefixtures("small_budget")
def test_forked_workers_say_it_once_between_them(
    gzip_file: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    ds = H5LazyDataset(gzip_file, "x", "y", rdcc_nbytes=4 * 8 * 12288)
    loader = batched_loader(
        ds, 32, shuffle=True, num_workers=2, multiprocessing_context="fork", timeout=TIMEOUT,
        worker_init_fn=log_to_stderr,
    )  # fmt: skip
    assert len(epochs(loader, 1)) == ROWS
    assert capfd.readouterr().err.count("is read in a random order") == 1


def test_the_advice_says_which_memory_holds_the_decoded_dataset() -> None:
    from nn_handler._io.chunks.order_cost import random_order_advice

    mib = 1024**2
    budget = random_order_advice("f.h5", 100 * mib, 200 * mib, 64, 12288, window=256 * mib)
    assert "fits the decoded budget (200.0 MiB)" in budget
    window = random_order_advice("f.h5", 100 * mib, 0, 64, 12288, window=256 * mib)
    assert "decodes each chunk once" in window and "rdcc_nbytes=256.0 MiB" in window
    neither = random_order_advice("f.h5", 300 * mib, 0, 64, 12288, window=256 * mib)
    assert "a random order decodes a 64-row chunk per sample" in neither
    assert "ChunkShuffleSampler" in neither and "nn-handler rewrite f.h5" in neither
    url = random_order_advice("s3://b/f.h5", 100 * mib, None, 64, 12288)
    assert url.startswith("over a URL (never decoded whole)")
