"""The choices behind ``create_optimized_dataloader``: argument checks, workers, loader options.

The function itself lives in ``combined_h5_dataset`` (its public home); nothing here imports
the dataset, so the two modules do not import each other.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable
from typing import Any

import torch

from ..._validate import (
    check_parallel,
    check_positive_int,
    check_prefetch,
    format_names,
    usable_cores,
)

__all__ = ["check_dataset_kwargs", "choose_workers", "loader_options"]

_log = logging.getLogger(__name__)
_MAX_AUTO_WORKERS = 8


def check_dataset_kwargs(
    kwargs: dict[str, Any], dataset_cls: Callable[..., Any], factory: Callable[..., Any]
) -> None:
    """Reject keywords that neither ``factory`` nor ``dataset_cls`` takes, listing both."""
    params = inspect.signature(dataset_cls).parameters
    allowed = [name for name in params if name not in ("paths", "pin_memory")]
    own = inspect.signature(factory).parameters
    loader_args = [name for name in own if name != "dataset_kwargs"]
    for name in kwargs:
        if name == "paths":
            raise TypeError("pass the files as hdf5_files, not paths=")
        if name not in allowed:
            raise TypeError(
                f"create_optimized_dataloader() got an unexpected keyword argument {name!r}; "
                f"loader arguments: {format_names(loader_args)}; dataset arguments: "
                f"{format_names(allowed)}"
            )


def choose_workers(num_workers: int | None, world_size: int) -> int:
    if num_workers is not None:
        return check_parallel("num_workers", num_workers, minimum=0)
    ranks = check_positive_int(
        "LOCAL_WORLD_SIZE", int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    )
    return min(_MAX_AUTO_WORKERS, max(1, usable_cores() // ranks))


def loader_options(
    workers: int,
    pin_memory: bool | None,
    persistent_workers: bool | None,
    prefetch_factor: int | None,
) -> dict[str, Any]:
    if pin_memory is None:
        pin_memory = torch.cuda.is_available()
    elif pin_memory and not torch.cuda.is_available():
        _log.info("pin_memory=True but CUDA is not available: batches are not pinned")
        pin_memory = False
    options: dict[str, Any] = {"num_workers": workers, "pin_memory": bool(pin_memory)}
    if prefetch_factor is not None:
        prefetch_factor = check_prefetch("prefetch_factor", prefetch_factor)
    if workers == 0:
        for name, value in (
            ("persistent_workers", persistent_workers),
            ("prefetch_factor", prefetch_factor),
        ):
            if value:
                raise ValueError(f"{name}={value!r} needs num_workers > 0, got num_workers=0")
        return options
    options["persistent_workers"] = True if persistent_workers is None else persistent_workers
    if prefetch_factor is not None:
        options["prefetch_factor"] = prefetch_factor
    return options
