"""The sparse suite's stores table: its rows, their mixing and its Markdown.

A store peer (``cases.StorePeer``) converts the ``.h5ad`` into a store of its own first; the
table puts its rows beside ours, each divided by the first store peer's row of the same batch
kind. ``blocks_per_batch`` is the table's shuffle quality (distinct 64-cell blocks of the
``.h5ad`` per batch: a fully random batch of 4,096 out of 200,000 cells touches about 2,290 of
the 3,125 blocks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..cases import Conversion, Kind
from ..harness import median as harness_median

__all__ = ["BLOCK", "Row", "blocks_per_batch", "stores_table"]

BLOCK = 64  # cells per block of the shuffle-quality measure


@dataclass
class Row:
    """One table row: a loader, its batches (``kind``), its rates and its shuffle quality.

    ``base``: a store peer's row, what the rows of its kind are divided by.
    """

    loader: str
    batches: str
    kind: Kind
    rates: list[float] = field(default_factory=list)
    blocks: float | None = None
    base: bool = False


def blocks_per_batch(batches: np.ndarray[Any, Any], block: int = BLOCK) -> float:
    """Mean number of distinct ``block``-cell blocks (``index // block``) per row of ``batches``.

    ``batches`` is ``(n_batches, batch_size)``: the cell indices of full batches. NaN for none.
    """
    if batches.ndim != 2 or batches.shape[0] == 0 or batches.shape[1] == 0:
        return float("nan")
    keys = np.sort(np.asarray(batches, dtype=np.int64) // block, axis=1)
    distinct = 1 + np.count_nonzero(np.diff(keys, axis=1), axis=1)
    return float(distinct.mean())


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def stores_table(
    title: str,
    rows: Sequence[Row],
    *,
    base: str,
    conversions: Sequence[tuple[str, Conversion]] = (),
    skips: Sequence[tuple[str, str]] = (),
    notes: Sequence[str] = (),
) -> str:
    """One Markdown table of every row's median cells/s, its ratio to the base, its mixing.

    ``x {base}`` divides by the median of the first ``base`` row (a store peer's) of the same
    ``kind``: sparse batches against its CSR, dense ones against its dense batches.
    ``conversions``: ``(peer, conversion)`` lines under the table; ``skips``: ``(peer, why)``
    for each store peer that could not run.
    """
    median = {id(r): harness_median(r.rates) for r in rows}
    theirs: dict[str, float] = {}
    for r in rows:
        if r.base and median[id(r)] > 0:  # NaN and 0 are no base
            theirs.setdefault(r.kind, median[id(r)])
    lines = [
        title,
        "",
        f"| loader | batches | cells/s (median) | runs | x {base} | {BLOCK}-cell blocks/batch |",
        "|---|---|---:|---|---:|---:|",
    ]
    for r in rows:
        rate = median[id(r)]
        ratio = f"{rate / theirs[r.kind]:.2f}" if r.kind in theirs and r.rates else "-"
        runs = ", ".join(f"{x:,.0f}" for x in r.rates) or "-"
        blocks = "-" if r.blocks is None or np.isnan(r.blocks) else f"{r.blocks:,.0f}"
        shown = "-" if np.isnan(rate) else f"{rate:,.0f}"
        lines.append(f"| {r.loader} | {r.batches} | {shown} | {runs} | {ratio} | {blocks} |")
    lines.append("")
    for name, c in conversions:
        lines.append(
            f"- {name}'s conversion first: {c.seconds:.1f} s, peak RSS "
            f"{_gb(c.peak_rss_bytes)}, a second copy of {_gb(c.store_bytes)}."
        )
    lines.extend(f"- {name}: skipped ({why})." for name, why in skips)
    lines.extend(f"- {note}" for note in notes)
    return "\n".join(lines)
