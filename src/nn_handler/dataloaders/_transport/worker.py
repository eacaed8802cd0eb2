"""Where this code runs: in a DataLoader worker process or not, decided here and nowhere else.

A batch read in a worker process leaves it through shared memory (rings, fresh segments); one
read in the main process or in a worker thread stays in private memory. Every part of the
package that cares asks ``in_worker_process``. How many worker processes share the node's cores
and shared memory is ``_io``'s ``loader_workers`` (the decode pool sizes itself by it, below
torch, finding torch's worker info without importing torch: ``_io/chunks/pool.py``).
"""

from __future__ import annotations

from torch.utils.data import get_worker_info

__all__ = ["in_worker_process"]


def in_worker_process() -> bool:
    """True in a DataLoader worker process (whose batches leave through shared memory)."""
    return get_worker_info() is not None
