"""How much of a decoded copy is decoded, shown by the process that made it.

Nothing waits for the whole copy (``decoded.py``), but the first epoch of a big file decodes as
it goes: the process that made the region shows how much of it is decoded, on a terminal, for a
copy of ``PROGRESS_BYTES`` or more (``NN_HANDLER_PROGRESS=0`` turns it off), and logs one line
once every block is: the size, the seconds, and where the copy lives.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from ..._validate import format_bytes
from ..process import process_generation
from .block_fillers import Geometry

__all__ = ["PROGRESS_BYTES", "PROGRESS_ENV", "FillReport", "made_here"]

#: decoded copies this large show their progress (smaller ones decode in moments)
PROGRESS_BYTES = 256 * 1024**2
PROGRESS_ENV = "NN_HANDLER_PROGRESS"
_log = logging.getLogger(__name__)


def made_here(region: Any) -> bool:
    """True in the process that made ``region`` (not one that joined it, nor a forked child)."""
    return bool(region.made) and region.born == process_generation()


class FillReport:
    """The progress of one region's decoding, in the process that made it.

    Args:
        where: The dataset and its file, for the words.
        geometry: Its blocks.
        region: Where the copy lives (its ``where``, for the last line).
    """

    def __init__(self, where: str, geometry: Geometry, region: Any) -> None:
        self.where, self.count = where, geometry.count
        self.block_nbytes, self.nbytes = (
            geometry.block_nbytes,
            geometry.count * geometry.block_nbytes,
        )
        self.place = str(region.where)
        self._began = time.monotonic()
        self._bar: Any = None
        if self.nbytes >= PROGRESS_BYTES and os.environ.get(PROGRESS_ENV, "").strip() != "0":
            from tqdm import tqdm  # (only where a copy is this big: tqdm costs an import)

            self._bar = tqdm(
                total=self.nbytes, desc=f"decoding {where} once", unit="B", unit_scale=True,
                unit_divisor=1024, disable=None, leave=False,  # None: on a terminal only
            )  # fmt: skip
        self._done = False

    def update(self, ready: int) -> None:
        """``ready`` blocks are decoded now (by any process)."""
        if self._done:
            return
        if self._bar is not None:
            self._bar.update(ready * self.block_nbytes - self._bar.n)
        if ready == self.count:
            self._done = True
            if self._bar is not None:
                self._bar.close()
            seconds = time.monotonic() - self._began
            _log.info(
                "nn_handler: %s: decoded whole (%s) in %.1f s, in %s; every read of it is a "
                "gather from memory now",
                self.where, format_bytes(self.nbytes), seconds, self.place,
            )  # fmt: skip
