"""HDF5 datasets, samplers and loaders for PyTorch.

Every public name is importable from here and from its own module (for example
``nn_handler.dataloaders.h5_dataloader.H5LazyDataset``).
"""

from ._threads import decode_threads, set_decode_threads
from .chunk_sampler import ChunkShuffleSampler
from .h5_dataloader import H5LazyDataset, h5_worker_init_fn
from .loader import EpochBatchSampler, batched_loader
from .prefetch import DevicePrefetcher
from .samplers import (
    DistributedEpochSampler,
    EpochShuffleSampler,
    _balanced_contiguous_shard,
    _interleaved_indices,
    epoch_permutation,
)

__all__ = [
    "ChunkShuffleSampler",
    "DevicePrefetcher",
    "DistributedEpochSampler",
    "EpochBatchSampler",
    "EpochShuffleSampler",
    "H5LazyDataset",
    "_balanced_contiguous_shard",
    "_interleaved_indices",
    "batched_loader",
    "decode_threads",
    "epoch_permutation",
    "h5_worker_init_fn",
    "set_decode_threads",
]
