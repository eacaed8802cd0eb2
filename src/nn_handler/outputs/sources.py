"""Where each chunk of the file comes from: an encoded chunk, raw rows, or both; what is missing.

Built from every record of the parts before anything is written, so a missing row is reported
(how many, the first few) before the file is begun, and a chunk stored encoded twice (a rerun
that recomputed it) is checked to hold the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from .layout import OutputLayout
from .parts import CHUNK, ROWS, Record

__all__ = ["ChunkPlan", "plan_chunks", "stored_rows"]

_SHOWN = 5


@dataclass
class ChunkPlan:
    """The records that make one chunk of one dataset.

    Attributes:
        chunk: The chunk.
        encoded: A record holding the whole chunk encoded, if any.
        raw: Records of raw rows that fall in this chunk.
        repeats: Other encoded records of the same chunk (a rerun that recomputed it).
    """

    chunk: int
    encoded: Record | None = None
    raw: list[Record] = field(default_factory=list)
    repeats: list[Record] = field(default_factory=list)


def plan_chunks(layout: OutputLayout, records: Iterable[Record]) -> list[list[ChunkPlan]]:
    """Per dataset, one plan per chunk, in order.

    Raises:
        ValueError: a record names a dataset or chunk outside the layout, or rows are missing.
    """
    plans = [[ChunkPlan(c) for c in range(layout.n_chunks)] for _ in layout.specs]
    for record in records:
        _place(layout, plans, record)
    for output, spec in enumerate(layout.specs):
        missing = _missing(layout, plans[output])
        if missing.size:
            shown = ", ".join(map(str, missing[:_SHOWN].tolist()))
            raise ValueError(
                f"{missing.size} of {layout.n_rows} rows of {spec.name!r} were never written "
                f"(samples {shown}{', ...' if missing.size > _SHOWN else ''}); write them (the "
                "writers' stored rows are kept: a rerun computes only what is missing)"
            )
    return plans


def stored_rows(layout: OutputLayout, records: Iterable[Record]) -> np.ndarray:
    """Per row, True when every dataset has it in some record."""
    have = np.ones(layout.n_rows, dtype=bool)
    plans = [[ChunkPlan(c) for c in range(layout.n_chunks)] for _ in layout.specs]
    for record in records:
        _place(layout, plans, record)
    for output in range(len(layout.specs)):
        mine = np.zeros(layout.n_rows, dtype=bool)
        mine[_have(layout, plans[output])] = True
        have &= mine
    return have


def _place(layout: OutputLayout, plans: list[list[ChunkPlan]], record: Record) -> None:
    if not 0 <= record.output < len(layout.specs):
        raise ValueError(f"a part names dataset {record.output}, but the layout has {len(plans)}")
    mine = plans[record.output]
    if record.kind == CHUNK:
        if not 0 <= record.chunk < layout.n_chunks:
            raise ValueError(f"a part holds chunk {record.chunk} of {layout.n_chunks}")
        plan = mine[record.chunk]
        if plan.encoded is None:
            plan.encoded = record
        else:
            plan.repeats.append(record)
        return
    assert record.kind == ROWS
    if record.indices.size and not (
        record.indices.min() >= 0 and record.indices.max() < layout.n_rows
    ):
        raise ValueError(f"a part holds rows outside [0, {layout.n_rows})")
    for chunk in np.unique(record.indices // layout.chunk_rows).tolist():
        mine[chunk].raw.append(record)


def _have(layout: OutputLayout, plans: list[ChunkPlan]) -> np.ndarray:
    """Sorted sample indices some record of these plans holds."""
    found = []
    for plan in plans:
        if plan.encoded is not None:
            found.append(np.arange(*layout.chunk_span(plan.chunk)))
        found.extend(r.indices for r in plan.raw)
    return np.unique(np.concatenate(found)) if found else np.empty(0, np.int64)


def _missing(layout: OutputLayout, plans: list[ChunkPlan]) -> np.ndarray:
    have = np.zeros(layout.n_rows, dtype=bool)
    have[_have(layout, plans)] = True
    return np.flatnonzero(~have)
