"""The write limit: the same rows written by h5py in one process, same chunks and compression."""

from __future__ import annotations

import os
import time

import h5py
import numpy as np

from ..registry import Peer, register

NAME = "h5py write, one process"


def write_limit(path: str, rows: np.ndarray, chunk_rows: int, *, fsync: bool = False) -> float:
    """Seconds to write ``rows`` as one gzip-1 + shuffle dataset of ``chunk_rows``-row chunks.

    What a user writes without our writer: one ``create_dataset``, whole-chunk slabs, close
    (and, with ``fsync``, the file flushed to the disk, as ``predict`` does before it renames).
    """
    start = time.perf_counter()
    with h5py.File(path, "w") as f:
        data = f.create_dataset(
            "predictions",
            shape=rows.shape,
            dtype=rows.dtype,
            chunks=(chunk_rows, *rows.shape[1:]),
            compression="gzip",
            compression_opts=1,
            shuffle=True,
            track_times=False,
        )
        step = chunk_rows * max(1, (64 << 20) // max(1, rows[:chunk_rows].nbytes))
        for lo in range(0, len(rows), step):
            data[lo : lo + step] = rows[lo : lo + step]
    if fsync:
        with open(path, "rb+") as file:
            os.fsync(file.fileno())
    return time.perf_counter() - start


register(Peer(NAME, "limit", {"predict": write_limit}))
