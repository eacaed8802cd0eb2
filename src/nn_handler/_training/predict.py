"""``NNHandler.predict``: the model's outputs for every sample, into one HDF5 file or a tensor.

Each rank computes the contiguous, chunk-aligned span ``nn_handler.outputs.rank_span`` gives it,
in the batches ``rank_batches`` cuts (the same rows meet in the same batch on any number of
ranks), and writes them with an ``H5OutputWriter``; ``finish()`` makes the one file. A rerun
after a kill skips the batches whose rows are all stored.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from .._validate import check_count, check_key, check_loader_options, format_names
from ..dataloaders import BatchedDataset, SafeStartDataLoader, indexes_batches, is_rank_sharded
from ..distributed import World
from ..outputs import H5OutputWriter, block_rows, rank_batches, rank_span
from .batches import BatchSplitter, call_model, to_device
from .device import Precision

# DataLoader keywords predict sets itself: it owns the order and the batches
_OWNED = ("batch_size", "batch_sampler", "sampler", "shuffle", "drop_last", "num_workers")
# DataLoader keywords that need worker processes (left out of the probe's loader, which has none)
_WORKER_ONLY = frozenset(
    {
        "multiprocessing_context",
        "num_workers",
        "persistent_workers",
        "prefetch_factor",
        "timeout",
        "worker_init_fn",
    }
)
_LOADER_KEYWORDS = frozenset(inspect.signature(DataLoader.__init__).parameters) - {
    "self",
    "dataset",
    *_OWNED,
}


@dataclass(frozen=True)
class Predictor:
    """What a prediction needs of the handler: the model and how batches reach it."""

    module: nn.Module
    splitter: BatchSplitter
    device: torch.device
    precision: Precision
    world: World

    def to_file(
        self, dataset: Any, out: str | os.PathLike[str], key: str, batch_size: int, options: Any
    ) -> Path:
        """Write every sample's outputs to ``out`` (this rank's share); return the path."""
        n_rows = _length(dataset)
        writer = H5OutputWriter(out, n_rows, key=key, attrs=_attrs(self.module, dataset))
        layout = writer.layout  # from the parts of a run that was killed, if any
        if layout is None:
            layout = writer.declare(self._probe(dataset, options))
        block = block_rows(layout.chunk_rows, batch_size)
        span = rank_span(n_rows, block, self.world.rank, self.world.world_size)
        batches = list(rank_batches(span, block, batch_size, writer.stored()))
        for indices, outputs in self._run(dataset, batches, options):
            writer.write(indices, outputs)
        return writer.finish()

    def to_tensors(self, dataset: Any, batch_size: int, options: Any) -> Any:
        """Every sample's outputs, stacked: a tensor, or a tuple / dict of them (one process)."""
        n_rows = _length(dataset)
        batches = [range(lo, min(lo + batch_size, n_rows)) for lo in range(0, n_rows, batch_size)]
        parts = [outputs for _, outputs in self._run(dataset, batches, options)]
        return _stack(parts)

    def _run(
        self, dataset: Any, batches: list[range], options: Any
    ) -> Iterator[tuple[np.ndarray, Any]]:
        if not batches:
            return
        loader = _loader(dataset, [list(b) for b in batches], options)
        for indices, batch in zip(batches, loader, strict=True):
            yield np.arange(indices.start, indices.stop), self._outputs(batch)

    def _probe(self, dataset: Any, options: Mapping[str, Any]) -> Any:
        """The outputs of sample 0 alone: their shapes and dtypes fix the file's chunk grid."""
        here = {k: v for k, v in options.items() if k not in _WORKER_ONLY}
        return self._outputs(next(iter(_loader(dataset, [[0]], here))))

    def _outputs(self, batch: Any) -> Any:
        inputs = to_device(self.splitter.inputs(batch), self.device)
        with _eval_mode(self.module), torch.inference_mode(), self.precision.autocast():
            return call_model(self.module, inputs)


