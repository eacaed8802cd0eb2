"""A model's output for a batch → one NumPy array per dataset, named after the output's structure.

A tensor (or array) is one dataset, ``key``; a tuple or list of them is ``key/0``, ``key/1``, ...;
a dict is ``key/<name>`` per entry, in the dict's order. Tensors come to the CPU; ``bfloat16``,
which HDF5 has no type for, is stored as ``float32`` (every value exactly).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from .layout import OutputSpec

__all__ = ["flatten_outputs", "specs_of"]


def flatten_outputs(outputs: Any, key: str) -> list[tuple[str, np.ndarray]]:
    """``[(dataset name, rows)]`` of one batch's outputs (module docstring).

    Raises:
        TypeError: an output is not a tensor or array (or a tuple, list or dict of them).
    """
    if isinstance(outputs, Mapping):
        named = [(f"{key}/{name}", value) for name, value in _named(outputs)]
        return [(name, _array(value, name)) for name, value in named]
    if isinstance(outputs, tuple | list):
        return [(f"{key}/{i}", _array(value, f"{key}/{i}")) for i, value in enumerate(outputs)]
    return [(key, _array(outputs, key))]


def specs_of(named: list[tuple[str, np.ndarray]]) -> tuple[OutputSpec, ...]:
    """The datasets that batches shaped like ``named`` make."""
    return tuple(OutputSpec(name, tuple(rows.shape[1:]), rows.dtype.str) for name, rows in named)


def _named(outputs: Mapping[Any, Any]) -> list[tuple[str, Any]]:
    for name in outputs:
        if not isinstance(name, str) or not name or "/" in name:
            raise TypeError(
                f"output names must be non-empty strings without '/' (each names a dataset), "
                f"got {name!r}"
            )
    return list(outputs.items())


def _array(value: Any, name: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.dtype == torch.bfloat16:
            value = value.float()
        return np.asarray(value.cpu().numpy())
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biufc":
            raise TypeError(
                f"output {name!r} has dtype {value.dtype}; outputs must be numbers or booleans "
                "(HDF5 stores them chunked and compressed)"
            )
        return value
    raise TypeError(
        f"output {name!r} is a {type(value).__name__}; outputs must be tensors or NumPy arrays "
        "(or a tuple, list or dict of them), one row per sample"
    )
