"""The DDP test helper's teardown: no rank waits on another's process, and every wait is bounded."""

from __future__ import annotations

import datetime
import os
import time

import pytest
import torch.distributed as dist

from helpers.ddp import run_ddp

pytestmark = pytest.mark.slow  # two spawned ranks per test


def _store_outlives_rank_0() -> str:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    # both ranks connected before rank 0 leaves: init returns on rank 0 before rank 1's gloo
    # pair is up, and a rank 0 gone by then failed rank 1's init under load ("connectFullMesh
    # failed ... Connection closed by peer"), which is not what this test is about
    dist.barrier()
    dist.destroy_process_group()  # by fn itself: no teardown barrier holds rank 0 back
    if os.environ["RANK"] == "0":
        return "left"
    time.sleep(2)  # rank 0 has exited by now (it once took the store with it)
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=datetime.timedelta(seconds=10),
    )
    store.set("after rank 0", "here")
    return store.get("after rank 0").decode()


@pytest.mark.timeout(120)
def test_the_store_outlives_a_rank_0_that_leaves_first(tmp_path):
    assert run_ddp(_store_outlives_rank_0, 2, tmp_path / "out", timeout=60) == ["left", "here"]


def _rank_1_never_returns() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    if dist.get_rank() == 1:
        time.sleep(3600)


@pytest.mark.timeout(120)
def test_a_rank_that_never_tears_down_is_named_with_its_stack(tmp_path):
    # rank 0's barrier ends BARRIER_MARGIN_S before the deadline (at least BARRIER_MIN_S after
    # it began): rank 0 fails then, and the parent stops waiting for the ranks at once
    timeout = 45.0
    began = time.monotonic()
    with pytest.raises(AssertionError) as failed:
        run_ddp(_rank_1_never_returns, 2, tmp_path / "out", timeout=timeout)
    message = str(failed.value)
    assert "ranks [1] still running" in message and "rank(s) [0] failed" in message
    assert "monitoredBarrier" in message  # rank 0's error names the rank that did not come
    assert "_rank_1_never_returns" in message  # the late rank's stack shows where it is
    assert time.monotonic() - began < timeout  # before the run's deadline, not at it
