"""Node memory regions (``_io/storage/node_memory.py``): only the user's own, made whole, shared,
freed with their last user however it ends."""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nn_handler._io.storage import node_memory, region_sweep, shm_folder
from nn_handler._io.storage.byte_source import advise_spans

from helpers.process import process_with_pid, together
from helpers.users import OTHER_UID, as_other_user, needs_root, world_folder

TIMEOUT = 60
pytestmark = pytest.mark.skipif(not node_memory.NAMED, reason="named regions need Linux")


@pytest.fixture
def shm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with world_folder() as root:  # as /dev/shm: every user may make a folder there
        monkeypatch.setenv(shm_folder.SHM_DIR_ENV, str(root))
        yield root


def regions(root: Path) -> list[str]:
    folder = Path(shm_folder.user_folder())
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def test_a_region_is_made_whole_in_the_users_folder_and_found_by_name(shm: Path) -> None:
    first = node_memory.open_region("a", 100_000, b"dataset a")
    assert first.node_wide
    first.payload[:5] = [1, 2, 3, 4, 5]
    again = node_memory.open_region("a", 100_000, b"dataset a")  # as another process would
    assert again.payload[:5].tolist() == [1, 2, 3, 4, 5]
    folder = os.stat(shm_folder.user_folder())
    assert folder.st_uid == os.geteuid() and stat.S_IMODE(folder.st_mode) == 0o700
    assert regions(shm) == ["a"]  # no temporary name, ever: made nameless, then linked
    assert stat.S_IMODE(os.stat(first.path).st_mode) == 0o600
    st = os.stat(first.path)
    assert node_memory.node_regions_bytes() == st.st_size  # what it holds once filled
    [info] = node_memory.list_regions()
    assert info.in_use and info.description == "dataset a"
    assert info.size == st.st_size and info.nbytes == st.st_blocks * 512 < st.st_size
    first.reserve(0, 100_000)  # memory is given as the payload is written
    assert node_memory.list_regions()[0].nbytes >= st.st_size


@pytest.mark.parametrize(("nbytes", "description"), [(100_000, b"dataset b"), (5, b"dataset a")])
def test_a_region_that_holds_something_else_is_never_used(
    shm: Path, nbytes: int, description: bytes
) -> None:
    held = node_memory.open_region("a", 100_000, b"dataset a")
    with pytest.raises(shm_folder.RegionError, match="holds something other than this dataset"):
        node_memory.open_region("a", nbytes, description)
    held.release()  # nobody uses it any more: the next opener replaces it
    fresh = node_memory.open_region("a", nbytes, description)
    assert fresh.payload.size == nbytes and regions(shm) == ["a"]


def test_the_last_user_unlinks_the_name(shm: Path) -> None:
    one = node_memory.open_region("b", 4096, b"b")
    two = node_memory.open_region("b", 4096, b"b")
    one.release()
    assert regions(shm) == ["b"]  # this process still uses it through ``two``
    two.release()
    assert regions(shm) == []


def _join_and_die(name: str, ready: Any, how: str) -> None:
    region = node_memory.open_region(name, 4096, name.encode())
    region.payload[0] = 1
    ready.set()
    if how == "exit":
        os._exit(0)  # ends without releasing (as a DataLoader worker does)
    signal.pause()  # killed, below


def _user(name: str, how: str) -> Any:
    """A forked process that has joined region ``name``: it exits without releasing it, or
    (``"SIGKILL"``) waits to be killed."""
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    proc = ctx.Process(target=_join_and_die, args=(name, ready, how))
    proc.start()
    assert ready.wait(TIMEOUT)
    return proc


@pytest.mark.parametrize("how", ["exit", "SIGKILL"])
def test_a_dead_user_does_not_keep_a_region(shm: Path, how: str) -> None:
    proc = _user("dead", how)
    mine = node_memory.open_region("dead", 4096, b"dead")
    if how == "SIGKILL":
        proc.kill()
    proc.join(TIMEOUT)
    assert regions(shm) == ["dead"]
    mine.release()  # the dead user's lock went with it: this was the last user
    assert regions(shm) == []


def test_a_killed_jobs_region_is_swept_and_never_counted(shm: Path) -> None:
    proc = _user("orphan", "SIGKILL")
    assert node_memory.node_regions_bytes() > 0  # in use: counted
    proc.kill()
    proc.join(TIMEOUT)
    assert regions(shm) == ["orphan"]
    assert node_memory.node_regions_bytes() == 0  # nobody uses it: swept, not counted
    assert regions(shm) == []


