"""One notice for a whole job (``_io/notice_board.py``): the first process of the job to claim a
key says it; forked, spawned and forkserver workers share the board of the process that made it."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from nn_handler._io import notice_board, notices

from helpers.platform_marks import needs_fork, needs_memfd

pytestmark = [needs_memfd, needs_fork]  # (the board's workers here are forked ones)
TIMEOUT = 60


@pytest.fixture
def board(monkeypatch: pytest.MonkeyPatch) -> Iterator[notice_board.BoardHandle]:
    """A new board for this process (the one earlier tests filled is put back after)."""
    monkeypatch.setattr(notice_board, "_board", None)
    monkeypatch.setattr(notices, "_said", set())
    handle = notice_board.handle()
    yield handle
    made = notice_board._board
    if made is not None:
        os.close(made.fd)


def _claim(handle: Any, key: str, go: Any, out: Any) -> None:
    go.wait(TIMEOUT)  # (all children claim at once)
    out.put((os.getpid(), notice_board.claim(key)))


def _run(context: str, handle: Any, key: str, children: int = 1) -> list[bool]:
    ctx = mp.get_context(context)
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(handle, key, go, out)) for _ in range(children)]
    for proc in procs:
        proc.start()
    go.set()
    got = [out.get(timeout=TIMEOUT)[1] for _ in procs]
    for proc in procs:
        proc.join(TIMEOUT)
        assert proc.exitcode == 0
    return got


def test_a_process_says_its_own_notice_and_its_workers_stay_quiet(board):
    assert notice_board.claim("small /dev/shm")
    assert notice_board.claim("small /dev/shm")  # (the same process: its record is first)
    assert _run("fork", board, "small /dev/shm") == [False]


@pytest.mark.parametrize(
    "context",
    [
        "fork",
        pytest.param("spawn", marks=pytest.mark.slow),
        pytest.param("forkserver", marks=pytest.mark.slow),
    ],
)
def test_what_a_worker_said_first_the_others_and_the_parent_do_not_say(board, context):
    assert sorted(_run(context, board, "found in a worker", children=4)) == [False] * 3 + [True]
    assert not notice_board.claim("found in a worker")
    assert _run(context, board, "found in a worker") == [False]  # the next epoch's workers
    assert notice_board.claim("another notice")


def test_notices_said_for_the_job_go_through_the_board(board, caplog):
    assert _run("fork", board, "job notice") == [True]
    assert not notice_board.say_once_for_job("job notice", "said by the worker already")
    assert notice_board.say_once_for_job("job notice 2", "said here")
    assert not notice_board.say_once_for_job("job notice 2", "said here")
    assert [r.getMessage() for r in caplog.records] == ["nn_handler: said here"]


def test_without_a_board_every_process_says_it(monkeypatch):
    monkeypatch.setattr(notice_board, "_board", None)
    assert notice_board.claim("anything") and notice_board.claim("anything")


def test_a_handle_pickled_outside_a_process_start_carries_no_descriptor(board):
    copy = pickle.loads(pickle.dumps(board))
    assert copy is board  # this process's handle, its board unchanged
    assert b"DupFd" not in pickle.dumps(board)


@pytest.mark.skipif(sys.platform != "linux", reason="memory files are Linux's")
def test_the_board_is_not_in_dev_shm(board):
    fd = notice_board._board.fd  # type: ignore[union-attr]
    assert os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:nn_handler-notices")
