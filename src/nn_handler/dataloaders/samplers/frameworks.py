"""Whether a framework's loader splits a sampler's batches across processes without saying so.

accelerate's ``prepare()`` with its default settings gives the sampler a shared ``generator``
before it splits the loader's batches, and our samplers take that as the sign (see
``samplers``). Two settings split without it: ``use_seedable_sampler=True`` deals the batches out
(``BatchSamplerShard``) and installs no generator, and ``dispatch_batches=True`` iterates the
loader on process 0 only and sends each process a slice of every batch
(``DataLoaderDispatcher``). Neither touches the sampler at ``prepare()`` time; both register the
loader they are iterating as accelerate's ``GradientState().active_dataloader`` before they call
``set_epoch`` and draw the first index, so a sampler can ask, at that moment, whether that loader
is one that splits and whether it is reading this very sampler.

accelerate is never imported here: a loader of accelerate can only be running if the program
imported it already.
"""

from __future__ import annotations

import sys
from typing import Any

from .._protocols import WrapsSampler

__all__ = ["accelerate_splits"]

# Loaders nest a handful of wrappers (accelerate's shard, torch's BatchSampler, our readahead);
# anything deeper is not a sampler chain.
_MAX_DEPTH = 8


def accelerate_splits(sampler: object) -> bool:
    """True while a loader of accelerate that splits batches across processes reads ``sampler``.

    Args:
        sampler: The sampler asking (at ``set_epoch`` or at the start of a pass).
    """
    state = sys.modules.get("accelerate.state")
    loaders = sys.modules.get("accelerate.data_loader")
    if state is None or loaders is None or not state.GradientState._shared_state:
        return False  # accelerate is not imported, or has iterated no loader yet
    loader = state.GradientState().active_dataloader
    if not isinstance(loader, loaders.DataLoaderAdapter):
        return False
    base = loader.base_dataloader
    splits = isinstance(loader, loaders.DataLoaderDispatcher) and _processes(loader.state) > 1
    node: Any = base.batch_sampler if base.batch_sampler is not None else base.sampler
    for _ in range(_MAX_DEPTH):
        if node is sampler:
            return splits
        if isinstance(node, loaders.BatchSamplerShard):
            splits = splits or _processes(node) > 1
            node = node.batch_sampler
        elif isinstance(node, loaders.SkipBatchSampler):
            node = node.batch_sampler
        elif isinstance(node, WrapsSampler):
            node = node.sampler
        else:
            return False
    return False


def _processes(holder: Any) -> int:
    return int(holder.num_processes)
