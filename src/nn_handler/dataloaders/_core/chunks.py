"""ChunkedDataset: rows read in chunks, through caches of decoded chunks sized per window."""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from ..._io import WindowPlan, block_rows_or_own, grow_cache, is_scalar_index
from .files import FileDataset

__all__ = ["ChunkParts", "ChunkedDataset"]

T_co = TypeVar("T_co", covariant=True)
R = TypeVar("R")


class ChunkParts(Protocol):
    """What a chunked dataset reads its rows through (a ``RowReader``, sparse rows, …).

    ``block_rows`` is an int, or None for the part's own blocks where it has them (sparse rows
    whose blocks vary): ``ChunkedDataset._block_rows`` decides which a dataset passes.
    """

    def clear_cache(self) -> None: ...

    def plan_window(self, block_rows: Any, blocks: int) -> None: ...

    def window_cache_nbytes(self, block_rows: Any, blocks: int) -> int: ...


class ChunkedDataset(FileDataset[T_co]):
    """A dataset whose rows are read in chunks, with a chunk cache and windows (``ChunkAware``).

    Subclasses write ``chunk_rows``, ``__len__``, ``_chunk_parts()``, ``_sample(index)`` (one
    sample) and ``_batch(indices)`` (a stacked batch); ``dataset[i]`` and
    ``dataset[indices]`` dispatch to them. Each hook checks its indices itself (its error
    messages are its own).
    """

    #: ``dataset[list_of_indices]`` returns a stacked batch (see ``batched_loader``).
    supports_batch_indexing = True

    @property
    @abstractmethod
    def chunk_rows(self) -> int | None:
        """Rows per chunk along axis 0 (None: not chunked, or rows per chunk vary)."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def _chunk_parts(self) -> Sequence[ChunkParts]:
        """What rows are read through: windows, caches and plans are theirs."""

    @abstractmethod
    def _sample(self, index: Any) -> Any:
        """Sample ``index`` (a scalar index as given)."""

    @abstractmethod
    def _batch(self, indices: Any) -> Any:
        """The stacked batch of ``indices`` (a sequence, array or slice as given)."""

    def __getitem__(self, index: Any) -> Any:
        """Return sample ``index``, or a stacked batch for a sequence / array / slice of them.

        An index past the end first refreshes the dataset (a worker whose copy predates rows
        a writer appended learns of them from the index it is asked for).
        """
        return self._past_the_end_refreshes(self._item, index)

    def _item(self, index: Any) -> Any:
        return self._sample(index) if is_scalar_index(index) else self._batch(index)

    def _past_the_end_refreshes(self, read: Callable[[Any], R], index: Any) -> R:
        """``read(index)``; when an index is past the end, refresh, and read again if it grew."""
        try:
            return read(index)
        except IndexError:
            if not self._caught_up():
                raise
        return read(index)

    def refresh(self) -> int:
        """Look at the files again and return the length: rows a SWMR writer appended count.

        Costs one ``stat`` per file that no SWMR writer holds and that has not changed. Loaders
        and samplers of this library call it at the start of each epoch; a DataLoader worker
        calls it itself when asked for a row past the end of its copy.

        Raises:
            FileChangedError: a file was replaced, shrank, or was rewritten without SWMR.
        """
        was_open = self.is_open
        try:
            if self._refresh_sources():
                self._follow_growth()
        finally:
            if not was_open:  # hold no handle a forked worker would inherit, as after __init__
                for source in self._sources():
                    source.close()
        return len(self)

    def _follow_growth(self) -> None:
        """Read the lengths again after the sources were refreshed (override to follow).

        By default the dataset keeps the rows it indexed and says so once.
        """
        self._say_not_followed()

    def _caught_up(self) -> bool:
        """Refresh after an index error; True when the dataset gained rows (worth a retry)."""
        before = len(self)
        return self.refresh() > before

    def _block_rows(self, block_rows: int | None) -> int | None:
        """Rows of a block the parts are given: ``block_rows``, else ``chunk_rows``, else 1.

        Override to pass None on (parts that know their own blocks).
        """
        return block_rows_or_own(block_rows, self.chunk_rows)

    @property
    def chunk_cache_nbytes(self) -> int:
        """Chunk-cache budget per dataset, in bytes (``rdcc_nbytes``)."""
        return self._sources()[0].options.rdcc_nbytes

    def set_chunk_cache(
        self, nbytes: int, nslots: int | None = None, w0: float | None = None
    ) -> None:
        """Resize the chunk caches of every file: HDF5's and the decoded-chunk cache.

        Takes effect in this process at once (the files are reopened on the next read) and in
        DataLoader workers started afterwards. (``batched_loader`` grows the cache for a chunk
        sampler's window through ``plan_window`` instead, which keeps the files open.)

        Args:
            nbytes: Bytes per dataset (``rdcc_nbytes``).
            nslots: Hash slots of HDF5's cache (unchanged when None).
            w0: HDF5's preemption policy in ``[0, 1]`` (unchanged when None).

        Raises:
            TypeError / ValueError: a value is not valid for ``rdcc_nbytes`` / ``rdcc_nslots`` /
                ``rdcc_w0``.
        """
        for source in self._sources():
            old = source.options
            new = dataclasses.replace(
                old,
                rdcc_nbytes=nbytes,
                rdcc_nslots=old.rdcc_nslots if nslots is None else nslots,
                rdcc_w0=old.rdcc_w0 if w0 is None else w0,
            )
            source.set_options(new)
        for part in self._chunk_parts():
            part.clear_cache()

    def window_cache_nbytes(self, block_rows: int | None, blocks: int) -> int:
        """Chunk-cache bytes per dataset that keep ``blocks`` row blocks of ``block_rows`` decoded.

        Zero when nothing needs a chunk cache (contiguous or memory-mapped data).
        ``block_rows=None``: the dataset's own blocks (its ``chunk_rows``).
        """
        rows = self._block_rows(block_rows)
        return max(
            (part.window_cache_nbytes(rows, blocks) for part in self._chunk_parts()), default=0
        )

    def plan_window(self, plan: WindowPlan) -> None:
        """Size every part's window of decoded chunks (and, if asked, the chunk cache) for ``plan``.

        ``batched_loader`` calls this once with a chunk sampler's window, so a process keeps
        about two windows of decoded chunks instead of filling the whole ``rdcc_nbytes``
        budget. Files stay open.
        """
        rows = self._block_rows(plan.block_rows)
        parts = self._chunk_parts()
        for part in parts:
            part.plan_window(rows, plan.blocks)
        if plan.fit_cache and parts:
            grow_cache(
                self._sources(), self.window_cache_nbytes(plan.block_rows, plan.cache_blocks)
            )
