"""Shard math and epoch samplers: index order as a pure function of (seed, epoch, rank, sizes).

Every sampler here:

* draws its order from its own ``np.random.default_rng((seed, epoch))``, never the global RNG;
* reshuffles on ``set_epoch(epoch)`` and warns once if a shuffled pass repeats an epoch;
* keeps a tiny ``state_dict()`` (``seed``, ``epoch``, ``consumed`` and the sizes it was built for)
  so a run can resume mid-epoch: after ``load_state_dict`` the next pass yields exactly the
  indices that epoch had not yet yielded.

``state_dict()["consumed"]`` counts indices *handed out* by this sampler. A DataLoader with workers
prefetches ahead of training, so a training loop that checkpoints should store the number of
samples it actually trained on under ``"consumed"`` (the key names are fixed).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from torch.utils.data import Sampler

from .._validate import check_choice, check_int, check_non_negative_int
from ..distributed import World
from ._protocols import STATE_CONSUMED, STATE_EPOCH, STATE_SEED

__all__ = [
    "DistributedEpochSampler",
    "EpochShuffleSampler",
    "ShardSampler",
    "_balanced_contiguous_shard",
    "_interleaved_indices",
    "epoch_permutation",
]

EvenMode = Literal["pad", "drop"]
_EVEN_MODES: tuple[EvenMode, ...] = ("pad", "drop")


def _check_world(total: int, world_size: int, rank: int) -> None:
    check_non_negative_int("total", total)
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


def epoch_permutation(n: int, seed: int, epoch: int) -> npt.NDArray[np.int64]:
    """Return a permutation of ``range(n)``: a pure function of ``(seed, epoch)``."""
    rng = np.random.default_rng([seed & 0xFFFFFFFFFFFFFFFF, epoch & 0xFFFFFFFFFFFFFFFF])
    return rng.permutation(n).astype(np.int64, copy=False)


def _fit_length(order: npt.NDArray[np.int64], n: int) -> npt.NDArray[np.int64]:
    """Return ``order`` cut to ``n`` entries, or repeated cyclically up to ``n`` (padding)."""
    if n <= len(order):
        return order[:n]
    if len(order) == 0:
        raise ValueError(f"cannot pad an empty order to {n} samples: there is nothing to repeat")
    return np.resize(order, n)


class _EpochSampler(Sampler[int]):
    """Shared mechanics: epochs, resumable iteration, state, the repeated-epoch warning."""

    _state_sizes: tuple[str, ...] = ()

    def __init__(self, seed: int, shuffle: bool) -> None:
        self.seed = check_int("seed", seed)
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle must be True or False, got {shuffle!r}")
        self.shuffle = shuffle
        self.epoch = 0
        self._consumed = 0
        self._resume_from = 0
        self._last_pass_epoch: int | None = None
        self._warned = False

    def _order(self) -> npt.NDArray[np.int64]:
        raise NotImplementedError

    def _epoch_order(self, n: int) -> npt.NDArray[np.int64]:
        """This epoch's permutation of ``range(n)``, or ``range(n)`` when not shuffling."""
        if self.shuffle:
            return epoch_permutation(n, self.seed, self.epoch)
        return np.arange(n, dtype=np.int64)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next pass yields."""
        epoch = check_non_negative_int("epoch", epoch)
        if epoch != self.epoch:
            self._resume_from = 0
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        start, self._resume_from = self._resume_from, 0
        if start == 0:
            self._warn_if_repeated()
        order = self._order()[start:].tolist()
        self._consumed = start
        return self._count(order)

    def _count(self, order: list[int]) -> Iterator[int]:
        for index in order:
            self._consumed += 1
            yield index

    def _warn_if_repeated(self) -> None:
        if self.shuffle and self._last_pass_epoch == self.epoch and not self._warned:
            self._warned = True
            warnings.warn(
                f"{type(self).__name__} starts another pass over epoch {self.epoch} in the same "
                "order: call sampler.set_epoch(epoch) before each epoch to reshuffle",
                UserWarning,
                stacklevel=3,
            )
        self._last_pass_epoch = self.epoch

    def state_dict(self) -> dict[str, Any]:
        """Return ``{"seed", "epoch", "consumed", <sizes>}`` (plain ints)."""
        state = {STATE_SEED: self.seed, STATE_EPOCH: self.epoch, STATE_CONSUMED: self._consumed}
        state.update({name: getattr(self, name) for name in self._state_sizes})
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next pass yields the rest of epoch ``state["epoch"]``.

        Raises:
            KeyError / ValueError: keys are missing or unknown, or the sizes differ from this
                sampler's (the state belongs to another dataset or world).
        """
        expected = {STATE_SEED, STATE_EPOCH, STATE_CONSUMED, *self._state_sizes}
        if set(state) != expected:
            raise KeyError(
                f"{type(self).__name__} state must have keys {sorted(expected)}, "
                f"got {sorted(state)}"
            )
        for name in self._state_sizes:
            if state[name] != getattr(self, name):
                raise ValueError(
                    f"state was saved with {name}={state[name]!r} but this sampler has "
                    f"{name}={getattr(self, name)!r}"
                )
        consumed = check_non_negative_int(STATE_CONSUMED, state[STATE_CONSUMED])
        if consumed > len(self):
            raise ValueError(f"consumed={consumed} exceeds the epoch length {len(self)}")
        self.seed = check_int(STATE_SEED, state[STATE_SEED])
        self.epoch = check_non_negative_int(STATE_EPOCH, state[STATE_EPOCH])
        self._resume_from = self._consumed = consumed
        self._last_pass_epoch = None

    def __len__(self) -> int:
        raise NotImplementedError


