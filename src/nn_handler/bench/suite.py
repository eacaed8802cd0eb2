"""The synthetic suite (``nn-handler bench --synthetic``): our loaders on every layout.

``run_suite(...)`` writes synthetic 3×32×32 float32 images to a temporary directory in each
layout (contiguous; chunked; chunked + gzip; chunked + gzip + shuffle; blosc / zstd when
``hdf5plugin`` is installed), times every contender in ``contenders.CONTENDERS`` on each file in
one process, and prints one Markdown table per layout with the ratios to the baseline, then the
shuffle-quality table. ``layout_tables`` runs any list of contenders the same way: the
repository's ``benchmarks/`` adds the peers and the machine's limits through it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from torch.utils.data import Sampler

from ..dataloaders import ChunkShuffleSampler, EpochShuffleSampler
from .contenders import CONTENDERS, H5PY_LOAD, LIMIT, NAIVE, PRELOAD, Case, Contender
from .data import make_images, suite_layouts, write_layout_file
from .quality import shuffle_quality
from .timing import Result, check_names, format_table, machine_line

__all__ = ["Table", "layout_tables", "quality_table", "run_suite"]

SEQUENTIAL_H5PY = "sequential h5py, 1 process"
_COMPRESSED_HINTS = ("gzip", "blosc", "zstd", "lz4")


@dataclass
class Table:
    """One layout's results."""

    layout: str
    rows: list[Result]

    def rate(self, prefix: str) -> float | None:
        """Rate of the first row whose name starts with ``prefix`` (None when absent)."""
        found = [r.rate for r in self.rows if r.name.startswith(prefix)]
        return found[0] if found else None

    def ratios(self) -> dict[str, tuple[str, str]]:
        """``{label: (row, reference row)}``: every row against the baseline and the limit."""
        limit = next((r.name for r in self.rows if r.name.startswith(LIMIT)), None)
        pairs: dict[str, tuple[str, str]] = {}
        for r in self.rows:
            if r.name != NAIVE and not r.name.startswith(LIMIT):
                pairs[f"{r.name} / naive"] = (r.name, NAIVE)
                if limit is not None:
                    pairs[f"{r.name} / limit"] = (r.name, limit)
        reads = [r.name for r in self.rows if r.name.startswith("sequential read_range")]
        if reads:
            pairs["read_range / sequential h5py"] = (reads[0], SEQUENTIAL_H5PY)
        pairs["rank-cache preload / h5py load"] = (PRELOAD, H5PY_LOAD)
        return pairs


def run_suite(
    n: int = 50_000,
    seconds: float = 10.0,
    layouts: Sequence[str] | None = None,
    batch_size: int = 256,
    chunk_rows: int = 64,
    workdir: str | None = None,
    out: Callable[[str], None] = print,
    contenders: Sequence[Contender] = CONTENDERS,
) -> list[Table]:
    """Run the suite of our loaders and print its tables; return them.

    Args:
        n: Samples per layout.
        seconds: Time budget per random-order contender.
        layouts: Layout names (default: all of ``suite_layouts()``).
        batch_size: Samples per batch.
        chunk_rows: Rows per chunk of the chunked layouts.
        workdir: Directory for the files (default: a temporary one, removed afterwards).
        out: Where text goes.
        contenders: What is timed on each layout, in row order (default: our loaders and the
            naive baseline).

    Raises:
        ValueError: an unknown layout name (the message lists the known ones).
    """
    tables = layout_tables(
        contenders, n, seconds, layouts, batch_size, chunk_rows, workdir=workdir, out=out
    )
    out(quality_table(n, chunk_rows, batch_size))
    return tables


def layout_tables(
    contenders: Sequence[Contender],
    n: int,
    seconds: float,
    layouts: Sequence[str] | None,
    batch_size: int,
    chunk_rows: int,
    *,
    workdir: str | None = None,
    out: Callable[[str], None] = print,
) -> list[Table]:
    """Time ``contenders`` (in this order) on each layout's file; print a table per layout.

    Arguments as ``run_suite``'s; prints the suite's header first.

    Raises:
        ValueError: an unknown layout name (the message lists the known ones).
    """
    known = suite_layouts()
    chosen = list(known) if layouts is None else list(layouts)
    check_names("layouts", chosen, known)
    out(f"# nn_handler benchmark suite\n\n{machine_line()}\n")
    out(
        f"N={n} samples of 3x32x32 float32, batch {batch_size}, chunks of {chunk_rows} rows, "
        f"one process (num_workers=0), budget {seconds:g}s per random-order contender"
    )
    images, labels = make_images(n)
    tables = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for name in chosen:
            path = os.path.join(tmp, f"{name}.h5")
            write_layout_file(path, images, labels, known[name], chunk_rows)
            os.sync()  # let the kernel finish writing back before anything is timed
            compressed = any(hint in name for hint in _COMPRESSED_HINTS)
            rows = chunk_rows if "chunked" in name else None
            case = Case(path, name, images, labels, batch_size, seconds, compressed, rows)
            table = Table(name, [r for fn in contenders for r in fn(case)])
            out(format_table(name, table.rows, table.ratios()))
            tables.append(table)
            os.remove(path)
    return tables


def quality_table(n: int, block: int, batch_size: int, cache_blocks: int = 325) -> str:
    """Shuffle quality of a full shuffle against ``ChunkShuffleSampler`` windows."""
    lines = [
        f"\n## Shuffle quality (n={n}, blocks of {block}, batch {batch_size}, "
        f"LRU of {cache_blocks} chunks)\n",
        "| order | mean displacement / n | neighbour correlation | file neighbours in one "
        "batch | chunks per batch | decodes per chunk |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    samplers: dict[str, Sampler[int]] = {
        "full shuffle (EpochShuffleSampler)": EpochShuffleSampler(n)
    }
    for window in (8, 32, 64):
        samplers[f"ChunkShuffleSampler, window_chunks={window}"] = ChunkShuffleSampler(
            n, block_size=block, window_chunks=window
        )
    for label, sampler in samplers.items():
        q = shuffle_quality(np.fromiter(sampler, np.int64), block, batch_size, cache_blocks)
        lines.append(
            f"| {label} | {q.displacement:.3f} | {q.neighbour_correlation:.3f} | "
            f"{q.file_neighbours_together:.3f} | {q.blocks_per_batch:.1f} | "
            f"{q.decodes_per_block:.2f} |"
        )
    return "\n".join(lines)
