"""Elastic epochs: what is left of an epoch after phases that ran on other worlds.

An epoch of ``DistributedEpochSampler`` / ``ChunkShuffleSampler`` starts from one *base order*
of the whole dataset that depends only on ``(seed, epoch, data)``. A *phase* is a stretch of the
epoch run on one world: its world splits the phase's *remaining order* among its ranks (the
sampler decides how: interleaved, or in contiguous parts), every rank takes the same number of
positions, and positions past the end wrap to the start of the remaining order (the pad, at
most ``world_size - 1``).

A phase is recorded as ``(world_size, consumed, *options)``: ``consumed`` positions taken by
every rank, and the options its split used (e.g. batch size and workers of a dealt order).
After it, the remaining order is the previous remaining order without the positions every rank
took, in the same order. A state therefore stays a few integers per phase, whatever the size of
the data, and replaying it costs one pass over the order per phase.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._validate import check_non_negative_int, check_positive_int
from .shards import wrap

__all__ = ["Phase", "PositionsFn", "check_phases", "remaining_after"]

Phase = tuple[int, ...]
#: ``(remaining order, phase index, world_size, rank, options) -> positions into that order``
Positions = npt.NDArray[np.int64]
PositionsFn = Callable[[Positions, int, int, int, tuple[int, ...]], Positions]


def remaining_after(
    order: npt.NDArray[np.int64], phases: Sequence[Phase], positions: PositionsFn
) -> npt.NDArray[np.int64]:
    """The remaining order after ``phases``: what no rank of any phase took, in order."""
    for index, (world_size, consumed, *options) in enumerate(phases):
        if not len(order):
            break
        taken = np.zeros(len(order), dtype=bool)
        for rank in range(world_size):
            mine = positions(order, index, world_size, rank, tuple(options))[:consumed]
            taken[wrap(mine, len(order))] = True
        order = order[~taken]
    return order


def check_phases(phases: Any, options: int) -> list[Phase]:
    """Validate a state's ``phases``: a list of ``[world_size, consumed, *options]`` lists.

    Raises:
        TypeError / ValueError: not such a list, with the offending entry named.
    """
    if not isinstance(phases, (list, tuple)):
        raise TypeError(f"phases must be a list of [world_size, consumed, ...], got {phases!r}")
    checked: list[Phase] = []
    for i, phase in enumerate(phases):
        if not isinstance(phase, (list, tuple)) or len(phase) != 2 + options:
            raise ValueError(
                f"phases[{i}] must be [world_size, consumed] plus {options} option(s), "
                f"got {phase!r}"
            )
        world = check_positive_int(f"phases[{i}][0] (world_size)", phase[0])
        rest = [check_non_negative_int(f"phases[{i}][{j + 1}]", v) for j, v in enumerate(phase[1:])]
        checked.append((world, *rest))
    return checked
