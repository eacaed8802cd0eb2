"""HDF5 datasets, samplers and loaders for PyTorch.

Every public name is importable from here and from its own module (for example
``nn_handler.dataloaders.h5_dataloader.H5LazyDataset``).
"""

from ._threads import decode_threads, set_decode_threads
from .chunk_sampler import ChunkShuffleSampler
from .combined_h5_dataset import CombinedHDF5Dataset, create_optimized_dataloader
from .h5_dataloader import H5LazyDataset, h5_worker_init_fn
from .h5_sample_dataset import H5SampleDataset, pad_collate
from .h5_sparse_dataset import H5SparseDataset
from .loader import EpochBatchSampler, batched_loader
from .prefetch import DevicePrefetcher
from .rank_cached_h5_dataloader import RankMemCachedH5Dataset
from .samplers import (
    DistributedEpochSampler,
    EpochShuffleSampler,
    _balanced_contiguous_shard,
    _interleaved_indices,
    epoch_permutation,
)

__all__ = [
    "ChunkShuffleSampler",
    "CombinedHDF5Dataset",
    "DevicePrefetcher",
    "DistributedEpochSampler",
    "EpochBatchSampler",
    "EpochShuffleSampler",
    "H5LazyDataset",
    "H5SampleDataset",
    "H5SparseDataset",
    "RankMemCachedH5Dataset",
    "_balanced_contiguous_shard",
    "_interleaved_indices",
    "batched_loader",
    "create_optimized_dataloader",
    "decode_threads",
    "epoch_permutation",
    "h5_worker_init_fn",
    "pad_collate",
    "set_decode_threads",
]
