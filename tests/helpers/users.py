"""Another Unix user on the node: a forked child that gives up root (tests that need root skip
elsewhere)."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

#: a user no test machine has a process of
OTHER_UID = 1234
needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="acting as another user needs root"
)


def as_other_user(target: Callable[..., Any], *args: Any, uid: int = OTHER_UID) -> None:
    """Run ``target(*args)`` in a forked child running as ``uid`` (its group too); wait for it."""
    proc = mp.get_context("fork").Process(target=_run_as, args=(uid, target, args))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0, f"the other user's process ended with {proc.exitcode}"


def _run_as(uid: int, target: Callable[..., Any], args: tuple[Any, ...]) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    target(*args)


@contextlib.contextmanager
def world_folder() -> Iterator[Path]:
    """A folder every user may reach and write in, sticky (as ``/dev/shm`` and ``/tmp``)."""
    path = Path(tempfile.mkdtemp(prefix="nnh-shared-", dir="/tmp"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
