"""The node-local cache against a real HTTP server: one fetch per piece, shared, versioned."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import h5py
import numpy as np
import pytest

from nn_handler._io.storage.remote.cached_file import CachedFile
from nn_handler._io.storage.remote.file_object import SourceFile
from nn_handler._io.storage.remote.object_file import RemoteFile

DATA = np.random.default_rng(3).integers(0, 256, 400_000, dtype=np.uint8).tobytes()


def _read(source, ranges):
    buffers = [np.empty(n, np.uint8) for _, n in ranges]
    source.read_ranges(ranges, buffers)
    return [b.tobytes() for b in buffers]


def _cached(http, name, cache, limit=None):
    return CachedFile(RemoteFile(http.url(name)), str(cache), limit)


def _disk_bytes(root: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in root.rglob("data"))


def test_a_second_pass_fetches_nothing(http, tmp_path):
    (http.root / "f.bin").write_bytes(DATA)
    ranges = [(k * 9_000, 3_000) for k in range(40)]
    first = _cached(http, "f.bin", tmp_path / "c")
    assert _read(first, ranges) == [DATA[o : o + n] for o, n in ranges]
    requests = http.requests
    again = _cached(http, "f.bin", tmp_path / "c")  # another reader of the node, same version
    assert again.cached_bytes() == 40 * 3_000
    assert _read(again, ranges) == [DATA[o : o + n] for o, n in ranges]
    assert http.requests == requests + 1  # only the open (the version), no range
    assert again.fetched == 0


def _read_all_in_child(url: str, cache: str) -> int:
    source = CachedFile(RemoteFile(url), cache)
    assert _read(source, [(0, len(DATA))]) == [DATA]
    return source.fetched


@pytest.mark.slow  # a spawned process
@pytest.mark.timeout(120)
def test_two_processes_share_the_cache(http, tmp_path):
    (http.root / "f.bin").write_bytes(DATA)
    half = len(DATA) // 2
    parent = _cached(http, "f.bin", tmp_path / "c")
    _read(parent, [(0, half)])
    with mp.get_context("spawn").Pool(1) as pool:
        fetched = pool.apply_async(_read_all_in_child, (http.url("f.bin"), str(tmp_path / "c")))
        assert fetched.get(timeout=90) == len(DATA) - half  # only what the parent had not
    assert parent.local_copy() is not None
    assert Path(parent.local_copy()).read_bytes() == DATA


def test_a_new_version_never_gets_old_pieces(http, tmp_path):
    (http.root / "f.bin").write_bytes(DATA)
    _read(_cached(http, "f.bin", tmp_path / "c"), [(0, 1000)])
    (http.root / "f.bin").write_bytes(DATA[::-1])
    fresh = _cached(http, "f.bin", tmp_path / "c")
    assert fresh.cached_bytes() == 0
    assert _read(fresh, [(0, 1000)]) == [DATA[::-1][:1000]]


def test_unused_entries_are_evicted_over_the_cap(http, tmp_path):
    for name in ("a.bin", "b.bin"):
        (http.root / name).write_bytes(DATA)
    cache, limit = tmp_path / "c", 600_000
    a = _cached(http, "a.bin", cache, limit)
    _read(a, [(0, len(DATA))])
    a.close()  # no longer in use: may be evicted
    b = _cached(http, "b.bin", cache, limit)
    assert _read(b, [(0, len(DATA))]) == [DATA]
    assert b.cached_bytes() == len(DATA)
    assert _disk_bytes(cache) <= limit
    assert len([p for p in cache.iterdir() if (p / "data").exists()]) == 1


def test_entries_in_use_are_kept_and_reads_go_through(http, tmp_path):
    (http.root / "a.bin").write_bytes(DATA)
    cache, limit = tmp_path / "c", 100_000
    a = _cached(http, "a.bin", cache, limit)
    ranges = [(0, 80_000), (200_000, 80_000)]
    for offset, length in ranges:  # one call each: the first fits, the second does not
        assert _read(a, [(offset, length)]) == [DATA[offset : offset + length]]
    assert a.cached_bytes() == 80_000  # the second did not fit: read through, not cached
    assert _disk_bytes(cache) <= limit + 8192


def test_h5py_reads_metadata_through_the_cache(http, tmp_path):
    x = np.arange(30_000, dtype=np.float32).reshape(-1, 10)
    with h5py.File(http.root / "d.h5", "w") as f:
        f.create_dataset("x", data=x, chunks=(100, 10), compression="gzip")
    source = _cached(http, "d.h5", tmp_path / "c")
    with h5py.File(SourceFile(source), "r") as f:
        assert (f["x"][:] == x).all()
    requests = http.requests
    again = _cached(http, "d.h5", tmp_path / "c")
    with h5py.File(SourceFile(again), "r") as f:
        assert (f["x"][:] == x).all()
    assert http.requests == requests + 1  # the open only


def test_without_cache_dir_nothing_is_written(http, tmp_path, monkeypatch):
    (http.root / "f.bin").write_bytes(DATA)
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    assert _read(RemoteFile(http.url("f.bin")), [(0, 100)]) == [DATA[:100]]
    assert sorted(tmp_path.rglob("*")) == before
