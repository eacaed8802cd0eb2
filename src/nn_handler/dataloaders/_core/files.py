"""FileDataset: a dataset's files, how they are opened and closed, and its output buffers."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self, TypeVar

import numpy as np
import torch
from torch.utils.data import Dataset

from ..._io import FileOptions, H5Source, resolve_file_options, say_once
from .._transport import output_buffer

__all__ = ["FileDataset"]

T_co = TypeVar("T_co", covariant=True)


class FileDataset(Dataset[T_co], ABC):
    """A map-style dataset over HDF5 files opened lazily in each process that reads.

    Subclasses write ``_sources()``; ``is_open``, ``close()`` and ``with dataset:`` follow.
    A source reopens its file in a new process by itself (a DataLoader worker, a spawned
    rank), so nothing here needs pickling hooks.
    """

    @abstractmethod
    def _sources(self) -> Sequence[H5Source]:
        """Every file this dataset reads, in order; the first one's options are the default."""

    @staticmethod
    def _file_options(constructor: Callable[..., Any], arguments: Mapping[str, Any]) -> FileOptions:
        """The ``FileOptions`` of a constructor call: ``file_options=`` or the seeds' keywords.

        Args:
            constructor: The class's own ``__init__`` (its defaults, and its name in errors).
            arguments: The call's ``locals()``, holding ``file_options`` and the keywords.

        Raises:
            TypeError: ``file_options`` is not a ``FileOptions``, or a keyword disagrees with it.
        """
        return resolve_file_options(arguments["file_options"], constructor, arguments)

    @property
    def is_open(self) -> bool:
        """True when this process holds an open file handle."""
        return any(source.is_open for source in self._sources())

    def close(self) -> None:
        """Close this process's file handles (the next read reopens them)."""
        self._close_files()

    def _close_files(self) -> None:
        """Release this process's handles; override to release more (maps, pools) with them."""
        for source in self._sources():
            source.close()

    def _refresh_sources(self) -> bool:
        """Refresh every source (``H5Source.refresh``); True when one may have gained rows.

        Raises:
            FileChangedError: a file was replaced, shrank, or was rewritten.
        """
        grew = False
        for source in self._sources():  # every one: each checks its file
            was_open = source.is_open
            try:
                grew = source.refresh() or grew
            finally:
                if not was_open:  # hold no handle a forked worker would inherit
                    source.close()
        return grew

    def _say_not_followed(self) -> None:
        """Say once that this class keeps serving the rows it indexed when its file grows."""
        name = type(self).__name__
        say_once(
            f"not-followed:{name}",
            f"{name} does not follow files that grow: it keeps serving the rows it indexed "
            "when it was built; build it again to read rows a writer appended since "
            "(H5LazyDataset follows them: docs/h5_lazy_dataset.md)",
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _output_buffer(shape: tuple[int, ...], dtype: np.dtype[Any]) -> torch.Tensor | None:
        """An uninitialised tensor for a batch to be read into, that leaves a worker uncopied.

        In a DataLoader worker process: the transport's ``output_buffer`` (a free slot of the
        worker's batch ring, else a fresh tensor in shared memory). Outside worker processes
        (the main process, worker threads): None; the caller reads into private memory.

        Raises:
            MemoryError: in a worker process, ``/dev/shm`` has no room for the batch.
        """
        return output_buffer(shape, dtype)