def test_a_reused_pid_keeps_nothing_alive(shm: Path) -> None:
    # users are known by a lock that dies with them: a new process under a dead user's pid
    # (pids wrap around) holds no lock, so the region goes all the same
    proc = _user("reused", "exit")
    proc.join(TIMEOUT)
    with process_with_pid(proc.pid):
        assert region_sweep.sweep_regions() == 1 and regions(shm) == []


def test_a_pinned_region_outlives_its_users_and_goes_with_its_pin(shm: Path) -> None:
    pin = node_memory.pin("kept")  # the process that built the dataset, before any read
    assert pin is not None
    proc = _user("kept", "exit")  # a DataLoader worker of one epoch: joins, ends
    proc.join(TIMEOUT)
    assert region_sweep.sweep_regions() == 0 and regions(shm) == ["kept"]  # the next epoch finds it
    pin.release()
    assert regions(shm) == []


def test_no_room_says_what_is_true_and_leaves_nothing(
    shm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    region = node_memory.open_region("big", 1 << 20, b"big")
    monkeypatch.setattr(node_memory.os, "posix_fallocate", full)
    with pytest.raises(shm_folder.NoRoomError, match=r"could not give 64\.0 KiB to more of a"):
        region.reserve(4096, 65536)
    with pytest.raises(shm_folder.NoRoomError, match=r"could not give 64\.0 KiB to a new region"):
        node_memory.open_region("other", 1 << 20, b"other")
    assert regions(shm) == ["big"]  # the one that could not be made left nothing


def test_a_missing_folder_has_no_room(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(shm_folder.SHM_DIR_ENV, str(tmp_path / "missing"))
    assert shm_folder.shm_room() == 0
    with pytest.raises(shm_folder.RegionError, match="cannot be made"):
        node_memory.open_region("x", 4096, b"x")
    assert region_sweep.sweep_regions() == 0 and node_memory.list_regions() == []


def test_a_folder_open_to_others_or_behind_a_link_is_not_trusted(shm: Path) -> None:
    folder = Path(shm_folder.user_folder())
    folder.mkdir(mode=0o700)
    folder.chmod(0o777)
    with pytest.raises(shm_folder.RegionError, match="open to other users"):
        node_memory.open_region("x", 4096, b"x")
    assert "chmod 700" in str(shm_folder.usable_folder())
    folder.rmdir()
    elsewhere = shm / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    folder.symlink_to(elsewhere)
    with pytest.raises(shm_folder.RegionError, match="not a folder of this user's regions"):
        node_memory.open_region("x", 4096, b"x")
    assert list(elsewhere.iterdir()) == []


def test_a_sweep_opens_nothing_but_regular_files(shm: Path) -> None:
    region = node_memory.open_region("r", 4096, b"r")
    region.release()
    folder = Path(shm_folder.user_folder())
    os.mkfifo(folder / "fifo")  # an open of it for reading would wait for a writer forever
    (folder / "link").symlink_to(folder / "fifo")
    assert region_sweep.sweep_regions() == 0
    assert node_memory.list_regions() == []
    assert sorted(os.listdir(folder)) == [".locks", "fifo", "link"]


def _plant(folder_path: str, name: str) -> None:
    """As another user: a folder named as ours, open to all, with a region that looks right."""
    folder = Path(folder_path)
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    (folder / name).write_bytes(b"NNHREG02" + b"\0" * 70_000)


def _plant_sparse(path: str) -> None:
    """As another user: a 1 TiB sparse file under our prefix, readable by all (no memory)."""
    with open(path, "wb") as f:
        f.truncate(1 << 40)
    os.chmod(path, 0o666)


@needs_root
def test_another_users_folder_is_never_trusted(shm: Path) -> None:
    planted = Path(shm_folder.user_folder())
    as_other_user(_plant, str(planted), "x")
    as_other_user(_plant_sparse, str(shm / f"nn_handler-{'ab' * 16}"))  # the old layout's names
    assert planted.stat().st_uid == OTHER_UID
    with pytest.raises(shm_folder.RegionError, match=f"belongs to uid {OTHER_UID}"):
        node_memory.open_region("x", 4096, b"x")
    assert f"belongs to uid {OTHER_UID}" in str(shm_folder.usable_folder())
    assert node_memory.node_regions_bytes() == 0  # not counted, not swept, not opened
    assert node_memory.list_regions() == [] and region_sweep.sweep_regions() == 0
    assert (planted / "x").exists()


def _make_together(name: str, start: Any, results: Any) -> None:
    start.wait(TIMEOUT)
    try:
        region = node_memory.open_region(name, 600 * 1024, name.encode())
    except shm_folder.RegionError as exc:
        results.put(str(exc))
        return
    results.put(os.stat(region.path).st_ino)
    start.wait(TIMEOUT)  # both hold it until both have it


@pytest.fixture
def small_shm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A tmpfs of 1 MiB: room for one region of 600 KiB, not two."""
    root = tmp_path / "small"
    root.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(root)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    monkeypatch.setenv(shm_folder.SHM_DIR_ENV, str(root))
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


def test_two_makers_with_room_for_one_share_one_region(small_shm: Path) -> None:
    got = together(_make_together, [("pair",), ("pair",)], timeout=TIMEOUT)
    assert len(set(got)) == 1 and isinstance(got[0], int), got  # one inode, no give-up


_SIGTERM = """
import os, signal, sys
from nn_handler._io.storage import node_memory

def handler(signum, frame):
    open(sys.argv[2], "w").write("called")
    sys.exit(3)

if sys.argv[1] == "handler":
    signal.signal(signal.SIGTERM, handler)
region = node_memory.open_region("term", 4096, b"term")
print(region.path, flush=True)
signal.pause()
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("installed", ["none", "handler"])
def test_sigterm_releases_the_region_and_goes_on_to_the_handler_before(
    shm: Path, tmp_path: Path, installed: str
) -> None:
    marker = tmp_path / "marker"
    with subprocess.Popen(
        [sys.executable, "-c", _SIGTERM, installed, str(marker)],
        stdout=subprocess.PIPE, text=True, env=dict(os.environ),
    ) as proc:  # fmt: skip
        assert proc.stdout is not None
        path = proc.stdout.readline().strip()
        assert os.path.exists(path)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(TIMEOUT)
    assert not os.path.exists(path)  # released by the process itself, not by a later sweep
    if installed == "handler":
        assert code == 3 and marker.read_text() == "called"
    else:
        assert code == -signal.SIGTERM  # ended by the signal, as without us


def _write_and_report(region: Any, queue: Any) -> None:
    with region.lock():
        region.payload[0] = 7
    queue.put(int(region.payload[1]))


def test_anonymous_memory_is_shared_with_forked_processes() -> None:
    region = node_memory.anonymous_region(4096)
    region.payload[1] = 9
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_write_and_report, args=(region, queue))
    proc.start()
    assert queue.get(timeout=TIMEOUT) == 9
    proc.join(TIMEOUT)
    assert region.payload[0] == 7 and not region.node_wide


def test_a_forked_child_does_not_hold_its_parents_locks(shm: Path) -> None:
    region = node_memory.open_region("parent", 4096, b"parent")
    ctx = mp.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_wait_for, args=(ready, done))
    proc.start()
    assert ready.wait(TIMEOUT)
    region.release()  # the child inherited the map, not the right to keep the name
    assert regions(shm) == []
    done.set()
    proc.join(TIMEOUT)


def _wait_for(ready: Any, done: Any) -> None:
    ready.set()
    done.wait(TIMEOUT)


@given(
    st.lists(st.tuples(st.integers(0, 10**7), st.integers(0, 10**5)), max_size=40),
    st.integers(0, 10**6),
    st.integers(1, 10**5),
)
def test_advise_spans_cover_every_range_in_order(
    ranges: list[tuple[int, int]], gap: int, piece: int
) -> None:
    starts = np.array([s for s, _ in ranges], dtype=np.int64)
    ends = starts + np.array([n for _, n in ranges], dtype=np.int64)
    spans = advise_spans(starts, ends, gap)
    assert all(lo <= hi for lo, hi in spans)
    assert all(a[1] + gap < b[0] for a, b in itertools.pairwise(spans))  # apart
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        assert any(lo <= s and e <= hi for lo, hi in spans)  # each range inside one span
    assert len(spans) <= len(ranges)
    pieces = advise_spans(starts, ends, gap, piece)  # the same bytes, none longer than piece
    assert all(hi - lo <= piece for lo, hi in pieces)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(pieces))
    covered = sum(hi - lo for lo, hi in pieces)
    assert covered == sum(hi - lo for lo, hi in spans)
