"""Part files: what one writer process stored, as checksummed records appended to one file.

A record is a 40-byte header (magic, kind, output, chunk, row count, payload length, the
payload's CRC-32, the header's CRC-32) then its payload: an encoded chunk (``CHUNK``: the bytes
the file will hold) or rows with their sample indices (``ROWS``: ``count`` int64 indices, then
the rows' raw bytes). A writer appends to a part of its own (``part-<id>.open``), renamed
``.done`` when it closes. A process killed mid-record leaves a record cut short: the header's
length or a checksum then disagrees, and the part is read up to the last whole record, so every
row that was stored completely is reused. Parts are not fsynced: a kill leaves what was written
in the page cache, and a part that a machine crash tore is caught by the same checksums.
"""

from __future__ import annotations

import os
import struct
import uuid
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

__all__ = [
    "CHUNK",
    "ROWS",
    "PartFile",
    "Record",
    "check_payload",
    "scan_folder",
]

CHUNK, ROWS = 1, 2
_MAGIC = b"NNHR"
_HEAD = struct.Struct("<4sBxHqqqI")  # magic, kind, output, chunk, count, length, payload crc
_FULL = struct.Struct(_HEAD.format + "I")  # ... and the CRC-32 of the fields before it
OPEN_SUFFIX, DONE_SUFFIX = ".open", ".done"


@dataclass(frozen=True)
class Record:
    """One whole record of a part, found by ``scan_folder``.

    Attributes:
        part: The part file.
        offset: Where the payload starts in it.
        kind: ``CHUNK`` or ``ROWS``.
        output: Index of the dataset (the layout's ``specs`` order).
        chunk: The chunk (``CHUNK``); -1 for ``ROWS``.
        count: Rows the record holds.
        length: Payload bytes.
        crc: CRC-32 of the payload.
        indices: The rows' sample indices (``ROWS``; empty for ``CHUNK``).
    """

    part: Path
    offset: int
    kind: int
    output: int
    chunk: int
    count: int
    length: int
    crc: int
    indices: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64), compare=False)


class PartFile:
    """The part one writer process appends its records to.

    Args:
        folder: The work folder.
    """

    def __init__(self, folder: Path) -> None:
        self.path = folder / f"part-{uuid.uuid4().hex}{OPEN_SUFFIX}"
        # unbuffered: a forked child that inherits this object has no pending bytes to flush
        self._file: BinaryIO | None = open(self.path, "xb", buffering=0)  # noqa: SIM115

    def append(
        self, kind: int, output: int, chunk: int, count: int, payload: Sequence[bytes | memoryview]
    ) -> None:
        """Append one record whose payload is the concatenation of ``payload``."""
        assert self._file is not None, "part sealed"
        crc, length = 0, 0
        for piece in payload:
            crc = zlib.crc32(piece, crc)
            length += memoryview(piece).nbytes
        head = _HEAD.pack(_MAGIC, kind, output, chunk, count, length, crc)
        _write_all(self._file, head + struct.pack("<I", zlib.crc32(head)))
        for piece in payload:
            _write_all(self._file, piece)

    def seal(self) -> None:
        """Close the part and mark it whole (``.done``); safe to call twice."""
        if self._file is None:
            return
        self._file.close()
        self._file = None
        done = self.path.with_suffix(DONE_SUFFIX)
        try:
            os.replace(self.path, done)
        except FileNotFoundError:  # the file was made (and its folder removed) meanwhile
            return
        self.path = done


def _write_all(file: BinaryIO, data: bytes | memoryview) -> None:
    """Write all of ``data`` (an unbuffered write may take part of it)."""
    view = memoryview(data).cast("B")
    while view.nbytes:
        view = view[file.write(view) :]


def scan_folder(folder: Path, log: list[str]) -> list[Record]:
    """Every whole record of every part in ``folder`` (parts in name order, records in order).

    A part's records are read up to the first that is cut short or damaged; what follows is
    left out and said in ``log``. Payload checksums are checked here for parts still ``.open``
    (their writer was killed); those of ``.done`` parts when the payload is read.
    """
    records: list[Record] = []
    for part in sorted(folder.glob("part-*")):
        if part.suffix in (OPEN_SUFFIX, DONE_SUFFIX):
            records.extend(_scan_part(part, log))
    return records


def _scan_part(part: Path, log: list[str]) -> Iterator[Record]:
    size = part.stat().st_size
    verify = part.suffix == OPEN_SUFFIX
    with open(part, "rb") as file:
        offset = 0
        while offset < size:
            record = _read_record(file, part, offset, size, verify)
            if record is None:
                log.append(
                    f"{part.name}: {size - offset} bytes from offset {offset} are not a whole "
                    "record (a writer killed mid-write); their rows are computed again"
                )
                return
            yield record
            offset = record.offset + record.length


def _read_record(file: BinaryIO, part: Path, offset: int, size: int, verify: bool) -> Record | None:
    file.seek(offset)
    head = file.read(_FULL.size)
    if len(head) < _FULL.size:
        return None
    magic, kind, output, chunk, count, length, crc, head_crc = _FULL.unpack(head)
    start = offset + _FULL.size
    whole = magic == _MAGIC and head_crc == zlib.crc32(head[: _HEAD.size])
    if not whole or kind not in (CHUNK, ROWS) or length < 0 or start + length > size:
        return None
    indices = np.empty(0, np.int64)
    if kind == ROWS:
        indices = np.frombuffer(file.read(8 * count), dtype="<i8").astype(np.int64)
    if verify:
        file.seek(start)
        if zlib.crc32(file.read(length)) != crc:
            return None
    return Record(part, start, kind, output, chunk, count, length, crc, indices)


def check_payload(record: Record, data: bytes) -> bytes:
    """``data`` when it is ``record``'s payload whole, as its CRC-32 says.

    Raises:
        OSError: the payload's bytes changed after they were written (a damaged part).
    """
    if len(data) != record.length or zlib.crc32(data) != record.crc:
        raise OSError(
            f"part {str(record.part)!r} is damaged at offset {record.offset} (its checksum "
            "does not match); it was set aside: run again to compute its rows anew"
        )
    return data
