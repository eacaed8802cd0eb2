"""Shared check for stateful samplers: resume at the start, middle and end of an epoch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def check_resume(make: Callable[[], Any], epoch: int = 1) -> None:
    """A fresh sampler loaded from a state taken after k indices yields exactly the tail.

    ``make()`` builds a new sampler with the same arguments each time.
    """
    reference = make()
    reference.set_epoch(epoch)
    full = list(reference)
    for k in sorted({0, min(1, len(full)), len(full) // 2, max(len(full) - 1, 0), len(full)}):
        first = make()
        first.set_epoch(epoch)
        it = iter(first)
        head = [next(it) for _ in range(k)]
        state = first.state_dict()
        assert state["consumed"] == k
        assert state["epoch"] == epoch
        resumed = make()
        resumed.load_state_dict(dict(state))
        resumed.set_epoch(epoch)  # a training loop calls this before each epoch: keeps the offset
        tail = list(resumed)
        assert head + tail == full, f"resume after {k} of {len(full)}"
        # the pass after the resumed one is a whole epoch, as in an uninterrupted run
        resumed.set_epoch(epoch + 1)
        fresh = make()
        fresh.set_epoch(epoch + 1)
        assert list(resumed) == list(fresh)
