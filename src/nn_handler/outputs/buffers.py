"""Rows waiting in one writer process for the rest of their chunk.

A chunk whose rows all arrive here is encoded here, and goes to the part as the bytes the file
will hold; the assembly then only copies it. Rows of chunks that other processes share (torch's
``DistributedSampler`` deals rows out one by one) stay raw, and the assembly encodes their
chunks. Rows held here are bounded: past ``limit`` bytes the oldest chunks go to the part raw.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .layout import OutputLayout

__all__ = ["ChunkBuffers", "Filled", "refuse_differing", "same_rows"]


@dataclass
class Filled:
    """A chunk of one dataset, or the part of it this process holds.

    Attributes:
        output: The dataset (index into the layout's specs).
        chunk: The chunk.
        rows: Its rows (``stop - start`` of them; only ``have`` are set).
        have: Which rows are set.
    """

    output: int
    chunk: int
    rows: np.ndarray
    have: np.ndarray

    @property
    def complete(self) -> bool:
        """True when every row of the chunk is here."""
        return bool(self.have.all())


class ChunkBuffers:
    """The chunks this process has rows of, by ``(output, chunk)``, oldest first."""

    def __init__(self, layout: OutputLayout, limit: int) -> None:
        self.layout = layout
        self.limit = limit
        self.held = 0
        self._open: OrderedDict[tuple[int, int], Filled] = OrderedDict()

    def add(self, output: int, indices: np.ndarray, rows: np.ndarray) -> Iterator[Filled]:
        """Store ``rows`` (for sample ``indices``); yield chunks that are now complete.

        Raises:
            ValueError: a sample already here comes again with other bytes.
        """
        chunk_of = indices // self.layout.chunk_rows
        for chunk in np.unique(chunk_of).tolist():
            pick = np.flatnonzero(chunk_of == chunk)
            filled = self._buffer(output, chunk)
            local = indices[pick] - chunk * self.layout.chunk_rows
            _check_repeats(filled, local, rows[pick], indices[pick])
            filled.rows[local] = rows[pick]
            filled.have[local] = True
            if filled.complete:
                yield self._pop(output, chunk)

    def overflow(self) -> Iterator[Filled]:
        """Yield the oldest incomplete chunks until what is held fits the limit again."""
        while self.held > self.limit and self._open:
            yield self._pop(*next(iter(self._open)))

    def drain(self) -> Iterator[Filled]:
        """Yield (and drop) every chunk still held."""
        while self._open:
            yield self._pop(*next(iter(self._open)))

    def _buffer(self, output: int, chunk: int) -> Filled:
        found = self._open.get((output, chunk))
        if found is None:
            spec = self.layout.specs[output]
            start, stop = self.layout.chunk_span(chunk)
            rows = np.empty((stop - start, *spec.shape), dtype=spec.numpy_dtype)
            found = Filled(output, chunk, rows, np.zeros(stop - start, dtype=bool))
            self._open[(output, chunk)] = found
            self.held += rows.nbytes
        return found

    def _pop(self, output: int, chunk: int) -> Filled:
        filled = self._open.pop((output, chunk))
        self.held -= filled.rows.nbytes
        return filled


def _check_repeats(
    filled: Filled, local: np.ndarray, rows: np.ndarray, samples: np.ndarray
) -> None:
    """Raise when a sample comes twice (here before, or twice in this call) with other bytes."""
    again = filled.have[local]
    if again.any():
        differ = ~same_rows(filled.rows[local[again]], rows[again])
        refuse_differing(samples[again][differ])
    if np.unique(local).size < local.size:  # repeats inside this call: last write must equal all
        order = np.argsort(local, kind="stable")
        ordered_local, ordered = local[order], rows[order]
        repeat = np.flatnonzero(ordered_local[1:] == ordered_local[:-1])
        differ = ~same_rows(ordered[repeat], ordered[repeat + 1])
        refuse_differing(samples[order][repeat][differ])


def same_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row, True when the two rows' bytes are the same (NaNs compare by their bits)."""
    a8 = np.ascontiguousarray(a).view(np.uint8).reshape(len(a), -1)
    b8 = np.ascontiguousarray(b).view(np.uint8).reshape(len(b), -1)
    same: np.ndarray = (a8 == b8).all(axis=1)
    return same


def refuse_differing(samples: np.ndarray) -> None:
    """Raise naming ``samples`` (the first few) when any sample was written twice differently."""
    if samples.size:
        shown = ", ".join(str(i) for i in np.unique(samples)[:5].tolist())
        raise ValueError(
            f"sample(s) {shown} were written twice with different values; a repeated sample "
            "(DistributedSampler's padding) must repeat the same output"
        )
