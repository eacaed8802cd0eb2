"""Rows → samples: tensors, columns of any key, stacked batches.

``split`` is the one way between a stacked batch and its samples, for every dataset.

The layer between ``_io`` (bytes and rows, no torch) and the datasets. Importing it tells the
decode pool how many DataLoader workers share the cores (torch's worker info).
"""

from torch.utils.data import get_worker_info

from ..._io import set_worker_count


def _loader_workers() -> int:
    info = get_worker_info()
    return info.num_workers if info is not None else 1


set_worker_count(_loader_workers)
