"""How a loader's batch becomes ``(inputs, targets)`` on the device, and how the model is called.

Batches come as ``(x, y)`` tuples (``H5LazyDataset``, ``TensorDataset``), as dicts of fields
(``CombinedHDF5Dataset``; the user names the input and target keys), or as anything a
user-supplied ``batch_fn`` can split. Nothing here knows about files or epochs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .._validate import check_callable, format_names
from ..dataloaders.prefetch import move

BatchFn = Callable[[Any], tuple[Any, Any]]


@dataclass(frozen=True)
class BatchSplitter:
    """Splits a batch into ``(inputs, targets)``.

    Attributes:
        input_key: Key of the inputs in dict batches.
        target_key: Key of the targets in dict batches.
        batch_fn: ``batch -> (inputs, targets)``; overrides the keys when given.
    """

    input_key: str | None = None
    target_key: str | None = None
    batch_fn: BatchFn | None = None

    def __post_init__(self) -> None:
        for name in ("input_key", "target_key"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a string or None, got {value!r}")
        check_callable("batch_fn", self.batch_fn)

    def __call__(self, batch: Any) -> tuple[Any, Any]:
        if self.batch_fn is not None:
            return _check_pair(self.batch_fn(batch))
        if isinstance(batch, Mapping):
            return self._from_mapping(batch)
        if isinstance(batch, tuple | list) and len(batch) == 2:
            return batch[0], batch[1]
        if isinstance(batch, tuple | list):
            raise ValueError(
                f"a batch of {len(batch)} items is ambiguous: the handler reads (inputs, targets) "
                "pairs; pass NNHandler(batch_fn=lambda batch: (inputs, targets))"
            )
        raise ValueError(
            f"a batch of type {type(batch).__name__} has no targets (was the dataset built "
            "without y_key?); pass NNHandler(batch_fn=lambda batch: (inputs, targets)), e.g. "
            "batch_fn=lambda x: (x, x) for an autoencoder"
        )

    def inputs(self, batch: Any) -> Any:
        """The model's inputs of ``batch`` (for prediction: targets may be absent).

        As ``__call__``, but a batch without targets (a tensor, or a dict without
        ``target_key``) is all inputs.
        """
        if self.batch_fn is not None:
            return _check_pair(self.batch_fn(batch))[0]
        if isinstance(batch, Mapping) and self.input_key is not None and self.target_key is None:
            if self.input_key not in batch:
                raise KeyError(
                    f"input_key={self.input_key!r} is not in the batch; its keys are "
                    f"{format_names(map(str, batch))}"
                )
            return batch[self.input_key]
        if isinstance(batch, torch.Tensor):
            return batch
        return self(batch)[0]

    def _from_mapping(self, batch: Mapping[str, Any]) -> tuple[Any, Any]:
        if self.input_key is None or self.target_key is None:
            raise ValueError(
                f"batches are dicts with keys {format_names(map(str, batch))}; tell the handler "
                "which are the model's inputs and targets: NNHandler(input_key=..., "
                "target_key=...) or batch_fn="
            )
        for name, key in (("input_key", self.input_key), ("target_key", self.target_key)):
            if key not in batch:
                raise KeyError(
                    f"{name}={key!r} is not in the batch; its keys are "
                    f"{format_names(map(str, batch))}"
                )
        return batch[self.input_key], batch[self.target_key]


def _check_pair(result: Any) -> tuple[Any, Any]:
    if not (isinstance(result, tuple | list) and len(result) == 2):
        raise TypeError(f"batch_fn must return (inputs, targets), got {type(result).__name__}")
    return result[0], result[1]


def to_device(obj: Any, device: torch.device) -> Any:
    """Move the tensors in ``obj`` (nested tuples, lists, dicts) to ``device``, non-blocking.

    ``non_blocking`` overlaps the copy with compute when the source is pinned memory; the
    first kernel that uses the tensor waits for it, so it is always safe.
    """
    return move(obj, lambda tensor: tensor.to(device, non_blocking=True))


def call_model(model: Callable[..., Any], inputs: Any) -> Any:
    """``model(*inputs)`` for a tuple or list, ``model(**inputs)`` for a dict, else ``model(x)``."""
    if isinstance(inputs, tuple | list):
        return model(*inputs)
    if isinstance(inputs, Mapping):
        return model(**inputs)
    return model(inputs)


def count_samples(inputs: Any, targets: Any) -> int:
    """Samples in a batch: the length of the first tensor found in targets, then inputs."""
    for part in (targets, inputs):
        tensor = _first_tensor(part)
        if tensor is not None:
            return int(tensor.shape[0]) if tensor.dim() else 1
    raise TypeError(
        "cannot count the samples of a batch without tensors; return tensors from the dataset "
        "or from batch_fn"
    )


def _first_tensor(obj: Any) -> torch.Tensor | None:
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, Mapping):
        obj = list(obj.values())
    if not isinstance(obj, tuple | list):
        return None
    for value in obj:
        found = _first_tensor(value)
        if found is not None:
            return found
    return None
