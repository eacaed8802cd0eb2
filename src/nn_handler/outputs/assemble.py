"""The one way an output file is made: every part's records, checked, then one file in order.

Whatever wrote the parts (one process or many ranks and workers), this code makes the file, in
one process, always the same way: datasets created in the layout's order without time stamps,
chunks written in index order (encoded chunks as they are, with ``write_direct_chunk``; chunks
assembled from raw rows encoded here, in threads, as the writers would have), attributes in
name order. So the file's bytes depend only on the rows, never on the number of writers. The
file is written under the work folder, fsynced, then moved onto ``PATH`` (``os.replace``): a
reader sees no file or the whole one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import h5py
import numpy as np

from .._io import read_at
from .._validate import usable_cores
from .buffers import refuse_differing, same_rows
from .codec import GZIP_LEVEL, decode_chunk, encode_chunk
from .layout import OutputLayout, OutputSpec
from .parts import Record, check_payload
from .sources import ChunkPlan, plan_chunks

__all__ = ["assemble"]


def assemble(
    folder: Path, path: Path, layout: OutputLayout, attrs: Mapping[str, Any], records: list[Record]
) -> Path:
    """Write ``path`` from the parts of ``folder``, then remove the folder.

    Raises:
        ValueError: rows are missing (how many, and the first few), or a sample was stored
            twice with different values.
        OSError: a part is damaged (it is set aside, so a rerun computes its rows again).
    """
    plans = plan_chunks(layout, records)
    temporary = folder / "assembly.h5"
    with _Parts() as parts:
        try:
            _write(temporary, layout, attrs, plans, parts)
        except BaseException as exc:
            temporary.unlink(missing_ok=True)  # a file begun is never used again
            bad = getattr(exc, "part", None)
            if bad is not None:
                parts.close()
                os.replace(bad, Path(bad).with_suffix(".bad"))
            raise
    _fsync(temporary)
    os.replace(temporary, path)
    _fsync_folder(path.parent)
    shutil.rmtree(folder, ignore_errors=True)
    return path


def _write(
    temporary: Path,
    layout: OutputLayout,
    attrs: Mapping[str, Any],
    plans: list[list[ChunkPlan]],
    parts: _Parts,
) -> None:
    with h5py.File(temporary, "w") as file:
        for output, spec in enumerate(layout.specs):
            dataset = file.create_dataset(
                spec.name,
                shape=(layout.n_rows, *spec.shape),
                dtype=spec.numpy_dtype,
                chunks=(layout.chunk_rows, *spec.shape),
                compression="gzip",
                compression_opts=GZIP_LEVEL,
                shuffle=True,
                track_times=False,
            )
            zeros = (0,) * len(spec.shape)
            for chunk, data in _encoded(layout, output, plans[output], parts):
                dataset.id.write_direct_chunk((chunk * layout.chunk_rows, *zeros), data)
        for name in sorted(attrs):
            file.attrs[name] = attrs[name]


def _encoded(
    layout: OutputLayout, output: int, plans: list[ChunkPlan], parts: _Parts
) -> Iterator[tuple[int, bytes]]:
    """``(chunk, stored bytes)`` in chunk order; chunks made of raw rows encoded in threads."""
    spec = layout.specs[output]
    with ThreadPoolExecutor(max(1, usable_cores())) as pool:
        window = 2 * max(1, usable_cores())
        pending: list[Any] = []
        for plan in plans:
            pending.append(pool.submit(_chunk_bytes, layout, spec, plan, parts.read))
            if len(pending) >= window:
                yield pending.pop(0).result()
        for future in pending:
            yield future.result()


def _chunk_bytes(
    layout: OutputLayout, spec: OutputSpec, plan: ChunkPlan, read: Callable[[Record], bytes]
) -> tuple[int, bytes]:
    """The stored bytes of one chunk: copied when one record holds it whole, else encoded."""
    encoded = None if plan.encoded is None else read(plan.encoded)
    if encoded is not None and not plan.raw and all(read(r) == encoded for r in plan.repeats):
        return plan.chunk, encoded  # (equal rows encode to equal bytes: repeats checked)
    start, stop = layout.chunk_span(plan.chunk)
    rows = np.zeros((stop - start, *spec.shape), dtype=spec.numpy_dtype)
    have = np.zeros(stop - start, dtype=bool)
    every = np.arange(start, stop)
    for record in [r for r in (plan.encoded, *plan.repeats) if r is not None]:
        decoded = decode_chunk(read(record), spec, layout.chunk_rows)[: stop - start]
        _merge(rows, have, every - start, decoded, every)
    for record in plan.raw:
        values = np.frombuffer(read(record), dtype=np.uint8, offset=8 * record.count)
        values = values.view(spec.numpy_dtype).reshape(record.count, *spec.shape)
        inside = (record.indices >= start) & (record.indices < stop)
        samples = record.indices[inside]
        _merge(rows, have, samples - start, values[inside], samples)
    return plan.chunk, encode_chunk(rows, layout.chunk_rows)


def _merge(
    rows: np.ndarray, have: np.ndarray, local: np.ndarray, values: np.ndarray, samples: np.ndarray
) -> None:
    """Put ``values`` at ``local``; a row already there must have the same bytes."""
    again = have[local]
    if again.any():
        refuse_differing(samples[again][~same_rows(rows[local[again]], values[again])])
    rows[local] = values
    have[local] = True


class _Parts:
    """The part files, each opened once; the assembly's threads read them at once (``pread``)."""

    def __init__(self) -> None:
        self._files: dict[Path, BinaryIO] = {}
        self._lock = threading.Lock()

    def read(self, record: Record) -> bytes:
        with self._lock:
            file = self._files.get(record.part)
            if file is None:
                file = self._files[record.part] = open(record.part, "rb")  # noqa: SIM115
        data = bytearray(record.length)
        try:
            read_at(file.fileno(), str(record.part), [(record.offset, record.length)], [data])
        except OSError:
            data = bytearray()  # cut short: its checksum names the part as damaged
        return self._checked(record, bytes(data))

    @staticmethod
    def _checked(record: Record, data: bytes) -> bytes:
        try:
            return check_payload(record, data)
        except OSError as exc:
            exc.part = record.part  # type: ignore[attr-defined]
            raise

    def close(self) -> None:
        for file in self._files.values():
            file.close()
        self._files.clear()

    def __enter__(self) -> _Parts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fsync(path: Path) -> None:
    with open(path, "rb+") as file:
        os.fsync(file.fileno())


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable: fsync the folder (where the system lets a folder be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
