"""The object's version, asked for once by the processes of a node that open it together."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import _open_remote
from nn_handler._io.storage.identity import ObjectVersion
from nn_handler._io.storage.remote import node_version
from nn_handler._io.storage.remote.node_version import open_checked

from helpers.process import together
from helpers.users import needs_root

PROBE = (0, 1)  # the one-byte range that asks for the object's version
TIMEOUT = 60
OTHER_UID = 1234  # a user that is not us


class Opened:
    """What a process opened: the version it was given, else the store's answer (``current``)."""

    def __init__(self, version: ObjectVersion | None, current: ObjectVersion) -> None:
        self.asked = version is None
        self.identity = current if version is None else version


def _open(root: Path, current: ObjectVersion, url: str = "s3://b/k", wait_s: float = 5.0) -> Opened:
    return open_checked(str(root), url, lambda v: Opened(v, current), wait_s=wait_s)


def test_a_process_that_came_while_another_asked_takes_its_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asking, waiting, answer = threading.Event(), threading.Event(), threading.Event()
    lock = node_version._lock

    def lock_and_say(fd: int, wait_s: float) -> bool:
        if asking.is_set():  # the second process: it has begun, and now waits for the lock
            waiting.set()
        return lock(fd, wait_s)

    def ask(version: ObjectVersion | None) -> Opened:
        asking.set()
        assert answer.wait(TIMEOUT)  # the store answers once the other process waits
        return Opened(version, ObjectVersion(10, '"a"'))

    monkeypatch.setattr(node_version, "_lock", lock_and_say)
    first = threading.Thread(target=open_checked, args=(str(tmp_path), "s3://b/k", ask, 5.0))
    first.start()
    assert asking.wait(TIMEOUT)
    came: list[Opened] = []
    second = threading.Thread(
        target=lambda: came.append(_open(tmp_path, ObjectVersion(10, '"b"'), wait_s=TIMEOUT))
    )
    second.start()
    assert waiting.wait(TIMEOUT)
    answer.set()
    for thread in (first, second):
        thread.join(TIMEOUT)
    assert not came[0].asked and came[0].identity == ObjectVersion(10, '"a"')


def test_an_answer_from_before_a_process_began_is_not_used(tmp_path: Path) -> None:
    first = _open(tmp_path, ObjectVersion(10, '"a"'))
    second = _open(tmp_path, ObjectVersion(10, '"b"'))  # the object was replaced meanwhile
    assert first.asked and second.asked
    assert second.identity == ObjectVersion(10, '"b"')


def _answered_meanwhile(
    monkeypatch: pytest.MonkeyPatch, root: Path, record: dict[str, Any] | str
) -> None:
    """Have "another process" write ``record`` while the next open waits for the lock.

    ``answered_at`` is set to the moment it is written (after the open began) unless the
    record gives its own; a text is written as it is.
    """
    lock = node_version._lock

    def lock_then_answer(fd: int, wait_s: float) -> bool:
        taken = lock(fd, wait_s)
        (path,) = (root / ".versions").glob("*.json")
        text = (
            record
            if isinstance(record, str)
            else json.dumps({"answered_at": time.monotonic(), **record})
        )
        path.unlink()
        path.write_text(text)
        return taken

    monkeypatch.setattr(node_version, "_lock", lock_then_answer)


def _saved(root: Path) -> dict[str, Any]:
    (record,) = (root / ".versions").glob("*.json")
    saved: dict[str, Any] = json.loads(record.read_text())
    del saved["answered_at"]
    return saved


def test_a_damaged_record_or_one_of_another_url_or_machine_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _open(tmp_path, ObjectVersion(10, '"a"'))
    saved = _saved(tmp_path)
    with monkeypatch.context() as patched:
        _answered_meanwhile(patched, tmp_path, saved)
        assert not _open(tmp_path, ObjectVersion(10, '"x"')).asked  # (the check itself works)
    for damage in (
        "{",
        {**saved, "url": "s3://b/other"},
        {**saved, "machine": "another"},
        {**saved, "version": {"size": "x"}},
        {**saved, "version": {"size": 1, "etag": 5}},
    ):
        with monkeypatch.context() as patched:
            _answered_meanwhile(patched, tmp_path, damage)
            assert _open(tmp_path, ObjectVersion(10, '"c"')).asked, damage


