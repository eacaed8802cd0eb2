import os

import numpy as np
import pytest
import torch

from nn_handler._io import platform
from nn_handler._validate import format_bytes
from nn_handler.dataloaders._rank_cache import memory as _memory
from nn_handler.dataloaders._transport import pinned as _pinned

MiB = 1024**2
GiB = 1024**3


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(64 * MiB) == "64.0 MiB"
    assert format_bytes(3 * 1024 * GiB) == "3072.0 GiB"


def test_shm_space(tmp_path):
    if platform.SHM_FOLDER is None:  # macOS, Windows: shared memory has no folder to ask
        assert _memory.shm_space() is None
        return
    free, size = _memory.shm_space()
    assert 0 <= free <= size
    free, size = _memory.shm_space(str(tmp_path))
    assert 0 < free <= size
    assert _memory.shm_space(str(tmp_path / "absent")) is None


def test_ram_error_says_needed_available_and_what_to_do(monkeypatch):
    monkeypatch.setattr(_memory, "available_ram_bytes", lambda: 100 * MiB)
    _memory.check_fits(100 * MiB, "the shard", shared=False)  # exactly fits
    with pytest.raises(MemoryError) as info:
        _memory.check_fits(150 * MiB, "rank 2's shard of 'x'", shared=False)
    text = str(info.value)
    assert "rank 2's shard of 'x' needs 150.0 MiB of RAM" in text
    assert "only 100.0 MiB is available (MemAvailable in /proc/meminfo)" in text
    assert "fewer ranks per node" in text and "H5LazyDataset" in text


def test_shm_error_names_shm_size_and_sigbus(monkeypatch):
    monkeypatch.setattr(_memory, "available_ram_bytes", lambda: 100 * GiB)
    monkeypatch.setattr(_memory, "shm_space", lambda path=_memory.SHM_PATH: (10 * MiB, 64 * MiB))
    _memory.check_fits(200 * MiB, "the shard", shared=False)  # /dev/shm is not needed
    with pytest.raises(MemoryError) as info:
        _memory.check_fits(200 * MiB, "the shard", shared=True)
    text = str(info.value)
    assert "the shard needs 200.0 MiB of shared memory" in text
    assert "/dev/shm has only 10.0 MiB free (size 64.0 MiB)" in text
    assert "SIGBUS" in text
    assert "--shm-size=2g" in text  # 54 MiB in use + 200 MiB, rounded up, plus 1 GiB headroom
    assert "fewer ranks per node" in text and "H5LazyDataset" in text
    assert "share_memory=False" in text


def test_shared_memory_also_needs_ram(monkeypatch):
    monkeypatch.setattr(_memory, "available_ram_bytes", lambda: 1 * MiB)
    monkeypatch.setattr(_memory, "shm_space", lambda path=_memory.SHM_PATH: (GiB, GiB))
    with pytest.raises(MemoryError, match="of RAM"):
        _memory.check_fits(2 * MiB, "the shard", shared=True)


def test_unknown_probes_skip_the_checks(monkeypatch):
    monkeypatch.setattr(_memory, "available_ram_bytes", lambda: None)
    monkeypatch.setattr(_memory, "shm_space", lambda path=_memory.SHM_PATH: None)
    _memory.check_fits(10**18, "the shard", shared=True)


def _shm_mappings() -> set[str]:
    with open("/proc/self/maps") as f:
        return {
            line.split()[0]
            for line in f
            if line.rstrip().endswith("(deleted)") and "/dev/shm/" in line
        }


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux /proc")
@pytest.mark.parametrize("shape", [(5, 3, 4), (7,), (0, 2)])
def test_allocate_shared_lives_in_shared_memory(shape):
    before = _shm_mappings()
    t = _memory.allocate(shape, np.dtype(np.float64), shared=True)
    assert t.shape == shape and t.dtype == torch.float64 and t.is_contiguous()
    assert t.is_shared()
    t.fill_(2.5)
    assert float(t.sum()) == 2.5 * t.numel()
    if t.numel():
        # the tensor's own pages are a /dev/shm mapping: it was created there, not moved
        start = t.data_ptr()
        added = _shm_mappings() - before
        spans = [tuple(int(v, 16) for v in span.split("-")) for span in added]
        assert any(lo <= start < hi for lo, hi in spans)


def test_allocate_private():
    t = _memory.allocate((4, 2), np.dtype(np.int32), shared=False)
    assert t.shape == (4, 2) and t.dtype == torch.int32
    assert not t.is_shared()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
def test_pin_without_cuda_logs_once_and_continues(monkeypatch):
    monkeypatch.setattr(_pinned, "_LOGGED", set())
    lines: list[str] = []
    t = _memory.allocate((3, 2), np.dtype(np.float32), shared=True)
    assert _memory.pin_in_place(t, lines.append) is False
    assert _memory.pin_in_place(t, lines.append) is False
    assert len(lines) == 1 and "CUDA is not available" in lines[0]
    assert t.is_shared() and not t.is_pinned()


def test_log_once(monkeypatch):
    monkeypatch.setattr(_pinned, "_LOGGED", set())
    lines: list[str] = []
    for _ in range(3):
        _memory.log_once("a", lines.append)
    _memory.log_once("b", lines.append)
    assert lines == ["a", "b"]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pin_in_place_keeps_shared_memory_shared():
    t = _memory.allocate((1024, 256), np.dtype(np.float32), shared=True)
    ptr = t.data_ptr()
    assert _memory.pin_in_place(t, print)
    assert t.is_pinned() and t.is_shared() and t.data_ptr() == ptr  # pinned where it lies
    t.fill_(1.0)
    assert float(t.cuda(non_blocking=True).sum()) == t.numel()
