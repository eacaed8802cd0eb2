"""What the library tells the user once: logged, never a Python warning.

A node cache that cannot be used, a damaged piece, an object with no validator, a decoded copy
that cannot be shared or a stalled filler is not an error (the bytes are right all the same),
and a warning from every read or every DataLoader worker would drown the log. Each notice is
logged at WARNING level on this module's logger (under ``nn_handler``) the first time its key
is seen in the process; a forked worker inherits what its parent has already said. A notice
``job=True`` is said once for the whole job instead: by the first of the processes that share a
notice board (``notice_board.py``: the process that builds the datasets and every DataLoader
worker it starts, forked, spawned or forkserver, epoch after epoch).
"""

from __future__ import annotations

import logging

from . import notice_board

__all__ = ["say_once"]

_log = logging.getLogger(__name__)
_said: set[str] = set()


def say_once(key: str, message: str, *, job: bool = False) -> bool:
    """Log ``message`` unless a notice with ``key`` was logged before; True when logged.

    ``job``: before, in any process of the job (else: in this process).
    """
    if key in _said:  # (no lock: one held by another thread at a fork would stay held)
        return False
    _said.add(key)
    if job and not notice_board.claim(key):
        return False  # another process of the job said it
    _log.warning("nn_handler: %s", message)
    return True
