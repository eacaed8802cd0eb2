"""The transport: how batches get from where they are read to the training loop.

Worker processes hand batches to the main process through batch rings in shared memory
(``ring``), packed by registered tensor layouts (``layouts``: dense, sparse CSR) and rebuilt
while they are unpickled (``receive``); their queues skip the feeder thread
(``worker_queues``), the worker iterator does less per batch (``worker_iter``), the start method
is chosen when workers start (``start_method``); rings and caches are pinned in place
(``pinned``). Worker threads (``threads``) and the read-ahead announcements
(``readahead``) feed a loader without processes. Whether code runs in a worker process is
decided in one place (``worker``).

This module is the interface the rest of the package uses; nothing else imports the modules
inside. A dataset asks for the tensor it writes a batch into with ``output_buffer``.
"""

from .buffers import output_buffer
from .pack import pack_batch
from .pinned import log_once, pin_in_place
from .readahead import ReadaheadSampler
from .ring import RING_SLOTS, set_ring_slots
from .shared_memory import SHM_PATH, shm_space
from .start_method import SafeStartDataLoader
from .threads import ThreadedDataLoader
from .worker import in_worker_process

__all__ = [
    "RING_SLOTS",
    "SHM_PATH",
    "ReadaheadSampler",
    "SafeStartDataLoader",
    "ThreadedDataLoader",
    "in_worker_process",
    "log_once",
    "output_buffer",
    "pack_batch",
    "pin_in_place",
    "set_ring_slots",
    "shm_space",
]
