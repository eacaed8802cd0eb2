"""The node cache checks what it serves: validators, checksums, owners, links, full disks.

Every case reads the object's right bytes (compared with the bytes the server holds), from the
cache where it can be trusted and from the store where it cannot, and says so once (logged).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import multiprocessing as mp
import os
import pickle
import shutil
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nn_handler._io import notices
from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import _open_remote
from nn_handler._io.storage.identity import ObjectVersion
from nn_handler._io.storage.remote import cache_dir, pieces
from nn_handler._io.storage.remote.cache_dir import CacheEntry, entry_name
from nn_handler._io.storage.remote.cached_file import CachedFile
from nn_handler._io.storage.remote.eviction import make_room
from nn_handler._io.storage.remote.object_file import RemoteFile

from helpers.users import OTHER_UID, as_other_user, needs_root

SIZE = 400_000
DATA = np.random.default_rng(5).integers(0, 256, SIZE, dtype=np.uint8).tobytes()
OTHER = np.random.default_rng(6).integers(0, 256, SIZE, dtype=np.uint8).tobytes()
TIMEOUT = 60


@pytest.fixture(autouse=True)
def fresh_notices(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Each test starts with nothing said yet, and captures what is said."""
    saved = set(notices._said)
    notices._said.clear()
    caplog.set_level(logging.WARNING, logger="nn_handler")
    yield
    notices._said.clear()
    notices._said.update(saved)


def _read(source: Any, ranges: list[tuple[int, int]]) -> list[bytes]:
    buffers = [np.empty(n, np.uint8) for _, n in ranges]
    source.read_ranges(ranges, buffers)
    return [b.tobytes() for b in buffers]


def _cached(http: Any, cache: Path, name: str = "f.bin") -> CachedFile:
    return CachedFile(RemoteFile(http.url(name)), str(cache))


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("nn_handler")]


def _fetched(http: Any, name: str = "f.bin") -> int:
    """Bytes of ``name`` the server sent for ranges (the one-byte version probes aside)."""
    return sum(end - start for n, start, end in http.ranges if n == name and end - start > 1)


def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if (p / "data").exists())


# --- no validator: no reuse across opens -------------------------------------------------


def _open(http: Any, cache: Path) -> Any:
    return _open_remote(http.url("f.bin"), FileOptions(cache_dir=cache))


