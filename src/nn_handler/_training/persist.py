"""Saving and restoring a whole run: model, optimizer slots, position, and every rank's RNGs.

Shared state (model, optimizer, scheduler, scaler, epoch, step, history) is the same on every
rank and written once by rank 0. What differs per rank (RNG states, the position in the
epoch, running sums) is gathered from all ranks into the same file, so each rank resumes its
own stream.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from ..distributed import World
from . import checkpoint as _checkpoint
from . import ddp as _ddp
from .epoch import EpochProgress
from .fit import RunState
from .handler_loaders import LoaderParts
from .slots import Slots


def save_run(
    path: str | os.PathLike[str],
    module: nn.Module,
    slots: Slots,
    state: RunState,
    world: World,
    train_loader: DataLoader[Any] | None,
) -> None:
    """Write the run to ``path`` (a collective under DDP: every rank calls it)."""
    parts = None if train_loader is None else LoaderParts.of(train_loader)
    progress = None if state.progress is None else state.progress.state_dict(parts)
    mine = {"rng": _checkpoint.capture_rng(), "progress": progress}
    ranks = _ddp.gather_objects(mine, world)
    if world.is_main:
        shared = {
            "model": module.state_dict(),
            **slots.state_dict(),
            "epoch": state.epoch,
            "global_step": state.global_step,
            "history": state.history,
            "world_size": world.world_size,
        }
        _checkpoint.write(path, {**shared, "ranks": ranks})
    _ddp.barrier(world)


def load_run(
    path: str | os.PathLike[str],
    module: nn.Module,
    slots: Slots,
    world: World,
    device: torch.device,
) -> RunState:
    """Restore model, slots and this rank's RNG states from ``path``; return the run state."""
    payload = _checkpoint.read(path, device)
    entry = _checkpoint.rank_entry(payload["ranks"], world.rank, world.world_size, path)
    progress = entry["progress"]
    # checked before anything changes: a damaged checkpoint leaves model and RNGs as they were
    for state in (entry["rng"], None if progress is None else progress.get("epoch_rng")):
        if state is not None:
            _checkpoint.check_rng(state, path, world.rank)
    module.load_state_dict(payload["model"])
    slots.load_state_dict(payload)
    if entry["rng"] is not None:
        _checkpoint.restore_rng(entry["rng"])
    return RunState(
        epoch=int(payload["epoch"]),
        global_step=int(payload["global_step"]),
        history=list(payload.get("history", [])),
        progress=None if progress is None else EpochProgress.from_state(progress),
    )
