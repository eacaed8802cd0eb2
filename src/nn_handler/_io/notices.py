"""What the library tells the user once: logged, never a Python warning.

A node cache that cannot be used, a damaged piece, an object with no validator, a decoded copy
that cannot be shared or a stalled filler is not an error (the bytes are right all the same),
and a warning from every read or every DataLoader worker would drown the log. Each notice is
logged on this module's logger (under ``nn_handler``) the first time its key is seen in the
process, at WARNING level unless said otherwise (what a platform lacks by nature is DEBUG:
``platform.off``); a forked worker inherits what its parent has already said. A notice that
must be said once for the whole job instead goes through ``notice_board.say_once_for_job``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["say_once"]

_log = logging.getLogger(__name__)
_said: set[str] = set()


def say_once(
    key: str,
    message: str,
    level: int = logging.WARNING,
    *,
    first: Callable[[], bool] | None = None,
) -> bool:
    """Log ``message`` at ``level`` unless a notice with ``key`` was logged before.

    ``first``: asked once, the first time ``key`` comes up here; False keeps the notice unsaid
    (another process of the job said it: ``notice_board.say_once_for_job``). Returns True when
    logged.
    """
    if key in _said:  # (no lock: one held by another thread at a fork would stay held)
        return False
    _said.add(key)
    if first is not None and not first():
        return False
    _log.log(level, "nn_handler: %s", message)
    return True
