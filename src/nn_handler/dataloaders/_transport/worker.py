"""Where this code runs: in a DataLoader worker process or not, decided here and nowhere else.

A batch read in a worker process leaves it through shared memory (rings, fresh segments); one
read in the main process or in a worker thread stays in private memory. Every part of the
package that cares asks ``in_worker_process``; ``loader_workers`` says how many worker processes
share the node's shared memory and cores. (The decode pool, below torch in ``_io``, asks torch's
worker info itself when it sizes, without importing torch: ``_io/chunks/pool.py``.)
"""

from __future__ import annotations

from torch.utils.data import get_worker_info

__all__ = ["in_worker_process", "loader_workers"]


def in_worker_process() -> bool:
    """True in a DataLoader worker process (whose batches leave through shared memory)."""
    return get_worker_info() is not None


def loader_workers() -> int:
    """The DataLoader's worker processes this one shares the cores with (1 outside workers)."""
    info = get_worker_info()
    return info.num_workers if info is not None else 1
