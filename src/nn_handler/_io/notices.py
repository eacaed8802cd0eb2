"""What the library tells the user once per process: logged, never a Python warning.

A node cache that cannot be used, a damaged piece, an object with no validator, a decoded copy
that cannot be shared or a stalled filler is not an error (the bytes are right all the same),
and a warning from every read or every DataLoader worker would drown the log. Each notice is
logged on this module's logger (under ``nn_handler``) the first time its key is seen in the
process, at WARNING level unless said otherwise (what a platform lacks by nature is DEBUG:
``platform.off``); a forked worker inherits what its parent has already said.
"""

from __future__ import annotations

import logging

__all__ = ["say_once"]

_log = logging.getLogger(__name__)
_said: set[str] = set()


def say_once(key: str, message: str, level: int = logging.WARNING) -> bool:
    """Log ``message`` at ``level`` unless a notice with ``key`` was logged before.

    Returns True when logged.
    """
    if key in _said:  # (no lock: one held by another thread at a fork would stay held)
        return False
    _said.add(key)
    _log.log(level, "nn_handler: %s", message)
    return True
