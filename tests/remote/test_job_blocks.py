"""The file's metadata once per job: each block fetched by one rank, handed to the others."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from nn_handler._io.storage.identity import ObjectVersion
from nn_handler._io.storage.remote import job_blocks
from nn_handler._io.storage.remote.cached_file import CachedFile
from nn_handler._io.storage.remote.job_blocks import shared_read
from nn_handler.dataloaders import H5LazyDataset

DATA = np.random.default_rng(3).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
BLOCKS = [(k * 32768, min(32768, len(DATA) - k * 32768)) for k in range(10)]


class DictStore:
    """A ``JobStore`` in one process's memory (the job's ranks are threads here)."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.claims: dict[str, int] = {}
        self.changed = threading.Condition()

    def claim(self, key: str) -> bool:
        with self.changed:
            self.claims[key] = self.claims.get(key, 0) + 1
            return self.claims[key] == 1

    def publish(self, key: str, value: bytes) -> None:
        with self.changed:
            self.values[key] = value
            self.changed.notify_all()

    def wait_for(self, key: str, timeout_s: float) -> bytes | None:
        with self.changed:
            self.changed.wait_for(lambda: key in self.values, timeout_s)
            return self.values.get(key)


class Fake:
    """A stored object: counts what it was asked for; may be slow, or fail."""

    def __init__(self, etag: str = '"a"', data: bytes = DATA, delay_s: float = 0.0) -> None:
        self.url = "s3://bucket/f.h5"
        self.identity = ObjectVersion(len(data), etag)
        self.data = data
        self.delay_s = delay_s
        self.fail: Exception | None = None
        self.asked: list[tuple[int, int]] = []

    def read_ranges(self, ranges: Sequence[tuple[int, int]], buffers: Sequence[Any]) -> None:
        time.sleep(self.delay_s)
        if self.fail is not None:
            raise self.fail
        self.asked += ranges
        for (offset, length), buffer in zip(ranges, buffers, strict=True):
            buffer[:] = np.frombuffer(self.data, np.uint8, length, offset)


def _read(remote: Fake, store: DictStore, ranges: list[tuple[int, int]], wait_s: float = 10.0):
    buffers = [np.empty(n, np.uint8) for _, n in ranges]
    shared_read(remote, ranges, buffers, store, wait_s)
    return [b.tobytes() for b in buffers]


def _expected(ranges: list[tuple[int, int]]) -> list[bytes]:
    return [DATA[o : o + n] for o, n in ranges]


@pytest.mark.timeout(60)
def test_ranks_asking_together_fetch_each_block_once_and_all_get_its_bytes() -> None:
    store = DictStore()
    ranks = [Fake(delay_s=0.02) for _ in range(8)]
    got: list[Any] = [None] * len(ranks)
    start = threading.Barrier(len(ranks))

    def rank(k: int) -> None:
        start.wait()
        # each rank asks for the blocks in its own order, some one at a time
        order = BLOCKS[k % 3 :] + BLOCKS[: k % 3]
        got[k] = _read(ranks[k], store, order[:5]) + _read(ranks[k], store, order[5:])

    threads = [threading.Thread(target=rank, args=(k,)) for k in range(len(ranks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for k in range(len(ranks)):
        order = BLOCKS[k % 3 :] + BLOCKS[: k % 3]
        assert got[k] == _expected(order)
    fetched = sorted(r for rank in ranks for r in rank.asked)
    assert fetched == sorted(BLOCKS)  # every block once, in the whole "job"


def test_another_version_of_the_object_is_never_served_from_the_first_ones_blocks() -> None:
    store, changed = DictStore(), bytes(reversed(DATA))
    first, second = Fake('"a"'), Fake('"b"', data=changed)
    assert _read(first, store, BLOCKS[:3]) == _expected(BLOCKS[:3])
    got = _read(second, store, BLOCKS[:3])
    assert got == [changed[o : o + n] for o, n in BLOCKS[:3]]
    assert second.asked == BLOCKS[:3]


def test_a_rank_whose_fetch_fails_lets_the_others_fetch_at_once() -> None:
    store = DictStore()
    failing = Fake()
    failing.fail = OSError("the store said no")
    with pytest.raises(OSError, match="said no"):
        _read(failing, store, BLOCKS[:2])
    other = Fake()
    began = time.monotonic()
    assert _read(other, store, BLOCKS[:2], wait_s=30) == _expected(BLOCKS[:2])
    assert time.monotonic() - began < 5  # not the 30 s bound
    assert other.asked == BLOCKS[:2]


def test_a_block_claimed_by_a_rank_that_never_publishes_is_fetched_after_the_bound() -> None:
    store, other = DictStore(), Fake()
    for offset, length in BLOCKS[:2]:  # claimed by a rank that died before it published
        assert store.claim(job_blocks._key(other, offset, length))
    began = time.monotonic()
    assert _read(other, store, BLOCKS[:3], wait_s=0.3) == _expected(BLOCKS[:3])
    assert 0.3 <= time.monotonic() - began < 5
    assert sorted(other.asked) == BLOCKS[:3]


def test_a_published_value_of_the_wrong_length_is_not_used() -> None:
    store, remote = DictStore(), Fake()
    key = job_blocks._key(remote, *BLOCKS[0])
    store.claim(key)
    store.publish(key, b"\x01" + b"x" * 10)
    assert _read(remote, store, BLOCKS[:1]) == _expected(BLOCKS[:1])
    assert remote.asked == BLOCKS[:1]


@pytest.fixture
def dict_store() -> Any:
    store = DictStore()
    job_blocks.set_job_store(lambda: store)
    yield store
    from nn_handler.distributed import _job_store  # the package's own provider back

    job_blocks.set_job_store(_job_store._group_store)


@pytest.mark.timeout(120)
def test_a_second_node_opens_a_stored_file_without_asking_for_its_metadata(
    http: Any, tmp_path: Path, dict_store: DictStore
) -> None:
    x = np.random.default_rng(1).standard_normal((4000, 16)).astype(np.float32)
    with h5py.File(http.root / "f.h5", "w") as f:
        f.create_dataset("x", data=x, chunks=(50, 16), compression="gzip")
        f.create_dataset("y", data=np.arange(4000))
    rows, claimed = list(range(0, 4000, 97)), []
    for node in ("node0", "node1"):  # one after the other: the second finds every block
        ds = H5LazyDataset(
            http.url("f.h5"),
            "x",
            "y",
            cache_dir=str(tmp_path / node),
            storage_options={"headers": {"X-Client": node}},
        )
        xs, ys = ds[rows]
        np.testing.assert_array_equal(xs.numpy(), x[rows])
        assert ys.tolist() == rows
        assert isinstance(ds._source.byte_source(), CachedFile)
        ds.close()
        claimed.append(dict(dict_store.claims))
    assert claimed[0] and all(v[:1] == b"\x01" for v in dict_store.values.values())
    # every metadata block the second node needed, the first had published: it fetched none
    assert claimed[1].keys() == claimed[0].keys()
    assert all(claimed[1][key] == 2 for key in claimed[0])
    asked = {
        node: [(s, e) for who, _, s, e in http.client_ranges if who == node]
        for node in ("node0", "node1")
    }
    assert set(asked["node1"]) < set(asked["node0"])  # its version check and its chunks
