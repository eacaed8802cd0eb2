"""Batches as nested structures: one way to reach every tensor in tuples, lists and dicts."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = ["move"]


def move(batch: Any, fn: Callable[[Any], Any], kind: type | tuple[type, ...] = torch.Tensor) -> Any:
    """Apply ``fn`` to every ``kind`` (a tensor) in ``batch`` (tuples, named tuples, lists, dicts).

    Containers are rebuilt with their own types (mappings as dicts); other values pass
    unchanged.
    """
    if isinstance(batch, kind):
        return fn(batch)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # named tuple
        return type(batch)(*(move(item, fn, kind) for item in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(move(item, fn, kind) for item in batch)
    if isinstance(batch, Mapping):
        return {key: move(value, fn, kind) for key, value in batch.items()}
    return batch