def test_without_a_validator_a_same_size_replacement_is_read_on_the_next_open(
    http: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    http.etags = False
    (http.root / "f.bin").write_bytes(DATA)
    first = _open(http, tmp_path / "c")
    assert _read(first, [(0, SIZE)]) == [DATA]
    (http.root / "f.bin").write_bytes(OTHER)  # same size, no validator tells them apart
    second = _open(http, tmp_path / "c")  # while the first is still open
    assert _read(second, [(0, SIZE)]) == [OTHER]
    first.close()
    third = _open(http, tmp_path / "c")
    assert _read(third, [(0, SIZE)]) == [OTHER]
    said = [m for m in _said(caplog) if "gives no ETag or Last-Modified" in m]
    assert len(said) == 1  # once per URL per process, however many opens
    assert http.url("f.bin") in said[0] and "not reused across opens" in said[0]
    assert all(p.name.startswith("private-") for p in _entries(tmp_path / "c"))
    second.close()
    third.close()
    assert _entries(tmp_path / "c") == []  # each removed when its open closed


def test_without_a_validator_the_epochs_of_one_open_hit_its_cache(
    http: Any, tmp_path: Path
) -> None:
    http.etags = False
    (http.root / "f.bin").write_bytes(DATA)
    source = _open(http, tmp_path / "c")
    ranges = [(k * 9_000, 3_000) for k in range(40)]
    assert _read(source, ranges) == [DATA[o : o + n] for o, n in ranges]
    requests = http.requests
    assert _read(source, ranges) == [DATA[o : o + n] for o, n in ranges]  # the next epoch
    copy = pickle.loads(pickle.dumps(source))  # what a spawned DataLoader worker gets
    fetched = copy.fetched
    assert _read(copy, ranges) == [DATA[o : o + n] for o, n in ranges]
    assert http.requests == requests and copy.fetched == fetched
    copy.close()
    assert len(_entries(tmp_path / "c")) == 1  # the original still holds it
    source.close()
    assert _entries(tmp_path / "c") == []


_WORKER_SOURCE: list[Any] = []  # what a forked worker inherits from its parent


def _read_rest_in_worker(results: Any) -> None:
    source = _WORKER_SOURCE[0]
    before = source.fetched  # (the parent's count, inherited)
    results.put((_read(source, [(0, SIZE)]) == [DATA], source.fetched - before))


@pytest.mark.slow  # a forked process
@pytest.mark.timeout(120)
def test_without_a_validator_forked_workers_share_the_open_s_entry(
    http: Any, tmp_path: Path
) -> None:
    http.etags = False
    (http.root / "f.bin").write_bytes(DATA)
    source = _open(http, tmp_path / "c")
    _read(source, [(0, SIZE // 2)])
    _WORKER_SOURCE[:] = [source]
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    worker = ctx.Process(target=_read_rest_in_worker, args=(results,))
    worker.start()
    right, fetched = results.get(timeout=TIMEOUT)
    worker.join(TIMEOUT)
    _WORKER_SOURCE.clear()
    assert worker.exitcode == 0 and right
    assert fetched == SIZE - SIZE // 2  # only what the parent had not fetched
    source.close()


def _hold_a_private_entry(root: str, ready: Any) -> None:
    entry = CacheEntry(root, "http://h/f.bin", ObjectVersion(SIZE), nonce="a-dead-job")
    entry.store([(0, np.frombuffer(DATA[:1000], np.uint8))])
    ready.set()
    signal.pause()  # until killed: it never closes the entry


@pytest.mark.slow  # a forked process
@pytest.mark.timeout(120)
def test_a_private_entry_is_removed_once_its_holder_is_gone(http: Any, tmp_path: Path) -> None:
    (http.root / "f.bin").write_bytes(DATA)
    cache = tmp_path / "c"
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold_a_private_entry, args=(str(cache), ready))
    holder.start()
    try:
        assert ready.wait(TIMEOUT)
        (private,) = _entries(cache)
        _read(_cached(http, cache), [(0, 10)])  # another object opened meanwhile
        assert private.exists()  # its holder lives: kept
    finally:
        holder.kill()
        holder.join(TIMEOUT)
    other = _cached(http, cache)  # the next process to open any object in the cache
    assert _read(other, [(0, 10)]) == [DATA[:10]]
    assert not private.exists()
    assert [p.name.startswith("private-") for p in _entries(cache)] == [False]


# --- checksums ----------------------------------------------------------------------------


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_a_damaged_piece_is_fetched_again_and_the_entry_mended(
    http: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (http.root / "f.bin").write_bytes(DATA)
    cache = tmp_path / "c"
    first = _cached(http, cache)
    _read(first, [(0, 300_000)])
    first.close()
    (entry,) = _entries(cache)
    _flip(entry / "data", 123_456)
    before = _fetched(http)
    second = _cached(http, cache)
    assert _read(second, [(100_000, 50_000)]) == [DATA[100_000:150_000]]
    refetched = _fetched(http) - before
    assert 0 < refetched <= pieces.MAX_PIECE  # the damaged piece only
    (said,) = _said(caplog)
    assert str(entry) in said and "cached copy" in said and "damaged" in said
    assert "fetched again" in said and "not at fault" in said and "changed" not in said
    assert (entry / "data").read_bytes()[:300_000] == DATA[:300_000]  # mended on disk
    second.close()
    third = _cached(http, cache)
    before = _fetched(http)
    assert _read(third, [(0, 300_000)]) == [DATA[:300_000]]
    assert _fetched(http) == before and len(_said(caplog)) == 1  # whole again, nothing said


def test_pieces_are_checked_once_per_process_and_ours_not_at_all(
    http: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (http.root / "f.bin").write_bytes(DATA)
    checked: list[tuple[int, int, int]] = []
    intact = CacheEntry._intact

    def counted(self: CacheEntry, row: tuple[int, int, int]) -> bool:
        checked.append(row)
        return intact(self, row)

    monkeypatch.setattr(CacheEntry, "_intact", counted)
    monkeypatch.setattr(pieces, "MAX_PIECE", 64 * 1024)  # several pieces in the object
    writer = _cached(http, tmp_path / "c")
    for _ in range(3):
        _read(writer, [(0, SIZE)])
    assert checked == []  # stored by this process: trusted
    reader = _cached(http, tmp_path / "c")  # another process's view of the entry
    for _ in range(3):
        _read(reader, [(1000, 10), (SIZE - 10, 10)])
    assert sorted(set(checked)) == sorted(checked)  # each piece once, not once per read
    assert len(checked) == 2  # the two pieces under those bytes


def test_a_damaged_record_of_pieces_is_not_used(
    http: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (http.root / "f.bin").write_bytes(DATA)
    _read(_cached(http, tmp_path / "c"), [(0, 1000)])
    (entry,) = _entries(tmp_path / "c")
    claim = np.array([[0, SIZE + 10, 0]], np.int64)  # more bytes than the object has
    np.save(entry / pieces.RECORD, claim)
    again = _cached(http, tmp_path / "c")
    before = _fetched(http)
    assert _read(again, [(0, 1000)]) == [DATA[:1000]]
    assert _fetched(http) == before + 1000
    (said,) = _said(caplog)
    assert "record of cached pieces" in said and str(entry) in said


# --- caches that cannot be used: the store serves, one warning names the folder ------------


def _only_from_the_store(http: Any, source: CachedFile, caplog: pytest.LogCaptureFixture) -> str:
    """Read the object twice; both reads right, from the store; the one thing said."""
    before = _fetched(http)
    assert _read(source, [(0, SIZE)]) == [DATA]
    assert _read(source, [(5, 100)]) == [DATA[5:105]]
    assert _fetched(http) == before + SIZE + 100  # each byte fetched once per read
    assert source.cache_off is not None
    source.close()
    (said,) = _said(caplog)
    return said


@needs_root
def test_a_cache_folder_of_another_user_is_not_used(
    http: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (http.root / "f.bin").write_bytes(DATA)
    cache = tmp_path / "c"
    cache.mkdir()
    os.chown(cache, OTHER_UID, OTHER_UID)
    said = _only_from_the_store(http, _cached(http, cache), caplog)
    assert f"the cache folder {str(cache)!r} is owned by uid {OTHER_UID}" in said
    assert "not by you (uid 0)" in said and http.url("f.bin") in said
    assert list(cache.iterdir()) == []  # nothing written there
    source = _open(http, cache)  # the whole open: the version records are not kept there
    assert _read(source, [(0, 10)]) == [DATA[:10]] and list(cache.iterdir()) == []
    source.close()


def _plant(entry: Path, fake: bytes) -> None:
    """An entry whose record vouches for ``fake`` bytes (checksums and all)."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    folder = os.open(entry.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _plant_in(folder, entry.name, fake)
    finally:
        os.close(folder)


def _plant_in(folder: int, name: str, fake: bytes) -> None:
    """``_plant`` by descriptors: a user who may write in ``folder`` but not reach its path."""
    os.mkdir(name, 0o755, dir_fd=folder)
    entry = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=folder)
    record = np.array(pieces.cut(0, fake), np.int64)
    for file, write in (
        ("data", lambda f: f.write(fake)),
        ("lock", lambda f: None),
        (pieces.RECORD, lambda f: np.save(f, record)),
    ):
        with os.fdopen(os.open(file, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=entry), "wb") as f:
            write(f)
    os.close(entry)


@needs_root
@pytest.mark.slow  # a forked process
@pytest.mark.timeout(120)
def test_an_entry_planted_by_another_user_is_not_used(
    http: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (http.root / "f.bin").write_bytes(DATA)
    cache = tmp_path / "c"
    cache.mkdir(mode=0o1777)  # a cache folder others may write in, as /tmp is
    cache.chmod(0o1777)
    source = _cached(http, cache)
    entry = cache / entry_name(source.remote.url, source.identity)
    folder = os.open(cache, os.O_RDONLY | os.O_DIRECTORY)  # the planter's way in (forked)
    as_other_user(_plant_in, folder, entry.name, OTHER)
    os.close(folder)
    assert os.stat(entry).st_uid == OTHER_UID
    said = _only_from_the_store(http, source, caplog)
    assert f"holds {str(entry)!r}, which is owned by uid {OTHER_UID}" in said
    assert (entry / "data").read_bytes() == OTHER  # neither read nor written
    assert sorted(p.name for p in entry.iterdir()) == ["data", "lock", pieces.RECORD]


@pytest.mark.parametrize("link", ["entry", "data", pieces.RECORD])
def test_a_symbolic_link_in_the_cache_is_not_followed(
    http: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, link: str
) -> None:
    (http.root / "f.bin").write_bytes(DATA)
    cache, elsewhere = tmp_path / "c", tmp_path / "elsewhere"
    _plant(elsewhere, OTHER)
    source = _cached(http, cache)
    entry = cache / entry_name(source.remote.url, source.identity)
    if link == "entry":
        cache.mkdir()
        entry.symlink_to(elsewhere)
        where = entry
    else:
        _read(_cached(http, cache), [(0, 10)])  # a real entry, then one of its files a link
        (where := entry / link).unlink()
        where.symlink_to(elsewhere / link)
    said = _only_from_the_store(http, source, caplog)
    assert f"holds {str(where)!r}, which is a symbolic link" in said
    assert (elsewhere / "data").read_bytes() == OTHER  # nothing written through the link
    assert sorted(p.name for p in elsewhere.iterdir()) == ["data", "lock", pieces.RECORD]


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES, errno.EPERM], ids=errno.errorcode.get)
def test_a_cache_that_cannot_be_written_is_not_used(
    http: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    code: int,
) -> None:
    (http.root / "f.bin").write_bytes(DATA)
    tries = []

    def refused(fd: int, data: Any, offset: int) -> int:
        tries.append(offset)
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(cache_dir.os, "pwrite", refused)
    said = _only_from_the_store(http, _cached(http, tmp_path / "c"), caplog)
    assert f"the cache folder {str(tmp_path / 'c')!r} is not writable" in said
    assert len(tries) == 1  # then the cache is off for this object: not tried again


@needs_root
@pytest.mark.timeout(120)  # (mount is a process of its own)
def test_a_read_only_cache_folder_is_not_used(
    http: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (http.root / "f.bin").write_bytes(DATA)
    cache = tmp_path / "c"
    cache.mkdir(mode=0o700)
    with _mounted(cache, "--bind", str(cache)):
        remount = ["mount", "-o", "remount,ro,bind", str(cache)]
        if subprocess.run(remount, capture_output=True, timeout=TIMEOUT).returncode:
            pytest.skip("cannot remount read-only here")
        said = _only_from_the_store(http, _cached(http, cache), caplog)
    assert "is not writable (a read-only file system)" in said and str(cache) in said


@contextlib.contextmanager
def _mounted(folder: Path, *how: str) -> Iterator[None]:
    """``mount ... folder`` for the block (skip the test where mounting is not allowed)."""
    if shutil.which("mount") is None or shutil.which("umount") is None:
        pytest.skip("no mount command here")
    done = subprocess.run(["mount", *how, str(folder)], capture_output=True, timeout=TIMEOUT)
    if done.returncode:
        pytest.skip(f"cannot mount here: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True, timeout=TIMEOUT)


@needs_root
@pytest.mark.timeout(120)  # (mount is a process of its own)
def test_a_full_cache_folder_is_not_used(
    http: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (http.root / "f.bin").write_bytes(DATA)
    cache = tmp_path / "c"
    cache.mkdir(mode=0o700)
    with _mounted(cache, "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs"):
        said = _only_from_the_store(http, _cached(http, cache), caplog)
    assert f"the cache folder {str(cache)!r} has no space left (ENOSPC" in said


@pytest.mark.parametrize("where", ["data", "record"])
def test_no_space_left_midway_serves_what_was_fetched(
    http: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    (http.root / "f.bin").write_bytes(DATA)
    source = _cached(http, tmp_path / "c")
    _read(source, [(0, 1000)])  # cached while there was room
    pwrite, save = os.pwrite, pieces.save

    def full(*args: Any) -> Any:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    calls: list[int] = []

    def half_then_full(fd: int, data: Any, offset: int) -> int:
        calls.append(offset)
        return pwrite(fd, memoryview(data)[:1000], offset) if len(calls) == 1 else full()

    monkeypatch.setattr(cache_dir.os, "pwrite", half_then_full if where == "data" else pwrite)
    monkeypatch.setattr(cache_dir.pieces, "save", full if where == "record" else save)
    before = _fetched(http)
    assert _read(source, [(0, 200_000), (300_000, 10)]) == [DATA[:200_000], DATA[300_000:300_010]]
    # what this read fetched is used, not fetched again; what the cache held comes from the store
    assert _fetched(http) - before == (200_000 - 1000 + 10) + 1000
    assert source.cache_off is not None and "has no space left" in source.cache_off
    (said,) = _said(caplog)
    assert f"the cache folder {str(tmp_path / 'c')!r} has no space left" in said
    monkeypatch.undo()
    assert _read(source, [(0, 10)]) == [DATA[:10]]  # off for this object in this process
    assert _fetched(http) - before == 200_000 + 10 + 10
    assert _read(_cached(http, tmp_path / "c"), [(0, 1000)]) == [DATA[:1000]]  # others: on


def test_the_cache_is_private_to_its_user(http: Any, tmp_path: Path) -> None:
    (http.root / "f.bin").write_bytes(DATA)
    _read(_open(http, tmp_path / "c"), [(0, 1000)])
    folders = [tmp_path / "c", tmp_path / "c" / ".versions", *_entries(tmp_path / "c")]
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in folders} == {0o700}
    files = [p for f in folders for p in f.iterdir() if p.is_file()]
    assert len(files) >= 7 and {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o600}


@needs_root
def test_eviction_never_touches_what_is_not_ours(tmp_path: Path) -> None:
    cache, elsewhere = tmp_path / "c", tmp_path / "elsewhere"
    cache.mkdir(mode=0o700)
    _plant(elsewhere, OTHER)
    (cache / "linked").symlink_to(elsewhere)
    (cache / ".evicted-linked").symlink_to(elsewhere)
    foreign = cache / "foreign"
    _plant(foreign, OTHER)
    for path in (foreign, *foreign.iterdir()):
        os.chown(path, OTHER_UID, OTHER_UID)
    mine = cache / "mine"
    _plant(mine, DATA)
    assert make_room(str(cache), needed=1, limit=1)  # evicts every entry it may: ours only
    assert not mine.exists() and foreign.exists() and (cache / "linked").is_symlink()
    assert (elsewhere / "data").read_bytes() == OTHER and (foreign / "data").read_bytes() == OTHER
    shutil.rmtree(foreign)


def test_an_entry_of_ours_that_others_may_write_is_made_ours_alone(
    http: Any, tmp_path: Path
) -> None:
    (http.root / "f.bin").write_bytes(DATA)
    _read(_cached(http, tmp_path / "c"), [(0, 1000)])
    (entry,) = _entries(tmp_path / "c")
    entry.chmod(0o775)  # as an older version left it under umask 002
    (entry / "data").chmod(0o664)
    before = _fetched(http)
    assert _read(_cached(http, tmp_path / "c"), [(0, 1000)]) == [DATA[:1000]]
    assert _fetched(http) == before  # still used
    assert stat.S_IMODE(entry.stat().st_mode) == 0o700
    assert stat.S_IMODE((entry / "data").stat().st_mode) == 0o600
