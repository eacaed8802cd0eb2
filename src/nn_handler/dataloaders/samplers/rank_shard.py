"""ShardEpochSampler: the epoch of one rank's shard, resumable on another number of ranks.

A rank-sharded dataset (``RankMemCachedH5Dataset``) holds rows ``shard_rows(total, world, rank,
mode)`` of the file; its sampler shuffles those (``EpochShuffleSampler``'s order, so on a fixed
world it trains exactly as an ``EpochShuffleSampler`` of the shard). Which rows a rank trained is
then not a prefix of any global order, but it is a pure function of a few numbers: the world, the
mode and how many positions every rank consumed. A state records just those (``phases``, see
``samplers/elastic.py``).

Resumed on another world, every rank replays the earlier phases to find the rows nobody has
trained yet (one pass over ``total`` rows, one byte per row, once), and shuffles the untrained
rows of its new shard. Ranks then run equal steps: with ``equal_steps="pad"`` every rank yields
as many positions as the rank with the most untrained rows, repeating its own (the pad is the
difference between the largest and each rank's rest); ``"drop"`` cuts every rank to the
smallest rest (the rest of the others is not trained this epoch); None keeps each rank's own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..._validate import check_choice, check_count
from ...distributed import World
from .._contracts.protocols import STATE_PHASES
from .epoch import EpochShuffleSampler, epoch_permutation
from .shards import (
    EQUAL_STEPS,
    SHARD_MODES,
    EqualSteps,
    ShardMode,
    fit_length,
    shard_rows,
    steps_per_rank,
)

__all__ = ["ShardEpochSampler"]


class ShardEpochSampler(EpochShuffleSampler):
    """``EpochShuffleSampler`` over one rank's shard that knows which rows the shard holds.

    ``RankMemCachedH5Dataset.make_sampler()`` returns one. Positions are the shard's own
    (``0 <= i < shard_size``), as for ``EpochShuffleSampler``; its state holds no rank and
    resumes on any world (see the module docstring).

    Args:
        total: Rows of the whole file.
        world: The world whose rank's shard the dataset holds.
        mode: ``"contiguous"`` or ``"interleave"`` (the dataset's ``mode``).
        equal_steps: ``"pad"``, ``"drop"`` or None (the dataset's ``equal_steps``).
        seed: Base seed; the order is a pure function of seed, epoch, world and phases.
        shuffle: False yields the shard's rows in order.
    """

    _state_sizes: tuple[str, ...] = ("total", "mode")
    _state_split: tuple[str, ...] = ("world_size",)

    def __init__(
        self,
        total: int,
        world: World,
        mode: ShardMode = "contiguous",
        equal_steps: EqualSteps = "pad",
        seed: int = 0,
        shuffle: bool = True,
    ) -> None:
        self.total = check_count("total", total)
        self.mode: ShardMode = check_choice("mode", mode, SHARD_MODES)
        self.equal_steps: EqualSteps = check_choice("equal_steps", equal_steps, EQUAL_STEPS)
        own = len(shard_rows(self.total, world, self.mode))
        count = steps_per_rank(self.total, world.world_size, self.equal_steps, own)
        super().__init__(own, seed, shuffle, num_samples=count, shard_of=world)
        self._left_cache: tuple[Any, npt.NDArray[np.bool_]] | None = None
        self._order_cache: tuple[Any, npt.NDArray[np.int64]] | None = None

    def _state_value(self, name: str) -> Any:
        if name == "world_size":
            assert self.shard_of is not None
            return self.shard_of.world_size
        return super()._state_value(name)

    def _upgrade(self, state: dict[str, Any]) -> dict[str, Any]:
        # an EpochShuffleSampler state of this shard (before version 2): the same world
        if STATE_PHASES not in state and {"data_len", "num_samples"} <= set(state):
            if (state["data_len"], state["num_samples"]) != (self.data_len, self.num_samples):
                return state  # the strict check names what differs
            kept = {k: v for k, v in state.items() if k not in ("data_len", "num_samples")}
            split = {n: self._state_value(n) for n in ("total", "mode", "world_size")}
            return {**kept, **split, STATE_PHASES: []}
        return state

    # -- phases ---------------------------------------------------------------------------------

    def _untrained(self) -> npt.NDArray[np.bool_]:
        """Rows of the file no rank has trained in this epoch's earlier phases."""
        key = (self.seed, self.epoch, tuple(self._phases))
        if self._left_cache is None or self._left_cache[0] != key:
            left = np.ones(self.total, dtype=bool)
            for index, (world_size, consumed, *_) in enumerate(self._phases):
                taken = [
                    self._rows_of(left, index, world_size, rank)[:consumed]
                    for rank in range(world_size)
                ]
                for rows in taken:
                    left[rows] = False
            self._left_cache = (key, left)
        return self._left_cache[1]

    def _rows_of(
        self, left: npt.NDArray[np.bool_], phase: int, world_size: int, rank: int
    ) -> npt.NDArray[np.int64]:
        """File rows in the order rank ``rank`` of ``world_size`` yields them in ``phase``."""
        rows = shard_rows(self.total, World(rank, world_size), self.mode)
        local = self._local_order(left, phase, world_size, rank)
        if not len(rows):
            return local
        return rows.start + rows.step * local

    def _local_order(
        self, left: npt.NDArray[np.bool_], phase: int, world_size: int, rank: int
    ) -> npt.NDArray[np.int64]:
        """Shard positions rank ``rank`` yields in ``phase`` (padded or cut to equal steps)."""
        rows = shard_rows(self.total, World(rank, world_size), self.mode)
        if phase == 0:
            count = steps_per_rank(self.total, world_size, self.equal_steps, len(rows))
            order = self._shuffled(len(rows))
            return fit_length(order, count) if len(rows) or not count else order
        mine = np.flatnonzero(left[rows.start : rows.stop : rows.step])
        if self.shuffle:
            rng = np.random.default_rng([self.seed, self.epoch, phase, rank, 0x53484152])
            mine = mine[rng.permutation(len(mine))]
        counts = [
            int(left[r.start : r.stop : r.step].sum())
            for r in (shard_rows(self.total, World(k, world_size), self.mode)
                      for k in range(world_size))
        ]  # fmt: skip
        count = self._equal_count(counts, len(mine))
        if not len(mine) and count:  # all of this shard is trained: pad with any of its rows
            mine = self._shuffled(len(rows))
        return fit_length(mine, count) if len(mine) or not count else mine

    def _shuffled(self, n: int) -> npt.NDArray[np.int64]:
        if self.shuffle:
            return epoch_permutation(n, self.seed, self.epoch)
        return np.arange(n, dtype=np.int64)

    def _equal_count(self, counts: list[int], own: int) -> int:
        if self.equal_steps == "pad":
            return max(counts, default=0)
        if self.equal_steps == "drop":
            return min(counts, default=0)
        return own

    def _order(self) -> npt.NDArray[np.int64]:
        if not self._phases:
            return super()._order()
        assert self.shard_of is not None
        world = self.shard_of
        # cached: len() needs it too (a checkpoint asks for it at every save)
        key = (self.seed, self.epoch, tuple(self._phases))
        if self._order_cache is None or self._order_cache[0] != key:
            left = self._untrained()
            order = self._local_order(left, len(self._phases), world.world_size, world.rank)
            self._order_cache = (key, order)
        return self._order_cache[1]

    def __len__(self) -> int:
        if not self._phases:
            return self.num_samples
        return len(self._order())

    def __repr__(self) -> str:
        return (
            f"ShardEpochSampler(total={self.total}, shard_of={self.shard_of}, "
            f"mode={self.mode!r}, data_len={self.data_len}, seed={self.seed}, "
            f"shuffle={self.shuffle}, epoch={self.epoch}, num_samples={self.num_samples})"
        )
