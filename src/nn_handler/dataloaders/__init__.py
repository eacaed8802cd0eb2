"""HDF5 datasets, samplers and loaders for PyTorch.

Every public name is importable from here and from its own module (for example
``nn_handler.dataloaders.h5_dataloader.H5LazyDataset``). Importing this package imports none of
them: each is imported with its module when first asked for (``nn_handler/_lazy.py``), so a
spawned DataLoader worker imports what its dataset needs, not every dataset class and loader.
"""

import typing

from .. import _lazy

if typing.TYPE_CHECKING:  # (read by _lazy.exports_declared: the table of names to modules)
    from .._io import (
        CorruptFileError,
        DataFileError,
        ExternalDataError,
        FileChangedError,
        FileOptions,
        MissingFilterError,
        RemoteAccessError,
        RemoteReadError,
        decode_threads,
        set_decode_threads,
    )
    from ._contracts.protocols import (
        STATE_CONSUMED,
        STATE_EPOCH,
        STATE_SEED,
        BatchIndexable,
        ChunkAware,
        ChunkWindowed,
        EpochAware,
        RankSharded,
        ReadsAhead,
        Refreshes,
        Resumable,
        SplitsRanks,
        VariableBlocks,
        indexes_batches,
        is_rank_sharded,
        set_epoch_once,
        splits_across_ranks,
    )
    from .chunk_sampler import ChunkShuffleSampler
    from .combined_h5_dataset import CombinedHDF5Dataset, create_optimized_dataloader
    from .h5_dataloader import H5LazyDataset, h5_worker_init_fn
    from .h5_sample_dataset import H5SampleDataset, pad_collate
    from .h5_sparse_dataset import H5SparseDataset
    from .loader import (
        BatchedDataset,
        EpochBatchSampler,
        SafeStartDataLoader,
        batched_loader,
        fit_chunk_cache,
    )
    from .prefetch import DevicePrefetcher
    from .rank_cached_h5_dataloader import RankMemCachedH5Dataset
    from .samplers import (
        DistributedEpochSampler,
        EpochShuffleSampler,
        ShardSampler,
        _balanced_contiguous_shard,
        _interleaved_indices,
        epoch_permutation,
    )
    from .shard_sampler import ShardEpochSampler
    from .transforms import decode_image
    from .wait import WaitMeter, WaitSummary, wait_advice

_lazy.exports_declared(__name__)

__all__ = [
    "BatchIndexable",
    "BatchedDataset",
    "ChunkAware",
    "ChunkShuffleSampler",
    "ChunkWindowed",
    "CombinedHDF5Dataset",
    "CorruptFileError",
    "DataFileError",
    "DevicePrefetcher",
    "DistributedEpochSampler",
    "EpochAware",
    "EpochBatchSampler",
    "EpochShuffleSampler",
    "ExternalDataError",
    "FileChangedError",
    "FileOptions",
    "H5LazyDataset",
    "H5SampleDataset",
    "H5SparseDataset",
    "MissingFilterError",
    "RankMemCachedH5Dataset",
    "RankSharded",
    "ReadsAhead",
    "Refreshes",
    "RemoteAccessError",
    "RemoteReadError",
    "Resumable",
    "STATE_CONSUMED",
    "STATE_EPOCH",
    "STATE_SEED",
    "SafeStartDataLoader",
    "ShardEpochSampler",
    "ShardSampler",
    "SplitsRanks",
    "VariableBlocks",
    "WaitMeter",
    "WaitSummary",
    "_balanced_contiguous_shard",
    "_interleaved_indices",
    "batched_loader",
    "create_optimized_dataloader",
    "decode_image",
    "decode_threads",
    "epoch_permutation",
    "fit_chunk_cache",
    "h5_worker_init_fn",
    "indexes_batches",
    "is_rank_sharded",
    "pad_collate",
    "set_decode_threads",
    "set_epoch_once",
    "splits_across_ranks",
    "wait_advice",
]