def test_a_record_from_the_future_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _open(tmp_path, ObjectVersion(10, '"a"'))
    future = {**_saved(tmp_path), "answered_at": time.monotonic() + 60}
    _answered_meanwhile(monkeypatch, tmp_path, future)
    opened = _open(tmp_path, ObjectVersion(10, '"b"'))
    assert opened.asked and opened.identity == ObjectVersion(10, '"b"')


def test_a_record_that_is_a_link_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _open(tmp_path, ObjectVersion(10, '"a"'))
    (record,) = (tmp_path / ".versions").glob("*.json")
    planted = tmp_path / "planted.json"
    lock = node_version._lock

    def lock_then_link(fd: int, wait_s: float) -> bool:
        taken = lock(fd, wait_s)
        planted.write_text(json.dumps({**_saved(tmp_path), "answered_at": time.monotonic()}))
        record.unlink()
        record.symlink_to(planted)
        return taken

    monkeypatch.setattr(node_version, "_lock", lock_then_link)
    assert _open(tmp_path, ObjectVersion(10, '"b"')).asked


@needs_root
def test_records_locks_and_folders_of_another_user_are_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _open(tmp_path, ObjectVersion(10, '"a"'))
    saved = _saved(tmp_path)
    (record,) = (tmp_path / ".versions").glob("*.json")
    lock = node_version._lock

    def lock_then_plant(fd: int, wait_s: float) -> bool:
        taken = lock(fd, wait_s)
        record.write_text(json.dumps({**saved, "answered_at": time.monotonic()}))
        os.chown(record, OTHER_UID, OTHER_UID)
        return taken

    with monkeypatch.context() as patched:
        patched.setattr(node_version, "_lock", lock_then_plant)
        assert _open(tmp_path, ObjectVersion(10, '"b"')).asked  # a record of another user
    assert os.stat(record).st_uid == os.geteuid()  # replaced by ours (our folder)
    (lock_file,) = (tmp_path / ".versions").glob("*.lock")
    os.chown(lock_file, OTHER_UID, OTHER_UID)
    before = record.read_text()
    assert _open(tmp_path, ObjectVersion(10, '"c"')).asked  # a lock of another user
    os.chown(lock_file, 0, 0)
    os.chown(tmp_path / ".versions", OTHER_UID, OTHER_UID)
    assert _open(tmp_path, ObjectVersion(10, '"d"')).asked  # a folder of another user
    assert record.read_text() == before  # nothing written under either
    assert sorted(p.name for p in (tmp_path / ".versions").iterdir()) == sorted(
        [record.name, lock_file.name]
    )


def test_a_versions_folder_that_is_a_link_is_not_used(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / ".versions").symlink_to(elsewhere)
    assert _open(tmp_path / "cache", ObjectVersion(1, '"a"')).asked
    assert _open(tmp_path / "cache", ObjectVersion(1, '"a"')).asked
    assert list(elsewhere.iterdir()) == []  # nothing written through the link


def test_records_and_locks_are_private(tmp_path: Path) -> None:
    _open(tmp_path / "cache", ObjectVersion(1, '"a"'))
    folder = tmp_path / "cache" / ".versions"
    assert stat.S_IMODE(os.stat(tmp_path / "cache").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == {0o600}


def test_a_cache_directory_that_cannot_hold_records_asks_every_time(tmp_path: Path) -> None:
    (tmp_path / ".versions").write_text("not a folder")
    assert _open(tmp_path, ObjectVersion(1)).asked
    assert _open(tmp_path, ObjectVersion(1)).asked


def _rank(url: str, cache: str, start: Any, results: Any) -> None:
    start.wait(TIMEOUT)
    source = _open_remote(url, FileOptions(cache_dir=cache))
    results.put(source.identity.as_record())
    source.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_processes_of_a_node_opening_together_ask_for_the_version_once(
    http: Any, tmp_path: Path
) -> None:
    (http.root / "f.bin").write_bytes(b"x" * 5000)
    # every process begins to open before the first answer comes back, however busy the machine
    http.latency_s = 1.0
    url, cache = http.url("f.bin"), str(tmp_path / "node")
    versions = together(_rank, [(url, cache)] * 8, TIMEOUT)
    assert all(v == versions[0] and v["size"] == 5000 for v in versions)
    assert [r for r in http.ranges if (r[1], r[2]) == PROBE] == [("f.bin", *PROBE)]
    alone = _open_remote(url, FileOptions())  # without a cache dir: each process asks
    assert alone.identity.size == 5000
    assert [r for r in http.ranges if (r[1], r[2]) == PROBE] == [("f.bin", *PROBE)] * 2
    alone.close()
