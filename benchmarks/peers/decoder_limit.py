"""The decoder limit (gzip): libdeflate inflating every chunk in one thread × the usable cores."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from nn_handler._validate import usable_cores
from nn_handler.bench.contenders import X_KEY

from ..registry import Peer, register

if TYPE_CHECKING:
    from ..cases import WorkloadCase

NAME = "libdeflate"
_RAW_BYTES = 256 * 1024**2  # raw chunks inflated to measure the decode limit


def raw_chunks(path: str) -> tuple[list[bytes], int, int]:
    """Raw chunks of ``central`` (up to 256 MiB), decoded chunk bytes, rows each."""
    with h5py.File(path, "r") as f:
        dset = f[X_KEY]
        chunk_rows = int(dset.chunks[0])
        nbytes = int(np.prod(dset.chunks)) * dset.dtype.itemsize
        raws: list[bytes] = []
        total = 0
        for start in range(0, dset.shape[0] - chunk_rows + 1, chunk_rows):
            raw = dset.id.read_direct_chunk((start,) + (0,) * (dset.ndim - 1))[1]
            raws.append(bytes(raw))
            total += len(raw)
            if total > _RAW_BYTES:
                break
    return raws, nbytes, chunk_rows


def inflate_limit(
    raws: list[bytes], nbytes: int, chunk_rows: int, budget_s: float
) -> tuple[float, float]:
    """Inflate with libdeflate (zlib when absent) in one thread, × usable cores, in samples/s.

    libdeflate is ``imagecodecs.deflate_decode``, into one reused buffer as the readers do.
    Returns (samples/s over the usable cores, samples per CPU-second of one core).
    """
    try:
        decode: Any = importlib.import_module("imagecodecs").deflate_decode
        out = np.empty(nbytes, np.uint8)
        inflate: Callable[[bytes], Any] = lambda raw: decode(raw, out=out)  # noqa: E731
    except (ImportError, AttributeError):  # pragma: no cover - the bench extra installs it
        import zlib

        inflate = zlib.decompress
    for raw in raws[:4]:
        inflate(raw)
    done, start, cpu = 0, time.perf_counter(), time.thread_time()
    while time.perf_counter() - start < min(budget_s, 2.0) or done == 0:
        for raw in raws:
            inflate(raw)
            done += 1
            if time.perf_counter() - start > budget_s:
                break
    cpu = time.thread_time() - cpu
    wall = time.perf_counter() - start
    return done * chunk_rows / wall * usable_cores(), done * chunk_rows / max(cpu, 1e-9)


class _Inflate:
    """The workload's raw chunks read once; ``measure`` inflates them."""

    def __init__(self, case: WorkloadCase) -> None:
        self.name = f"libdeflate, 1 thread × {usable_cores()} cores"
        self.budget_s = case.budget_s
        self.raw = raw_chunks(case.path)

    def measure(self) -> tuple[float, float]:
        """(samples/s, samples per CPU-second of one core)."""
        return inflate_limit(*self.raw, self.budget_s)


def workloads(case: WorkloadCase) -> _Inflate | None:
    """The limit of a gzip workload (None: uncompressed, or another filter)."""
    w = case.workload
    return _Inflate(case) if w.compressed and w.plugin is None else None


register(Peer(NAME, "limit", {"workloads": workloads}))
