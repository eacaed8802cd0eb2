"""WindowPlan: how a sampler walks a dataset's rows, decided once by the loader.

A chunk-aware sampler reads rows in *windows* of ``blocks`` row blocks. ``batched_loader`` (or
``fit_chunk_cache``) turns what the sampler says into one ``WindowPlan`` and hands it to the
dataset once; the dataset hands it to each of its readers (``ChunkedDataset.plan_window``):

* each reader keeps about two windows of decoded chunks (``RowReader.plan_window``), so the
  next window decodes beside the one being served, instead of filling its whole budget;
* with ``fit_cache``, the chunk-cache budget per key grows (never shrinks) until a window and
  the blocks at its two borders stay decoded (``cache_blocks``). The file is never closed for
  it: decoded-chunk caches take the new budget at their next read, HDF5's own chunk cache when
  the file is next opened in a process (every DataLoader worker opens its own).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..._validate import check_positive_int

if TYPE_CHECKING:  # the plan itself is plain data: building one imports no h5py
    from ..file.source import H5Source

__all__ = ["WindowPlan", "block_rows_or_own", "grow_cache"]

BORDER_BLOCKS = 2  # a window's rows reach into the blocks at both of its ends


@dataclass(frozen=True)
class WindowPlan:
    """A sampler's shuffle window, as the readers below the dataset need it.

    Attributes:
        block_rows: Rows of one block the sampler shuffles, or None for the dataset's own
            blocks (its chunks, or the varying blocks of sparse rows).
        blocks: Blocks in one window (the sampler's ``window_chunks``).
        fit_cache: Grow the chunk cache so a window and its two border blocks stay decoded.

    Raises:
        TypeError / ValueError: ``block_rows`` or ``blocks`` is not a positive int.
    """

    block_rows: int | None
    blocks: int
    fit_cache: bool = True

    def __post_init__(self) -> None:
        if self.block_rows is not None:
            check_positive_int("block_rows", self.block_rows)
        check_positive_int("blocks", self.blocks)

    @property
    def cache_blocks(self) -> int:
        """Blocks the chunk cache must hold for one window: the window and its two borders."""
        return self.blocks + BORDER_BLOCKS

    def rows(self, own_rows: int | None) -> int:
        """Rows of one block: the plan's, else ``own_rows`` (a dataset's chunk rows), else 1."""
        return block_rows_or_own(self.block_rows, own_rows)


def block_rows_or_own(block_rows: int | None, own_rows: int | None) -> int:
    """``block_rows``, else ``own_rows`` (a dataset's chunk rows), else 1."""
    if block_rows is not None:
        return block_rows
    return own_rows if own_rows is not None else 1


def grow_cache(sources: Iterable[H5Source], nbytes: int) -> None:
    """Raise the chunk-cache budget of each source to ``nbytes`` when it is smaller.

    Open handles stay open (see the module docstring).
    """
    for source in sources:
        if source.options.rdcc_nbytes < nbytes:
            source.set_cache_nbytes(nbytes)
