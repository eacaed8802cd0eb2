"""WindowPlan: a sampler's window, built once by the loader (``_io/rows/plan.py``)."""

import pytest

from nn_handler._io.rows.plan import WindowPlan, block_rows_or_own


def test_plan_rows_and_cache_blocks():
    plan = WindowPlan(None, 5)
    assert plan.fit_cache and plan.cache_blocks == 7  # a window and its two border blocks
    assert plan.rows(64) == 64 and plan.rows(None) == 1
    assert WindowPlan(16, 3, fit_cache=False).rows(64) == 16
    assert block_rows_or_own(None, 8) == 8


@pytest.mark.parametrize(("block_rows", "blocks"), [(0, 1), (4, 0), (-1, 2)])
def test_plan_refuses_empty_blocks_and_windows(block_rows, blocks):
    with pytest.raises(ValueError, match="must be"):
        WindowPlan(block_rows, blocks)


def test_plan_is_frozen():
    with pytest.raises(AttributeError):
        WindowPlan(None, 2).blocks = 3  # type: ignore[misc]
