"""Raw chunk bytes read from the offsets in HDF5's chunk table: no h5py, no lock.

``read_direct_chunk`` goes through h5py, which holds its global lock for every call: decode
threads line up behind it. For a dataset whose chunks each hold whole rows, ``ChunkTable``
takes the chunk index the layout check walked (``file/chunk_walk.py``), checks every entry
against the file's size, and then serves any chunk's raw bytes with one read of the file's
``ByteSource`` into a reused per-thread buffer (``preadv`` for a local file: the GIL is released
while the kernel copies).

The file's descriptor is opened lazily in each process (a forked worker opens its own; pickles
carry none), and the file is checked to still be the one the table was read from (the same
file, ``FileIdentity.same_file``, and a size no smaller than every chunk's end) before it is used.
An object in a store (``storage/remote/``) is checked by the store instead: every range request is
conditional on the version recorded at open, so its errors pass through as they are.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import h5py
import numpy as np

from ..errors import FileChangedError
from ..file.chunk_walk import read_chunk_index
from ..process import PerProcess
from ..storage.byte_source import ByteSource, LocalBytes, LocalFile
from ..storage.chunk_index import ChunkIndex
from ..storage.identity import FileIdentity, SourceIdentity, identity_of_fd

__all__ = ["ChunkTable"]


class ChunkTable:
    """Offsets, sizes and filter masks of the chunks of one dataset whose chunks hold whole rows.

    Use ``ChunkTable.build``; entry ``b`` is the chunk holding rows
    ``[b * chunk_rows, (b + 1) * chunk_rows)``.
    """

    def __init__(
        self,
        file: ByteSource,
        key: str,
        offsets: np.ndarray[Any, Any],
        sizes: np.ndarray[Any, Any],
        masks: np.ndarray[Any, Any],
        identity: SourceIdentity | None,
    ) -> None:
        self.file, self.path, self.key = file, file.name, key
        self.offsets, self.sizes, self.masks = offsets, sizes, masks
        self._identity = identity
        #: the file when the kernel reads it (advice, a descriptor to check); None: a store
        self.local: LocalBytes | None = file if isinstance(file, LocalBytes) else None
        self._end = int((offsets + sizes).max()) if offsets.size else 0
        # "checked in this process" and the read buffers belong to one process: see process.py
        self._checked: PerProcess[bool] = PerProcess()
        self._local: PerProcess[threading.local] = PerProcess(threading.local)

    @classmethod
    def build(
        cls, dset: h5py.Dataset, path: str | ByteSource, index: ChunkIndex | None = None
    ) -> ChunkTable | None:
        """The table of ``dset``; None when a chunk splits rows or is not written.

        Args:
            dset: The dataset.
            path: Its file (read with ``preadv``), or the ``ByteSource`` of its bytes (an
                object in a store).
            index: The chunk index the layout check walked (``Layout.chunks``); walked here
                when None.

        Raises:
            FileChangedError: a chunk's bytes would lie past the end of the file.
        """
        name = path if isinstance(path, str) else path.name
        if index is None:
            index = read_chunk_index(dset, f"dataset {dset.name!r} of {name!r}")
        blocks = index.row_blocks(tuple(dset.shape), tuple(dset.chunks))
        if blocks is None:
            return None  # rows split across chunks, or unwritten chunks: leave them to HDF5
        offsets, sizes, masks = blocks.offsets, blocks.sizes, blocks.masks
        if isinstance(path, str):
            identity: SourceIdentity | None = FileIdentity.of_path(path)
            file: ByteSource = LocalFile(path)
        else:
            file, identity = path, path.identity
        table = cls(file, dset.name, offsets, sizes, masks, identity)
        table._check_size(file.size() if identity is None else identity.size)
        return table

    def read(self, block: int) -> tuple[np.ndarray[Any, Any], int]:
        """Raw bytes of chunk ``block`` (a view of a per-thread buffer) and its filter mask.

        The view is valid until this thread's next ``read``.

        Raises:
            FileChangedError: the file is shorter than the table says (it changed).
        """
        size = int(self.sizes[block])
        local = self._local.get()
        buf: np.ndarray[Any, Any] | None = getattr(local, "buf", None)
        if buf is None or buf.size < size:
            buf = np.empty(max(size, 1), dtype=np.uint8)
            local.buf = buf
        view = buf[:size]
        self._read([(int(self.offsets[block]), size)], [view], [block])
        return view, int(self.masks[block])

    def read_many(
        self, blocks: Sequence[int], buffers: Sequence[np.ndarray[Any, Any]]
    ) -> list[int]:
        """Read the raw bytes of chunks ``blocks`` into ``buffers`` at once; their filter masks.

        ``buffers[k]`` must be a C-contiguous array of exactly ``sizes[blocks[k]]`` bytes. All
        ranges go to the file's ``ByteSource`` in one call (neighbouring chunks: one read).

        Raises:
            FileChangedError: the file is shorter than the table says (it changed).
        """
        self._read([(int(self.offsets[b]), int(self.sizes[b])) for b in blocks], buffers, blocks)
        return [int(self.masks[b]) for b in blocks]

    def read_span(self, start: int, stop: int, blocks: Sequence[int]) -> np.ndarray[Any, Any]:
        """Bytes ``[start, stop)`` of the file: a run of chunks ``blocks`` and what lies between.

        One read for many small chunks stored side by side (``TableChunks.fill_run``); the
        range must lie within the chunks of the table (it is checked against the file as
        ``read`` is).

        Raises:
            ValueError: the range is not within the table's chunks.
            FileChangedError: the file is shorter than the table says (it changed).
        """
        if not 0 <= start <= stop <= self._end:
            raise ValueError(f"bytes [{start}, {stop}) are outside the chunks of {self.key!r}")
        out = np.empty(stop - start, dtype=np.uint8)
        self._read([(start, stop - start)], [out], blocks)
        return out

    def advise(self, blocks: Sequence[int]) -> None:
        """Have the kernel read chunks ``blocks`` of a local file ahead (no wait).

        Neighbouring chunks are asked for as one span (``LocalFile.advise``). A file in a
        store: nothing (its reads are batched requests already).
        """
        ids = np.asarray(blocks, dtype=np.int64)
        if ids.size and self.local is not None:
            starts = self.offsets[ids]
            self.local.advise(starts, starts + self.sizes[ids])

    def _read(
        self,
        ranges: list[tuple[int, int]],
        buffers: Sequence[np.ndarray[Any, Any]],
        blocks: Sequence[int],
    ) -> None:
        if self._checked.peek() is None:  # (not get_or_make: opening the file takes that lock)
            self._checked.set(self._check_file())
        try:
            self.file.read_ranges(ranges, buffers)
        except FileChangedError as exc:
            if self.local is None:
                raise  # a store's own error: it names the URL and what changed
            raise FileChangedError(
                f"{self.path!r}, dataset {self.key!r}: chunks {list(blocks)[:8]} should lie at "
                f"bytes {ranges[:8]}, but the file ends before that; the file changed since it "
                f"was opened ({exc})",
                self.path,
            ) from exc

    def _check_file(self) -> bool:
        if self.local is None or not isinstance(self._identity, FileIdentity):
            self._check_size(self.file.size())  # a store: each request checks the version
            return True
        current = identity_of_fd(self.local.descriptor())
        if not self._identity.same_file(current):
            raise FileChangedError(
                f"{self.path!r} is no longer the file whose chunk table was read for dataset "
                f"{self.key!r} (it was replaced); open the dataset again",
                self.path,
            )
        self._check_size(current.size)
        return True

    def _check_size(self, file_size: int) -> None:
        if self._end > file_size:
            block = int(np.argmax(self.offsets + self.sizes))
            raise FileChangedError(
                f"{self.path!r}, dataset {self.key!r}: chunk {block} lies at bytes "
                f"[{int(self.offsets[block])}, {self._end}) but the file has {file_size} bytes "
                "(truncated or corrupt file)",
                self.path,
            )

    def close(self) -> None:
        """Close this process's descriptor (the next read reopens and checks it)."""
        self._checked.pop()
        self.file.close()
