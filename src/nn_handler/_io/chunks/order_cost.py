"""Say once, early, when a random order makes a chunked dataset decode a chunk per sample.

A chunked dataset too big for the decoded budget (``decoded.py``) is served from a window of
decoded chunks. A sampler that walks it chunk by chunk (``ChunkShuffleSampler``) decodes each
chunk once per epoch; a fully random order (``shuffle=True``) decodes a whole chunk for almost
every sample, a small fraction of the rows per second its chunks decode at.
Nothing fails, so nothing would tell the user. ``RandomOrderCost`` watches the reads: the first
batch of at least ``_MIN_ROWS`` rows that decodes ``_RANDOM`` times the blocks a chunk order
would (``rows / block_rows``, and a block at each end; blocks the window held or decoded ahead
cost nothing) logs one warning naming the cost and the fixes. ``watch_order`` says which datasets
are watched: those read through a window too small for them.
The flag lives in memory shared with forked workers, so the warning is said once per dataset,
not once per worker.
"""

from __future__ import annotations

import logging
import os
import shlex

import numpy as np

from ..._validate import format_bytes
from ..file.source import H5Source
from ..storage.byte_source import shared_memory
from .block_fillers import Geometry
from .decoded import decoded_budget

__all__ = [
    "RANDOM_ACCESS_CHUNK_BYTES",
    "RandomOrderCost",
    "random_order_advice",
    "rewrite_command",
    "watch_order",
]

#: chunks this small make a random row decode little beyond itself (what a rewrite writes)
RANDOM_ACCESS_CHUNK_BYTES = 64 * 1024
_MIN_ROWS = 32  # a batch this large says something about the order
_RANDOM = 2.0  # blocks a batch needs, over what a chunk order needs, that make it random
_log = logging.getLogger("nn_handler.dataloaders")


class RandomOrderCost:
    """Watches a dataset's reads for a random order over chunks (see the module docstring).

    Args:
        geometry: The dataset's blocks (a block: the chunks that hold ``block_rows`` rows).
        budget: The decoded budget it exceeds, in bytes; None for a URL (never decoded whole,
            whatever the budget: a pass would fetch the whole object).
    """

    def __init__(self, geometry: Geometry, budget: int | None) -> None:
        self.geometry = geometry
        self.budget = budget
        self._said = np.frombuffer(shared_memory(1), np.uint8)  # shared with forked workers

    def note(self, rows: int, blocks: int) -> None:
        """A read of ``rows`` rows that decoded ``blocks`` blocks."""
        chunk_order = rows / self.geometry.block_rows + 2
        if rows < _MIN_ROWS or blocks <= _RANDOM * chunk_order or self._said[0]:
            return
        self._said[0] = 1
        _log.warning("nn_handler: %s", self.message(blocks / rows))

    def advice(self) -> str:
        """What a random order costs this dataset, and the fixes (``random_order_advice``)."""
        g = self.geometry
        decoded = g.count * g.block_nbytes
        return random_order_advice(g.path, decoded, self.budget, g.block_rows, g.row_nbytes)

    def message(self, per_row: float) -> str:
        """The warning for ``per_row`` chunk decodes per sample."""
        g = self.geometry
        if self.budget is None:
            why, more = "it is read over a URL (never decoded whole)", ""
        else:
            why = (
                f"its decoded size ({format_bytes(g.count * g.block_nbytes)}) exceeds the "
                f"decoded budget ({format_bytes(self.budget)})"
            )
            more = "; or raise the budget (decoded_budget=, NN_HANDLER_DECODED_BUDGET)"
        return (
            f"dataset {g.key!r} of {g.path!r} is read in a random order, and {why}: each sample "
            f"costs a chunk decode ({per_row:.2f} decodes of {g.block_rows} rows per sample). "
            f"{_fixes(g.path, g.row_nbytes)}{more}"
        )

    def __getstate__(self) -> dict[str, object]:
        # the flag is shared with forked processes only: a pickled copy gets its own
        return {"geometry": self.geometry, "budget": self.budget}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._said = np.frombuffer(shared_memory(1), np.uint8)


def watch_order(file: H5Source, geometry: Geometry) -> RandomOrderCost | None:
    """A watch for random orders, for a dataset read through a window too small for it.

    Asked only of a dataset that is not decoded whole and not decoded in moments.
    """
    size = geometry.count * geometry.block_nbytes
    if geometry.block_rows == 1 or size <= file.options.rdcc_nbytes:
        return None  # the window holds every block: each is decoded once
    if file.may_grow or file.swmr_mode:
        return None
    budget = None if file.is_remote else decoded_budget(file.options.decoded_budget_bytes)
    return RandomOrderCost(geometry, budget)


def rewrite_command(path: str, *options: str) -> str:
    """The ``nn-handler rewrite`` command that writes ``path`` again as ``<name>.fast<ext>``."""
    base = path.rstrip("/").rsplit("/", 1)[-1] if "://" in path else path
    root, ext = os.path.splitext(base)
    words = ["nn-handler", "rewrite", path, f"{root}.fast{ext or '.h5'}", *options]
    return " ".join(shlex.quote(w) for w in words)


def random_order_advice(
    path: str,
    decoded: int,
    budget: int | None,
    chunk_rows: int,
    row_nbytes: int,
    filters: str = "",
    window: int = 0,
) -> str:
    """What a random order costs on a chunked, compressed dataset, and what to do about it.

    Args:
        path: The file.
        decoded: The dataset's decoded size in bytes.
        budget: The decoded budget (``decoded.decoded_budget``); None for a URL, which is
            never decoded whole.
        chunk_rows: Rows per chunk.
        row_nbytes: Bytes of one decoded row.
        filters: The dataset's filters, for the words (``"shuffle+gzip(level=4)"``).
        window: The chunk cache (``rdcc_nbytes``): a dataset that fits it keeps every chunk
            decoded after its first read, in any order.
    """
    if budget is not None and decoded <= budget:
        return (
            f"a random order reads from memory: decoded, the dataset ({format_bytes(decoded)}) "
            f"fits the decoded budget ({format_bytes(budget)}), so it is decoded once, in one "
            "pass, into memory the node's workers and ranks share"
        )
    if decoded <= window:
        return (
            f"a random order decodes each chunk once: decoded, the dataset "
            f"({format_bytes(decoded)}) fits the chunk cache (rdcc_nbytes={format_bytes(window)})"
        )
    why = (
        "over a URL (never decoded whole)"
        if budget is None
        else f"decoded, the dataset ({format_bytes(decoded)}) exceeds the decoded budget "
        f"({format_bytes(budget)})"
    )
    return (
        f"{why}: a random order decodes a {chunk_rows}-row chunk per "
        f"sample{f' ({filters})' if filters else ''}. {_fixes(path, row_nbytes)}"
    )


def _fixes(path: str, row_nbytes: int) -> str:
    rows = max(1, RANDOM_ACCESS_CHUNK_BYTES // max(1, row_nbytes))
    size = rows * row_nbytes
    return (
        "Shuffle chunk by chunk (batched_loader(ds, batch_size, sampler=ChunkShuffleSampler(ds)):"
        f" each chunk decoded once per epoch), or rewrite the file into chunks of {rows} "
        f"row{'s' * (rows != 1)} (~{format_bytes(size)}): "
        f"{rewrite_command(path, '--chunk-bytes', str(size))}"
    )