class EpochShuffleSampler(_EpochSampler):
    """Shuffles a local (already sharded) dataset anew each epoch.

    Args:
        data_len: Samples in the local dataset.
        seed: Base seed; the order is a pure function of ``(seed, epoch)``.
        shuffle: False yields ``0, 1, …`` in order.
        num_samples: Samples per epoch (default ``data_len``). More pads by repeating this
            shard's own samples (cyclically in the epoch's order), fewer drops the tail; the
            counts are ``num_padded`` / ``num_dropped``. Used to give every DDP rank the same
            number of steps.
    """

    _state_sizes = ("data_len", "num_samples")

    def __init__(
        self, data_len: int, seed: int = 0, shuffle: bool = True, *, num_samples: int | None = None
    ) -> None:
        super().__init__(seed, shuffle)
        self.data_len = check_non_negative_int("data_len", data_len)
        self.num_samples = (
            self.data_len
            if num_samples is None
            else check_non_negative_int("num_samples", num_samples)
        )
        if self.num_samples > 0 and self.data_len == 0:
            raise ValueError(
                f"num_samples={self.num_samples} needs padding, but data_len is 0: an empty "
                "shard has no samples to repeat"
            )

    @property
    def num_padded(self) -> int:
        """Samples repeated per epoch to reach ``num_samples``."""
        return max(0, self.num_samples - self.data_len)

    @property
    def num_dropped(self) -> int:
        """Samples left out per epoch to stay within ``num_samples``."""
        return max(0, self.data_len - self.num_samples)

    def _order(self) -> npt.NDArray[np.int64]:
        return _fit_length(self._epoch_order(self.data_len), self.num_samples)

    def __len__(self) -> int:
        return self.num_samples

    def __repr__(self) -> str:
        return (
            f"EpochShuffleSampler(data_len={self.data_len}, seed={self.seed}, "
            f"shuffle={self.shuffle}, epoch={self.epoch}, num_samples={self.num_samples})"
        )


class DistributedEpochSampler(_EpochSampler):
    """Splits one global dataset across ranks: disjoint parts, equal counts, new order per epoch.

    Each epoch draws one global permutation (the same on every rank), makes its length a
    multiple of ``world_size`` (``even="pad"`` repeats samples from its start, ``"drop"`` cuts
    the tail), and gives rank ``r`` the positions ``r, r + world_size, …``. Every rank yields
    the same number of indices, so DDP ranks run the same number of steps.

    Args:
        data_len: Samples in the global dataset.
        seed: Base seed, the same on every rank.
        shuffle: False keeps file order (still interleaved across ranks).
        rank: This rank (detected with ``World.detect`` when None).
        world_size: Number of ranks (detected when None).
        even: ``"pad"`` (every sample at least once per epoch; ``num_padded`` repeats) or
            ``"drop"`` (no repeats; ``num_dropped`` samples skipped per epoch).
    """

    _state_sizes: tuple[str, ...] = ("data_len", "rank", "world_size")

    def __init__(
        self,
        data_len: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
        even: EvenMode = "pad",
    ) -> None:
        super().__init__(seed, shuffle)
        self.data_len = check_non_negative_int("data_len", data_len)
        world = World.detect(rank=rank, world_size=world_size)
        self.rank, self.world_size = world.rank, world.world_size
        self.even: EvenMode = check_choice("even", even, _EVEN_MODES)
        per_rank, rem = divmod(self.data_len, self.world_size)
        self._per_rank = per_rank + (1 if even == "pad" and rem else 0)

    @property
    def total_size(self) -> int:
        """Indices yielded per epoch across all ranks."""
        return self._per_rank * self.world_size

    @property
    def num_padded(self) -> int:
        """Repeated samples per epoch across all ranks (``even="pad"``)."""
        return max(0, self.total_size - self.data_len)

    @property
    def num_dropped(self) -> int:
        """Samples skipped per epoch across all ranks (``even="drop"``)."""
        return max(0, self.data_len - self.total_size)

    def _order(self) -> npt.NDArray[np.int64]:
        whole = _fit_length(self._epoch_order(self.data_len), self.total_size)
        return whole[self.rank :: self.world_size]

    def __len__(self) -> int:
        return self._per_rank

    def __repr__(self) -> str:
        return (
            f"DistributedEpochSampler(data_len={self.data_len}, rank={self.rank}, "
            f"world_size={self.world_size}, seed={self.seed}, shuffle={self.shuffle}, "
            f"epoch={self.epoch}, even={self.even!r}, per_rank={self._per_rank})"
        )


class ShardSampler(Sampler[int]):
    """This rank's positions ``rank, rank + world_size, …`` of ``range(data_len)``, unpadded.

    For evaluation: every sample is seen by exactly one rank, in file order; ranks may see one
    sample more or less than each other, which is fine where no gradients are synchronized
    (sum the metric's numerators and denominators across ranks).

    Args:
        data_len: Samples in the global dataset.
        world: This process's place in the job (``World.detect()`` when None).
    """

    def __init__(self, data_len: int, world: World | None = None) -> None:
        self.data_len = check_non_negative_int("data_len", data_len)
        self.world = World.detect() if world is None else world

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.world.rank, self.data_len, self.world.world_size))

    def __len__(self) -> int:
        return len(range(self.world.rank, self.data_len, self.world.world_size))

    def __repr__(self) -> str:
        return f"ShardSampler(data_len={self.data_len}, {self.world})"
