"""Windows and macOS: the platform facts, the portable paths, and every loader with spawn workers.

``nn_handler._io.platform`` names what the operating system offers; where a capability is
missing the library takes a portable path that reads the same bytes and says so once, at DEBUG
level. The fast tests here take each portable path on Linux (a fact switched off for the test);
``.ci/portable`` runs this file, with the loader tests of the suite, under simulated Windows
and macOS interpreters (``tests/platforms/``), where the facts are off for real. The slow tests
start every dataset class's workers with spawn (the only start method on Windows, the default
on macOS), with 0 and 2 workers, and train an ``NNHandler`` with them.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from nn_handler import NNHandler
from nn_handler._io import notices, platform, process
from nn_handler._io.chunks import decoded
from nn_handler._io.storage import byte_source, node_memory
from nn_handler._io.storage.byte_source import LocalFile, shared_memory
from nn_handler.dataloaders import H5LazyDataset, batched_loader, indexes_batches
from nn_handler.dataloaders._transport import shm_space
from nn_handler.dataloaders._transport import worker_queues as queues_module

from helpers.dataset_classes import FACTORIES, dataset_classes, make_dataset
from helpers.files import h5_rows
from helpers.handler import TinyNet, strip_index, write_blobs

SIMULATED = os.environ.get("NN_HANDLER_SIMULATE", "")  # the profile .ci/portable installed
TIMEOUT = 120
KINDS = [cls.__name__ for cls in FACTORIES]


@pytest.fixture
def said(caplog: pytest.LogCaptureFixture) -> Any:
    """What the library said in this test (notices said before are forgotten meanwhile)."""
    saved = set(notices._said)
    notices._said.clear()
    caplog.set_level(logging.DEBUG, logger="nn_handler")
    yield lambda level: [r.getMessage() for r in caplog.records if r.levelno == level]
    notices._said.clear()
    notices._said.update(saved)


# -- the facts ------------------------------------------------------------------------------


def test_the_facts_are_what_the_interpreter_offers():
    assert ("fork" in multiprocessing.get_all_start_methods()) == platform.FORK
    assert hasattr(os, "register_at_fork") == platform.AT_FORK
    assert hasattr(os, "pread") == platform.PREAD
    assert hasattr(os, "posix_fadvise") == platform.FADVISE
    assert (platform.OFD and platform.TMPFILE) == node_memory.NAMED
    assert platform.OFD <= platform.FLOCK  # OFD locks are fcntl's


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


@pytest.mark.skipif(SIMULATED != "windows", reason="runs under the simulated Windows")
def test_the_simulated_windows_lacks_what_windows_lacks():
    assert not any(_importable(name) for name in ("fcntl", "termios", "resource"))
    assert multiprocessing.get_all_start_methods() == ["spawn"]
    with pytest.raises(ValueError, match="cannot find context for 'fork'"):
        multiprocessing.get_context("fork")
    off = ("FORK", "AT_FORK", "PREAD", "FADVISE", "MADVISE", "MMAP_FLAGS", "FLOCK", "OFD")
    assert [name for name in off if getattr(platform, name)] == []
    assert not (platform.OWNERS or platform.PIPE_ROOM or node_memory.NAMED)
    assert platform.SHM_FOLDER is None


@pytest.mark.skipif(SIMULATED != "macos", reason="runs under the simulated macOS")
def test_the_simulated_macos_lacks_what_macos_lacks():
    import fcntl

    assert not hasattr(fcntl, "F_OFD_SETLK") and multiprocessing.get_start_method() == "spawn"
    assert platform.FORK and platform.FLOCK and platform.OWNERS and platform.PREAD
    assert not (platform.OFD or platform.FADVISE or platform.PIPE_ROOM or node_memory.NAMED)


#: the modules users import (docs/design.md, "Public modules")
PUBLIC = [
    "nn_handler", "nn_handler.handler", "nn_handler.distributed", "nn_handler.cli",
    "nn_handler.demo", "nn_handler.h5inspect", "nn_handler.bench", "nn_handler.dataloaders",
    *(f"nn_handler.dataloaders.{name}" for name in (
        "h5_dataloader", "rank_cached_h5_dataloader", "combined_h5_dataset", "h5_sample_dataset",
        "h5_sparse_dataset", "samplers", "chunk_sampler", "loader", "prefetch", "transforms",
    )),
]  # fmt: skip


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_module_imports(name: str):
    assert importlib.import_module(name).__name__ == name


def test_what_is_off_is_said_once_at_debug_level(said: Any):
    platform.off("a capability", "the portable path")
    platform.off("a capability", "the portable path")
    assert said(logging.DEBUG) == [
        "nn_handler: a capability not available on this platform: the portable path"
    ]
    assert said(logging.WARNING) == []


# -- each portable path, taken on any platform ----------------------------------------------


def test_reads_without_pread_give_the_same_bytes_in_every_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, said: Any
):
    content = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    path = tmp_path / "f.bin"
    path.write_bytes(content)
    monkeypatch.setattr(byte_source, "PREADV", False)
    monkeypatch.setattr(byte_source, "PREAD", False)
    file = LocalFile(str(path))
    errors: list[int] = []

    def read(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(50):
            offsets = rng.integers(0, 1 << 19, 4).tolist()
            ranges = list(zip(offsets, [7, 0, 9, 4096], strict=True))
            buffers = [np.empty(n, np.uint8) for _, n in ranges]
            file.read_ranges(ranges, buffers)
            if [b.tobytes() for b in buffers] != [content[o : o + n] for o, n in ranges]:
                errors.append(seed)

    threads = [threading.Thread(target=read, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert errors == []
    assert any("os.pread not available" in m for m in said(logging.DEBUG))


def test_memory_without_posix_map_flags_is_zeroed_and_writable(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(byte_source, "MMAP_FLAGS", False)
    memory = shared_memory(10_000)
    view = np.frombuffer(memory, np.uint8)
    assert view.size == 10_000 and not view.any()
    view[:3] = 7
    assert memory[:3] == b"\x07\x07\x07"


def test_a_decoded_copy_without_fork_is_this_process_own(
    monkeypatch: pytest.MonkeyPatch, said: Any
):
    monkeypatch.setattr(node_memory, "FORK", False)
    monkeypatch.setattr(node_memory, "_FORK", None)
    region = node_memory.anonymous_region(4096)
    with region.lock():
        region.payload[:4] = 1
    assert region.payload[:5].tolist() == [1, 1, 1, 1, 0]
    assert region.filler_alive(0, *process.process_stamp())
    assert any("fork not available" in m for m in said(logging.DEBUG))


def test_without_named_regions_a_dataset_reads_the_same_and_warns_nothing(
    make_h5: Any, monkeypatch: pytest.MonkeyPatch, said: Any
):
    monkeypatch.setattr(decoded, "NAMED", False)
    rows = np.random.default_rng(0).standard_normal((203, 3, 32, 32)).astype(np.float32)
    path = make_h5({"x": (rows, "gzip-shuffle")})  # 2.4 MB decoded: more than a chunk cache
    ds = H5LazyDataset(path, "x")
    rows = [200, 3, 3, 100, 17]
    np.testing.assert_array_equal(ds[rows].numpy(), h5_rows(path, "x", rows))
    copy = ds._row_readers()[0]._rows.engine.decoded.blocks
    assert copy is not None and copy.name is None  # decoded, unnamed
    assert said(logging.WARNING) == []
    assert any("named regions" in m for m in said(logging.DEBUG))


def test_without_meminfo_the_budget_is_what_the_user_sets(
    monkeypatch: pytest.MonkeyPatch, said: Any
):
    monkeypatch.setattr(decoded, "usable_ram_bytes", lambda: None)
    monkeypatch.delenv(decoded.BUDGET_ENV, raising=False)
    assert decoded.decoded_budget(None) == 0 and decoded.decoded_budget(1 << 20) == 1 << 20
    assert any("no decoded budget unless set" in m for m in said(logging.DEBUG))
    assert said(logging.WARNING) == []


def test_queues_without_pipe_room_are_the_standard_ones(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(queues_module, "PIPE_ROOM", False)
    context = multiprocessing.get_context("spawn")
    assert queues_module.direct_context(context) is context


def test_without_proc_a_process_is_known_by_its_pid(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(process, "PROC", False)
    assert process.process_alive(os.getpid())
    assert process.process_started(os.getpid()) is None
    assert process.started_process_alive(os.getpid(), 12345)  # no start time to tell apart


def test_without_a_shared_memory_folder_nothing_is_measured():
    assert shm_space(None) is None


# -- every loader with spawn workers --------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple | list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor):
        dense, other = a.to_dense(), b.to_dense()  # (NaN: a gap in a recording's signal)
        return (
            a.layout == b.layout
            and bool(torch.equal(dense.isnan(), other.isnan()))
            and bool(torch.equal(dense.nan_to_num(), other.nan_to_num()))
        )
    return bool(a == b)


def test_every_dataset_class_is_covered():
    assert set(FACTORIES) == dataset_classes()


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_every_dataset_reads_the_same_with_spawn_workers(kind: str, workers: int, tmp_path: Path):
    ds = make_dataset(kind, tmp_path)
    want = [ds[i] for i in range(len(ds))]
    spawn = {"multiprocessing_context": "spawn", "timeout": TIMEOUT} if workers else {}
    batches = indexes_batches(ds)  # (each start of spawn workers costs seconds: one a class)
    if not (batches and workers):
        plain = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers, **spawn)
        assert _same(list(plain), want)
    if batches:  # our loader, which reads whole batches into the workers' rings
        batched = batched_loader(ds, 4, num_workers=workers, **spawn)
        assert _same(list(batched), list(batched_loader(ds, 4)))


@pytest.mark.slow
def test_nnhandler_trains_with_spawn_workers(tmp_path: Path):
    path = write_blobs(tmp_path / "train.h5", 300, chunks=(32, 9), compression="gzip")
    torch.manual_seed(0)
    handler = NNHandler(TinyNet, batch_fn=strip_index, progress=False, log_fn=None)
    handler.set_train_loader(
        H5LazyDataset(path, "x", "y"), batch_size=30, num_workers=2,
        multiprocessing_context="spawn", persistent_workers=True, timeout=TIMEOUT,
    )  # fmt: skip
    handler.set_optimizer(torch.optim.Adam, lr=1e-2)
    handler.set_loss_fn(nn.CrossEntropyLoss())
    history = handler.train(2)
    assert [r["steps"] for r in history] == [10, 10]
    assert history[1]["train_loss"] < history[0]["train_loss"]
    handler.close()
