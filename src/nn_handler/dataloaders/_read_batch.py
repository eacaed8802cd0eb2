"""Batches read straight into shared memory inside DataLoader worker processes.

A tensor that leaves a worker process is moved into shared memory by torch when it is pickled:
a fresh segment, and a copy of the whole batch into it. ``read_batch`` reads (or casts) the
rows straight into the transport's ``output_buffer`` (a slot of the worker's batch ring, or a
fresh shared-memory tensor when no slot is free), so the batch crosses the process boundary
without that copy: only the slot's number travels. Outside worker processes (the main process,
or worker threads) it is a plain read into private memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._io.indices import as_index_array
from .._io.rows.fields import Reader
from ._tensors.tensors import to_tensor
from ._transport import in_worker_process, output_buffer

__all__ = ["read_batch"]


def read_batch(reader: Reader, indices: Any, dtype: np.dtype[Any] | None) -> torch.Tensor:
    """Rows ``indices`` of ``reader`` as one tensor (cast to ``dtype``).

    In a DataLoader worker process the tensor is allocated in shared memory.

    Raises:
        MemoryError: in a worker process, ``/dev/shm`` has no room for the batch.
    """
    final = reader.dtype if dtype is None else dtype
    if not in_worker_process() or not final.isnative or final.kind not in "biuf":
        return to_tensor(reader.read(indices), dtype)
    idx = as_index_array(indices, reader.length)
    batch = output_buffer((idx.size, *reader.row_shape), final)
    out = batch.numpy()
    if final == reader.dtype:
        reader.read(idx, out=out)
    else:
        np.copyto(out, reader.read(idx), casting="unsafe")
    return batch
