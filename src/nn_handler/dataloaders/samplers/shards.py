"""Shard and pad arithmetic: which rows a rank holds, and how many steps every rank takes.

Every sampler, the rank cache (``RankMemCachedH5Dataset``) and elastic resume count with these
functions, so a shard's rows and a rank's step count are defined once:

* a *contiguous* shard is one slice of ``range(total)``; sizes differ by at most one, the first
  ``total % world_size`` ranks holding one more; an *interleaved* shard is every
  ``world_size``-th row from ``rank``;
* *equal steps*: ``"pad"`` gives every rank ``ceil(total / world_size)`` positions (a shorter
  part repeats its first ones: ``wrap``), ``"drop"`` gives ``floor(total / world_size)``, and
  None (the rank cache only) keeps each rank's own count.
"""

from __future__ import annotations

import warnings
from typing import Literal

import numpy as np
import numpy.typing as npt

from ..._validate import check_choice, check_count, check_int
from ...distributed import World

__all__ = [
    "EQUAL_STEPS",
    "EVEN_MODES",
    "SHARD_MODES",
    "EqualSteps",
    "EvenMode",
    "ShardMode",
    "_balanced_contiguous_shard",
    "_interleaved_indices",
    "equal_steps_option",
    "fit_length",
    "shard_rows",
    "steps_per_rank",
    "wrap",
]

#: how ranks reach equal step counts: repeat a few samples, or leave a few out
EvenMode = Literal["pad", "drop"]
#: ``EvenMode``, or None: every rank keeps its own count (unequal steps: not for DDP)
EqualSteps = EvenMode | None
#: one slice of the rows per rank, or every ``world_size``-th row
ShardMode = Literal["contiguous", "interleave"]
EVEN_MODES: tuple[EvenMode, ...] = ("pad", "drop")
EQUAL_STEPS: tuple[EqualSteps, ...] = ("pad", "drop", None)
SHARD_MODES: tuple[ShardMode, ...] = ("contiguous", "interleave")


def _check_world(total: int, world_size: int, rank: int) -> None:
    check_count("total", total)
    World(rank=check_int("rank", rank), world_size=check_int("world_size", world_size))


def _balanced_contiguous_shard(total: int, world_size: int, rank: int) -> tuple[int, int]:
    """Return ``(start, end)`` of rank's contiguous shard of ``range(total)``.

    Shard sizes differ by at most one; the first ``total % world_size`` ranks get one more.
    """
    _check_world(total, world_size, rank)
    base, extra = divmod(total, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def _interleaved_indices(total: int, world_size: int, rank: int) -> npt.NDArray[np.int64]:
    """Return rank's interleaved shard ``rank, rank + world_size, …`` of ``range(total)``."""
    _check_world(total, world_size, rank)
    return np.arange(rank, total, world_size, dtype=np.int64)


def shard_rows(total: int, world: World, mode: ShardMode) -> range:
    """Rows of ``range(total)`` that ``world.rank`` holds: one slice, or every ``world_size``-th."""
    size, rank = world.world_size, world.rank
    if mode == "contiguous":
        return range(*_balanced_contiguous_shard(total, size, rank))
    return range(rank, max(rank, total), size)


def steps_per_rank(total: int, world_size: int, equal: EqualSteps, own: int | None = None) -> int:
    """Positions every rank takes from ``total``: pad up, drop the rest, or (None) its ``own``."""
    if equal is None:
        if own is None:
            raise ValueError("equal steps None keeps each rank's own count: pass own=")
        return own
    whole, rest = divmod(total, world_size)
    return whole + (1 if equal == "pad" and rest else 0)


def fit_length(order: npt.NDArray[np.int64], n: int) -> npt.NDArray[np.int64]:
    """Return ``order`` cut to ``n`` entries, or repeated cyclically up to ``n`` (padding)."""
    if n <= len(order):
        return order[:n]
    if len(order) == 0:
        raise ValueError(f"cannot pad an empty order to {n} samples: there is nothing to repeat")
    return np.resize(order, n)


def wrap(positions: npt.NDArray[np.int64], n: int) -> npt.NDArray[np.int64]:
    """``positions`` past ``n`` wrapped to the start (the pad repeats the order's first items)."""
    return positions % n if n else positions


def equal_steps_option(equal_steps: EvenMode, even: EvenMode | None, where: str) -> EvenMode:
    """The equal-steps choice of a sampler or loader, also accepted by its old name ``even=``.

    Raises:
        TypeError: both names given, with different values.
        ValueError: the value is not ``"pad"`` or ``"drop"``.
    """
    if even is not None:
        warnings.warn(
            f"{where}: even= is now called equal_steps= (the same values, 'pad' or 'drop'); "
            "even= will be removed in a future release",
            DeprecationWarning,
            stacklevel=3,
        )
        if equal_steps != "pad" and equal_steps != even:
            raise TypeError(
                f"{where}: got equal_steps={equal_steps!r} and its old name even={even!r}; "
                "pass equal_steps= only"
            )
        equal_steps = even
    checked: EvenMode = check_choice("equal_steps", equal_steps, EVEN_MODES)
    return checked
