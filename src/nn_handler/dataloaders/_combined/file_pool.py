"""FilePool: many HDF5 files, at most ``max_open`` of them open at once in each process.

Each file has one ``H5Source`` and, once read, one ``RowReader`` per field. Open files form an
LRU: touching a file beyond the cap closes the least recently used one and drops its readers,
which releases both its h5py handle and the memory maps of its memmap-strategy readers (each
map holds a file descriptor of its own). A process therefore holds at most
``max_open * (1 + fields)`` descriptors for the pool. The LRU is per process: a forked child
drops what it inherited, a pickled pool arrives with nothing open.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..._io import FileOptions, H5Source, IndexArray, PerProcess, Reader, check_paths, open_reader
from ..._validate import check_count
from .fields import FileSchema

__all__ = ["FileColumns", "FilePool"]

# file number -> {field: reader}, least recently used first
_OpenFiles = OrderedDict[int, dict[str, Reader]]


class FilePool:
    """Lazily opened files with a cap on how many stay open per process.

    Args:
        paths: One path or a sequence of distinct paths (file number = position).
        options: How to open each file.
        keys: ``{field: dataset path}`` used to build readers.
        max_open: Most files open at once in one process.
    """

    def __init__(
        self,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        options: FileOptions,
        keys: Mapping[str, str],
        max_open: int,
    ) -> None:
        self.max_open = check_count("max_open_files", max_open, minimum=1)
        self.sources = [H5Source(path, options) for path in check_paths(paths)]
        self.keys = dict(keys)
        self._local: PerProcess[_OpenFiles] = PerProcess()

    @property
    def open_files(self) -> list[int]:
        """File numbers open in this process, least recently used first."""
        return list(self._open())

    def source(self, file_no: int) -> H5Source:
        """Return file ``file_no``'s source, opened and counted against the cap."""
        self._touch(file_no)
        return self.sources[file_no]

    def reader(self, file_no: int, field: str) -> Reader:
        """Return the reader of ``field`` in file ``file_no`` (opening the file if needed)."""
        return self.readers(file_no, (field,))[0]

    def readers(self, file_no: int, fields: Sequence[str]) -> list[Reader]:
        """Return the readers of ``fields`` in file ``file_no``, touching the file once."""
        readers = self._touch(file_no)
        found = []
        for field in fields:
            reader = readers.get(field)
            if reader is None:
                key, arg = self.keys[field], f"field_names[{field!r}]"
                reader = readers[field] = open_reader(self.sources[file_no], key, arg=arg)
            found.append(reader)
        return found

    def close(self) -> None:
        """Close every file this process has open."""
        opened = self._open()
        while opened:
            self._evict(opened)

    def _touch(self, file_no: int) -> dict[str, Reader]:
        opened = self._open()
        readers = opened.get(file_no)
        if readers is not None:
            opened.move_to_end(file_no)
            return readers
        while len(opened) >= self.max_open:
            self._evict(opened)
        readers = opened[file_no] = {}
        return readers

    def _evict(self, opened: _OpenFiles) -> None:
        file_no, readers = opened.popitem(last=False)
        readers.clear()  # the last references to the readers' memory maps: their fds close
        self.sources[file_no].close()

    def _open(self) -> _OpenFiles:
        if self._local.inherited:
            # handles and maps from the parent: never read through them, release them here
            for file_no in self._local.pop() or ():
                self.sources[file_no].forget_if_inherited()
        return self._local.get_or_make(OrderedDict)

    def __repr__(self) -> str:
        return f"FilePool({len(self.sources)} files, max_open={self.max_open})"


class FileColumns:
    """One file's fields read through the pool (a ``ColumnSource`` for the filters).

    Counts the bytes it reads in ``nbytes``.
    """

    def __init__(self, pool: FilePool, file_no: int, schema: FileSchema) -> None:
        self.pool = pool
        self.file_no = file_no
        self.schema = schema
        self.nbytes = 0

    def read(self, field: str, rows: IndexArray) -> np.ndarray[Any, Any]:
        """Return rows ``rows`` of ``field`` as stored."""
        values = self.pool.reader(self.file_no, field).read(rows)
        self.nbytes += values.nbytes
        return values
