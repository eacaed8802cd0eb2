"""Skip marks for tests that need what only some platforms offer (Linux, mostly).

Each mark asks the library's own fact (``nn_handler._io.platform``, ``node_memory.NAMED``), never
the platform's name: a test skips under a simulated platform (``tests/platforms/``, run by
``.ci/portable``) exactly where the library takes its portable path, and runs wherever the
platform offers what it needs.
"""

from __future__ import annotations

import multiprocessing
import os

import pytest

from nn_handler._io import platform
from nn_handler._io.storage.node_memory import NAMED

__all__ = [
    "ROOT",
    "needs_at_fork",
    "needs_fork",
    "needs_fork_default",
    "needs_forkserver",
    "needs_memfd",
    "needs_named_regions",
    "needs_node_cache",
    "needs_ofd",
    "needs_owners",
    "needs_pipe_room",
]

#: this process runs as root (who ignores file modes); False where there are no POSIX users
ROOT = platform.OWNERS and os.geteuid() == 0

needs_fork = pytest.mark.skipif(not platform.FORK, reason="needs fork (not on Windows)")
needs_memfd = pytest.mark.skipif(
    not platform.MEMFD, reason="needs memory files (Linux): notices are per process elsewhere"
)
needs_at_fork = pytest.mark.skipif(
    not platform.AT_FORK, reason="needs os.register_at_fork (not on Windows)"
)
#: tests of what happens where fork is the default start method (Linux before Python 3.14)
needs_fork_default = pytest.mark.skipif(
    multiprocessing.get_start_method() != "fork", reason="needs fork as the default start method"
)
needs_forkserver = pytest.mark.skipif(
    "forkserver" not in multiprocessing.get_all_start_methods(), reason="needs forkserver"
)
needs_named_regions = pytest.mark.skipif(not NAMED, reason="named regions need Linux")
needs_ofd = pytest.mark.skipif(not platform.OFD, reason="needs OFD locks (Linux)")
needs_owners = pytest.mark.skipif(
    not platform.OWNERS, reason="needs POSIX file owners and dir_fd (not on Windows)"
)
needs_node_cache = pytest.mark.skipif(
    not (platform.FLOCK and platform.OWNERS), reason="a node cache needs flock and file owners"
)
needs_pipe_room = pytest.mark.skipif(
    not platform.PIPE_ROOM, reason="needs F_GETPIPE_SZ and FIONREAD (Linux)"
)
