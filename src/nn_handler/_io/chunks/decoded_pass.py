"""The decoded pass: when a dataset's reads go through its whole decoded copy (``decoded.py``).

A local dataset whose decoded blocks fit the decoded budget is decoded whole: from its first
read that needs more than one block (or its ``_PASS_AFTER``-th block read one at a time; a peek
at a row is not worth a copy), every read decodes into memory the node shares the blocks it
needs that no process has decoded yet, waits for those another process decodes, and gathers
from the copy; once every block is decoded, a read is one gather and nothing else. Not for a
URL (a pass would fetch the whole object before the first batch; the node's ``cache_dir`` keeps
remote chunks instead), a file that may grow, or a dataset that decodes in moments.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..file.source import H5Source
from .block_fillers import Geometry
from .decoded import DecodedBlocks, Fill, plan_decoded, source_facts

__all__ = ["DecodedPass", "decodes_in_moments"]

# below this, a dataset decodes in moments: each worker keeps its own window rather than hold a
# region per dataset (many small files would use up the process's maps)
_DECODED_MIN_BYTES = 1024**2
_PASS_AFTER = 32  # single blocks a process reads through its window before the whole pass


def decodes_in_moments(geometry: Geometry) -> bool:
    """True for a dataset too small to be worth a decoded copy (or a warning about its order)."""
    return geometry.count * geometry.block_nbytes < _DECODED_MIN_BYTES


class DecodedPass:
    """A dataset's whole decoded copy, and when its reads go through it.

    Args:
        file: The file the dataset is in.
        geometry: The dataset's blocks.
        fill_ids: Decodes blocks into the copy (``BlockFills.fill_ids``).
    """

    def __init__(self, file: H5Source, geometry: Geometry, fill_ids: Fill) -> None:
        self.geometry = geometry
        self._fill_ids = fill_ids
        #: the copy; None where the dataset is not decoded whole (or there was no memory for it)
        self.blocks = _plan(file, geometry)
        self._seen = 0  # blocks this process asked of its window before the whole pass

    def ready(self) -> np.ndarray[Any, Any] | None:
        """The whole decoded copy, once this process knows it complete; else None."""
        return self.blocks.ready() if self.blocks is not None else None

    def in_use(self) -> bool:
        """True when reads go (or will soon go) through the whole decoded copy."""
        return self.blocks is not None and self.blocks.usable

    def whole(self, ids: np.ndarray[Any, Any] | None) -> np.ndarray[Any, Any] | None:
        """Every block, once this process reads through the decoded copy; else None.

        Blocks ``ids`` are decoded in the copy first (by this process or another).

        ``ids``: the blocks (sorted, unique) the read at hand needs; they count towards
        ``_PASS_AFTER``. None: it must not begin the copy (it reads what is complete only).
        """
        decoded = self.blocks
        if decoded is None or not decoded.usable:
            return None
        ready = decoded.ready()
        if ready is not None or ids is None:
            return ready
        self._seen += ids.size
        peek = ids.size == 1 and self._seen < min(_PASS_AFTER, self.geometry.count)
        if peek and not decoded.begun():
            return None  # one row now and then: not worth a copy of the whole (yet)
        blocks = decoded.serve(ids, self._fill_ids)
        if blocks is None:
            self.blocks = None  # no memory for it (said once): the window serves
        return blocks


def _plan(file: H5Source, geometry: Geometry) -> DecodedBlocks | None:
    """The whole decoded copy, for a local dataset that fits the budget and does not grow."""
    if file.may_grow or file.swmr_mode or file.is_remote or decodes_in_moments(geometry):
        return None
    identity, facts = file.identity, None
    if identity is not None:
        filters = [list(f) for f in geometry.filters]
        facts = source_facts(identity.as_record(), file.path, geometry.key, filters)
    where = f"dataset {geometry.key!r} of {file.path!r}"
    return plan_decoded(geometry, facts, file.options.decoded_budget_bytes, where)
