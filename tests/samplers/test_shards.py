"""Shard and pad arithmetic (``samplers/shards.py``), and the equal-steps option's old name."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nn_handler.dataloaders import ChunkShuffleSampler, DistributedEpochSampler
from nn_handler.dataloaders.combined_h5_dataset import create_optimized_dataloader
from nn_handler.dataloaders.samplers.shards import (
    _balanced_contiguous_shard,
    equal_steps_option,
    fit_length,
    shard_rows,
    steps_per_rank,
    wrap,
)
from nn_handler.distributed import World


@given(st.integers(0, 500), st.integers(1, 17), st.sampled_from(["contiguous", "interleave"]))
def test_shards_cover_every_row_once(total, world_size, mode):
    parts = [shard_rows(total, World(rank, world_size), mode) for rank in range(world_size)]
    rows = sorted(r for part in parts for r in part)
    assert rows == list(range(total))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    if mode == "contiguous":
        for rank, part in enumerate(parts):
            assert part == range(*_balanced_contiguous_shard(total, world_size, rank))


@given(st.integers(0, 500), st.integers(1, 17), st.integers(0, 600))
def test_steps_per_rank(total, world_size, own):
    assert steps_per_rank(total, world_size, "pad") == -(-total // world_size)
    assert steps_per_rank(total, world_size, "drop") == total // world_size
    assert steps_per_rank(total, world_size, None, own) == own


def test_steps_per_rank_none_needs_the_own_count():
    with pytest.raises(ValueError, match="own="):
        steps_per_rank(10, 3, None)


@given(st.integers(0, 50), st.integers(0, 80))
def test_fit_length_and_wrap_repeat_from_the_start(n, count):
    order = np.arange(100, 100 + n, dtype=np.int64)
    if n == 0 and count:
        with pytest.raises(ValueError, match="empty order"):
            fit_length(order, count)
        return
    fitted = fit_length(order, count)
    assert len(fitted) == count
    np.testing.assert_array_equal(fitted, order[wrap(np.arange(count), n)])


def test_equal_steps_option():
    assert equal_steps_option("drop", None, "X") == "drop"
    with pytest.warns(DeprecationWarning, match="X: even= is now called equal_steps="):
        assert equal_steps_option("pad", "drop", "X") == "drop"
    with (
        pytest.warns(DeprecationWarning, match="X: even="),
        pytest.raises(TypeError, match="pass equal_steps="),
    ):
        equal_steps_option("drop", "pad", "X")
    with pytest.raises(ValueError, match="equal_steps must be one of 'pad', 'drop'; got 'odd'"):
        equal_steps_option("odd", None, "X")


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: DistributedEpochSampler(10, rank=1, world_size=3, **kw),
        lambda **kw: ChunkShuffleSampler(10, block_size=2, rank=1, world_size=3, **kw),
    ],
    ids=["DistributedEpochSampler", "ChunkShuffleSampler"],
)
def test_samplers_still_take_the_old_keyword(make):
    with pytest.warns(DeprecationWarning, match="even= is now called equal_steps="):
        old = make(even="drop")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = make(equal_steps="drop")
    assert old.equal_steps == old.even == "drop"
    assert list(old) == list(new) and len(old) == 3


def test_create_optimized_dataloader_still_takes_the_old_keyword(tmp_path):
    with (
        pytest.warns(DeprecationWarning, match="create_optimized_dataloader: even="),
        pytest.raises(TypeError, match="pass equal_steps= only"),
    ):
        create_optimized_dataloader(tmp_path / "none.h5", 4, 0, equal_steps="drop", even="pad")