def check_predict_args(
    world: World, out: Any, key: Any, batch_size: Any, num_workers: Any, kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """Validate ``predict``'s arguments; return the DataLoader options.

    Raises:
        TypeError / ValueError: naming the argument, its value and what is valid.
    """
    if out is None and world.is_distributed:
        raise ValueError(
            f"out=None under DDP ({world.world_size} processes): each rank holds only its share, "
            "so there is no one tensor to return; pass out='predictions.h5' (every rank then "
            "returns the path of one file with every row)"
        )
    if out is not None and not isinstance(out, str | os.PathLike):
        raise TypeError(f"out must be a path (str or os.PathLike) or None, got {out!r}")
    check_key("key", key, optional=False)
    check_count("batch_size", batch_size, minimum=1)
    unknown = set(kwargs) - _LOADER_KEYWORDS
    if unknown:
        raise TypeError(
            f"predict() got unknown or reserved DataLoader keyword(s) {format_names(unknown)} "
            f"(predict sets {', '.join(_OWNED)} itself); valid keywords are "
            f"{format_names(_LOADER_KEYWORDS)}"
        )
    options = {**kwargs, "num_workers": num_workers}
    check_loader_options(options)
    return options


def _length(dataset: Any) -> int:
    if is_rank_sharded(dataset):
        raise ValueError(
            f"{type(dataset).__name__} holds only this rank's shard; predict() splits the whole "
            "dataset among the ranks itself: pass a dataset of every sample (e.g. H5LazyDataset)"
        )
    try:
        n_rows = len(dataset)
    except TypeError as exc:
        raise TypeError(
            f"dataset must have a length (a map-style dataset), got {type(dataset).__name__}"
        ) from exc
    if n_rows < 1:
        raise ValueError(f"dataset is empty (len {n_rows}); there is nothing to predict")
    return int(n_rows)


def _loader(dataset: Any, batches: list[list[int]], options: Mapping[str, Any]) -> Any:
    """A loader of exactly ``batches``, in order (one dataset call per batch where it can)."""
    if indexes_batches(dataset) and "collate_fn" not in options:
        return SafeStartDataLoader(
            BatchedDataset(dataset),
            batch_sampler=batches,
            collate_fn=BatchedDataset.collate,
            **options,
        )
    return SafeStartDataLoader(dataset, batch_sampler=batches, **options)


@contextlib.contextmanager
def _eval_mode(module: nn.Module) -> Iterator[None]:
    """Evaluation mode for the call, then the mode the module had."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


def _attrs(module: nn.Module, dataset: Any) -> dict[str, Any]:
    """The file's attributes: the model's class and what the dataset reads (no time stamps)."""
    attrs: dict[str, Any] = {
        "nn_handler.model": type(module).__name__,
        "nn_handler.dataset": type(dataset).__name__,
    }
    files = getattr(dataset, "paths", None) or getattr(dataset, "path", None)
    if isinstance(files, str | os.PathLike):
        files = [files]
    if files and all(isinstance(f, str | os.PathLike) for f in files):
        attrs["nn_handler.source_files"] = [os.fspath(f) for f in files]
    keys = [getattr(dataset, name, None) for name in ("x_key", "y_key")]
    if any(isinstance(k, str) for k in keys):
        attrs["nn_handler.source_keys"] = [k for k in keys if isinstance(k, str)]
    return attrs


def _stack(parts: list[Any]) -> Any:
    """Concatenate batches of outputs along the rows, keeping their structure."""
    first = parts[0]
    if isinstance(first, Mapping):
        return {name: _cat([p[name] for p in parts]) for name in first}
    if isinstance(first, tuple | list):
        return type(first)(_cat([p[i] for p in parts]) for i in range(len(first)))
    return _cat(parts)


def _cat(tensors: list[Any]) -> torch.Tensor:
    return torch.cat([torch.as_tensor(t).detach().cpu() for t in tensors])
