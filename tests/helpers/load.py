"""Load beside a test: timing bugs show only on a busy machine."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

BURNERS_ENV = "NN_HANDLER_BURNERS"  # CPU burners beside the property tests that honour it


@contextlib.contextmanager
def cpu_burners(count: int) -> Iterator[None]:
    """``count`` processes spinning on the CPU for as long as the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(30)


def burners_asked() -> int:
    """How many burners ``NN_HANDLER_BURNERS`` asks for (0 when unset).

    Raises:
        ValueError: it is set to something other than a count.
    """
    value = os.environ.get(BURNERS_ENV, "").strip() or "0"
    if not value.isdigit():
        raise ValueError(f"{BURNERS_ENV} must be a count of CPU burners, got {value!r}")
    return int(value)
