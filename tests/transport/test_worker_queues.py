"""DirectQueue: messages written by the calling thread when the pipe has room, never blocked."""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nn_handler.dataloaders._transport.worker_queues import DirectQueue, direct_context

from helpers.platform_marks import needs_pipe_room

pytestmark = needs_pipe_room  # direct writes are Linux only
JOIN_S = 60


def _queue(method: str = "fork") -> DirectQueue:
    made = direct_context(multiprocessing.get_context(method)).Queue()
    assert isinstance(made, DirectQueue)
    return made


def _feeder_started(q: DirectQueue) -> bool:
    return q._thread is not None  # type: ignore[attr-defined]


def test_the_context_keeps_its_start_method():
    for method in ("fork", "spawn", "forkserver"):
        base = multiprocessing.get_context(method)
        made = direct_context(base)
        assert isinstance(made, type(base))
        assert made.get_start_method() == method
        assert made.Process is base.Process


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 40_000), min_size=1, max_size=40))
def test_messages_of_any_size_arrive_whole_and_in_order(sizes):
    # with no reader until every put returned: the small ones go direct, and from the first
    # that the pipe cannot be sure to hold, the feeder takes over, behind them
    q = _queue()
    sent = [np.full(n, i % 251, np.uint8).tobytes() for i, n in enumerate(sizes)]
    for message in sent:
        q.put(message)
    assert [q.get(timeout=10) for _ in sent] == sent
    q.close()
    q.join_thread()


def test_small_messages_skip_the_feeder_thread():
    q = _queue()
    for i in range(5):
        q.put((i, list(range(1024))))
    assert not _feeder_started(q)
    assert [q.get(timeout=5)[0] for _ in range(5)] == list(range(5))


def test_a_full_pipe_never_blocks_a_put():
    q = _queue()
    done = threading.Event()

    def fill() -> None:
        for i in range(40):
            q.put((i, b"x" * 10_000))  # 400 kB: six times what the pipe holds
        done.set()

    threading.Thread(target=fill, daemon=True).start()
    assert done.wait(10), "put blocked on a full pipe"
    assert _feeder_started(q)  # the rest went the standard way
    assert [q.get(timeout=10)[0] for _ in range(40)] == list(range(40))


def test_get_times_out_with_empty():
    q = _queue()
    began = time.monotonic()
    with pytest.raises(queue.Empty):
        q.get(timeout=0.2)
    assert 0.15 < time.monotonic() - began < 5
    with pytest.raises(queue.Empty):
        q.get(block=False)


def test_a_closed_queue_refuses_puts():
    q = _queue()
    q.close()
    with pytest.raises(ValueError, match="is closed"):
        q.put(1)


def _echo(requests: DirectQueue, replies: DirectQueue, tag: int) -> None:
    while (message := requests.get(timeout=30)) is not None:
        replies.put((tag, message))


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_processes_exchange_messages_both_ways(method):
    # two writers share the reply queue: their messages must never interleave in the pipe
    ctx = direct_context(multiprocessing.get_context(method))
    requests = [ctx.Queue(), ctx.Queue()]
    replies = ctx.Queue()
    workers = [
        ctx.Process(target=_echo, args=(requests[tag], replies, tag), daemon=True)
        for tag in range(2)
    ]
    for worker in workers:
        worker.start()
    try:
        expected = {0: [], 1: []}
        for i in range(200):
            message = bytes([i % 256]) * (i * 97 % 30_000)
            requests[i % 2].put(message)
            expected[i % 2].append(message)
        got: dict[int, list[bytes]] = {0: [], 1: []}
        for _ in range(200):
            tag, message = replies.get(timeout=JOIN_S)
            got[tag].append(message)
        assert got == expected  # each writer's messages whole and in its order
    finally:
        for q in requests:
            q.put(None)
        for worker in workers:
            worker.join(JOIN_S)
            if worker.is_alive():
                worker.kill()
    assert [w.exitcode for w in workers] == [0, 0]
