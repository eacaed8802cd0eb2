"""Epoch samplers: index order as a pure function of (seed, epoch, rank, sizes).

Every sampler here:

* draws its order from its own ``np.random.default_rng((seed, epoch))``, never the global RNG;
* reshuffles on ``set_epoch(epoch)`` and warns once if a shuffled pass repeats an epoch;
* keeps a tiny ``state_dict()`` (``seed``, ``epoch``, ``consumed`` and the sizes it was built for)
  so a run can resume mid-epoch: after ``load_state_dict`` the next pass yields exactly the
  indices that epoch had not yet yielded.

``state_dict()["consumed"]`` counts indices *handed out* by this sampler. A DataLoader with workers
prefetches ahead of training, so a training loop that checkpoints should store the number of
samples it actually trained on under ``"consumed"`` (the key names are fixed).

Training frameworks. Every sampler here is a ``torch.utils.data.DistributedSampler``, so
Lightning and Fabric leave it alone and call ``set_epoch``. Whether a framework (accelerate)
splits its batches across processes as well is the business of the ``FrameworkSplit`` each
sampler holds (``samplers/frameworks.py``); while one does, the sampler hands out the whole
epoch (the same order on every process) and moves to the next epoch on each new pass.

The world (rank, world size) is looked up when the sampler is used, unless given: a sampler made
before the process group exists (Lightning's ``ddp_spawn`` pickles it into each process) still
splits by the world it runs in.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import DistributedSampler

from ..._validate import check_count, check_int, check_non_negative_int, check_seed
from ...distributed import World, smallest_of_ranks
from .._contracts.protocols import STATE_CONSUMED, STATE_EPOCH, STATE_PHASES, STATE_SEED, Refreshes
from .._contracts.sharding import shard_world_of_length
from .elastic import Phase, check_phases, remaining_after
from .frameworks import FrameworkSplit
from .shards import EvenMode, equal_steps_option, fit_length, steps_per_rank, wrap

__all__ = [
    "DistributedEpochSampler",
    "EpochShuffleSampler",
    "ShardSampler",
    "epoch_permutation",
]


def epoch_permutation(n: int, seed: int, epoch: int) -> npt.NDArray[np.int64]:
    """Return a permutation of ``range(n)``: a pure function of ``(seed, epoch)``.

    Raises:
        TypeError / ValueError: ``n`` is not a size, or ``seed`` / ``epoch`` not in
            ``[0, 2**64)``.
    """
    n, seed, epoch = check_count("n", n), check_seed("seed", seed), check_seed("epoch", epoch)
    rng = np.random.default_rng([seed & 0xFFFFFFFFFFFFFFFF, epoch & 0xFFFFFFFFFFFFFFFF])
    return rng.permutation(n).astype(np.int64, copy=False)


class _EpochSampler(DistributedSampler[int]):
    """Shared mechanics: epochs, resumable iteration, state and the world.

    Who else splits the order (a framework) is asked of the ``FrameworkSplit`` it holds.

    ``DistributedSampler.__init__`` is not called: it needs a dataset and a process group, and
    every attribute it would set is provided here (``num_replicas``, ``rank``, ``epoch``,
    ``seed``, ``shuffle``, ``num_samples``, ``total_size``, ``drop_last``).
    """

    #: sizes a state must share with the sampler that loads it
    _state_sizes: tuple[str, ...] = ()
    #: how the epoch was split (world size, …); a state with others resumes elastically
    _state_split: tuple[str, ...] = ()

    def __init__(
        self, seed: int, shuffle: bool, rank: int | None = None, world_size: int | None = None
    ) -> None:
        self.seed = check_seed("seed", seed)
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle must be True or False, got {shuffle!r}")
        self.shuffle = shuffle
        self._rank_arg = None if rank is None else check_int("rank", rank)
        self._world_arg = None if world_size is None else check_int("world_size", world_size)
        World.detect(rank=rank, world_size=world_size)  # bad values fail here, not mid-training
        self.epoch = 0
        self._consumed = 0
        self._resume_from = 0
        self._resuming = False
        self._phases: list[Phase] = []  # earlier phases of this epoch (see samplers/elastic.py)
        self._last_pass_epoch: int | None = None
        self._epoch_set = False
        self._warned = False
        self._framework = FrameworkSplit()

    # -- the world ---------------------------------------------------------------------------

    @property
    def world(self) -> World:
        """The world this sampler runs in: the given rank / world size, else detected now."""
        return World.detect(rank=self._rank_arg, world_size=self._world_arg)

    @property
    def rank(self) -> int:
        """This process's rank (given, or detected when the sampler is used)."""
        return self.world.rank

    @rank.setter
    def rank(self, rank: int) -> None:
        World.detect(rank=rank, world_size=self._world_arg)
        self._rank_arg = rank

    @property
    def num_replicas(self) -> int:
        """The number of ranks (``DistributedSampler``'s name for the world size)."""
        return self.world.world_size

    @num_replicas.setter
    def num_replicas(self, world_size: int) -> None:
        World.detect(rank=self._rank_arg, world_size=world_size)
        self._world_arg = world_size

    # -- who else splits the order (samplers/frameworks.py) -----------------------------------

    @property
    def split_by(self) -> str | None:
        """Who splits this sampler's order across processes besides itself (``"accelerate"``)."""
        return self._framework.by

    @property
    def shards_indices(self) -> bool:
        """True when this sampler gives each of several ranks its own part of the indices."""
        raise NotImplementedError

    @property
    def serves_rank_shard(self) -> bool:
        """True when the dataset holds only this rank's shard (a framework must not split it)."""
        return False

    @property
    def generator(self) -> torch.Generator | None:
        """None, until accelerate's ``prepare()`` installs the generator it keeps in sync.

        Setting one tells the sampler that accelerate splits its batches: it then hands out the
        whole epoch (``FrameworkSplit.install``). The order never depends on this generator.

        Raises:
            ValueError: (setting) accelerate must not split this sampler's dataset.
        """
        return self._framework.generator

    @generator.setter
    def generator(self, generator: torch.Generator | None) -> None:
        self._framework.install(self, generator)

    # -- epochs and passes ---------------------------------------------------------------------

    def _order(self) -> npt.NDArray[np.int64]:
        raise NotImplementedError

    def _epoch_order(self, n: int) -> npt.NDArray[np.int64]:
        """This epoch's permutation of ``range(n)``, or ``range(n)`` when not shuffling."""
        if self.shuffle:
            return epoch_permutation(n, self.seed, self.epoch)
        return np.arange(n, dtype=np.int64)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next pass yields."""
        epoch = check_seed("epoch", epoch)
        if epoch != self.epoch:
            self._resume_from, self._resuming, self._phases = 0, False, []
        self.epoch = epoch
        if not self._resuming:
            self._epoch_starts()
        self._epoch_set = True
        self._framework.notice(self)  # accelerate calls set_epoch on every process, first

    def __iter__(self) -> Iterator[int]:
        # Nothing happens before the first index is taken: loaders (torchdata's, torch's with
        # workers) call iter() more than once per epoch, and only a pass that runs counts.
        start = self._resume_from
        self._consumed = start
        return self._pass(start)

    def _pass(self, start: int) -> Iterator[int]:
        self._framework.notice(self)
        resumed, self._resuming, self._resume_from = self._resuming, False, 0
        if not resumed:
            self._phases = []
            self._epoch_starts()
            self._begin_epoch()
        else:  # the rest of a resumed epoch: a later pass over it is a repeat
            self._last_pass_epoch, self._epoch_set = self.epoch, False
        self._check_before_pass()
        self._consumed = start
        for index in self._order()[start:].tolist():
            self._consumed += 1
            yield index

    def _begin_epoch(self) -> None:
        if self.split_by is not None and self._last_pass_epoch == self.epoch:
            if not self._epoch_set:
                # accelerate splits batch_size=None loaders without calling set_epoch
                self.epoch += 1
        else:
            self._warn_if_repeated()
        self._last_pass_epoch = self.epoch
        self._epoch_set = False

    def _check_before_pass(self) -> None:
        """Checks that need the world the pass runs in (subclasses)."""

    def _epoch_starts(self) -> None:
        """An epoch's order is about to be fixed (``set_epoch``, or a pass that begins one).

        Subclasses that follow a growing dataset take its length here (not while resuming:
        a resumed epoch keeps the length its state recorded).
        """

    def _warn_if_repeated(self) -> None:
        if self.shuffle and self._last_pass_epoch == self.epoch and not self._warned:
            self._warned = True
            warnings.warn(
                f"{type(self).__name__} starts another pass over epoch {self.epoch} in the same "
                "order: call sampler.set_epoch(epoch) before each epoch to reshuffle",
                UserWarning,
                stacklevel=4,
            )

    # -- state ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Return ``{"seed", "epoch", "consumed", <sizes>}``: plain ints (and ``phases``)."""
        state: dict[str, Any] = {
            STATE_SEED: self.seed,
            STATE_EPOCH: self.epoch,
            STATE_CONSUMED: self._consumed,
        }
        state.update({name: self._state_value(name) for name in self._state_sizes})
        state.update({name: self._state_value(name) for name in self._state_split})
        if self._state_split:
            state[STATE_PHASES] = [list(phase) for phase in self._phases]
        return state

    def _state_value(self, name: str) -> Any:
        return getattr(self, name)

    def _upgrade(self, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` in the current keys (a state written by an earlier version is converted)."""
        return _upgrade_state(state, bool(self._state_split))

    def _phase_options(self, split: dict[str, Any]) -> tuple[int, ...]:
        """The options of a phase split as ``split`` (the ``_state_split`` values) records."""
        return ()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next pass yields the rest of epoch ``state["epoch"]``.

        A state saved with the same split (world size, …) resumes exactly where it stopped. One
        saved by a sampler that split the epoch otherwise (another world size: a state saved on
        any rank of N processes, loaded on every rank of M) resumes *elastically*: the positions
        every saving rank had consumed become a finished phase, and this world splits the rest
        of the epoch (see ``samplers/elastic.py``).

        Raises:
            KeyError / ValueError: keys are missing or unknown, or the sizes differ from this
                sampler's (the state belongs to another dataset).
        """
        state = self._upgrade(state)
        expected = {STATE_SEED, STATE_EPOCH, STATE_CONSUMED, *self._state_sizes}
        if self._state_split:
            expected |= {*self._state_split, STATE_PHASES}
        if set(state) != expected:
            raise KeyError(
                f"{type(self).__name__} state must have keys {sorted(expected)}, "
                f"got {sorted(state)}"
            )
        for name in self._state_sizes:
            if state[name] != self._state_value(name):
                raise ValueError(
                    f"state was saved with {name}={state[name]!r} but this sampler has "
                    f"{name}={self._state_value(name)!r}"
                )
        consumed = check_non_negative_int(STATE_CONSUMED, state[STATE_CONSUMED])
        seed = check_int(STATE_SEED, state[STATE_SEED])
        epoch = check_non_negative_int(STATE_EPOCH, state[STATE_EPOCH])
        phases, rebased = self._phases_of(state, consumed)
        if rebased:
            consumed = 0  # another split: this world starts a new phase
        before = (self.seed, self.epoch, self._phases)
        self.seed, self.epoch, self._phases = seed, epoch, phases
        if consumed > len(self):
            self.seed, self.epoch, self._phases = before
            raise ValueError(f"consumed={consumed} exceeds the epoch length {len(self)}")
        self._resume_from = self._consumed = consumed
        self._resuming = True
        self._last_pass_epoch = None

    def _phases_of(self, state: dict[str, Any], consumed: int) -> tuple[list[Phase], bool]:
        """The finished phases of ``state``'s epoch seen from this split; True: a new phase."""
        if not self._state_split:
            return [], False
        saved = {name: state[name] for name in self._state_split}
        options = self._phase_options(saved)
        phases = check_phases(state[STATE_PHASES], len(options))
        here = {name: self._state_value(name) for name in self._state_split}
        if saved == here:
            return phases, False
        world = check_int("world_size", saved["world_size"])
        return [*phases, (world, consumed, *options)], True

    def __len__(self) -> int:
        raise NotImplementedError


def _upgrade_state(state: dict[str, Any], elastic: bool) -> dict[str, Any]:
    """Older states in today's keys, for a splitting (``elastic``) sampler.

    A state of an earlier version (with ``rank``, without ``phases``) drops ``rank``; an
    ``EpochShuffleSampler`` state over the whole data (``num_samples == data_len``: the
    handler's train sampler on one process before version 2) is a world of one.
    """
    if not elastic or STATE_PHASES in state:
        return state
    if "rank" in state:
        state = {name: value for name, value in state.items() if name != "rank"}
        return {**state, STATE_PHASES: []}
    if "num_samples" in state and state["num_samples"] == state.get("data_len"):
        state = {name: value for name, value in state.items() if name != "num_samples"}
        return {**state, "world_size": 1, STATE_PHASES: []}
    return state


class EpochShuffleSampler(_EpochSampler):
    """Shuffles a local (already sharded) dataset anew each epoch.

    It splits nothing across ranks: under DDP it is meant for a dataset that holds only this
    rank's shard (``RankMemCachedH5Dataset``, whose ``make_sampler()`` returns one). Over a
    dataset that holds every sample, every rank would see all of it; the sampler says so once
    (``UserWarning``, naming ``DistributedEpochSampler``) when a pass runs under a distributed
    world (``check_world``), unless it knows its data is rank-sharded: from ``shard_of`` (set by
    ``make_sampler()`` and by ``batched_loader``), or because a live ``RankMemCachedH5Dataset``
    of this process has ``data_len`` samples.

    Args:
        data_len: Samples in the local dataset.
        seed: Base seed; the order is a pure function of ``(seed, epoch)``.
        shuffle: False yields ``0, 1, …`` in order.
        num_samples: Samples per epoch (default ``data_len``). More pads by repeating this
            shard's own samples (cyclically in the epoch's order), fewer drops the tail; the
            counts are ``num_padded`` / ``num_dropped``. Used to give every DDP rank the same
            number of steps.
        shard_of: The world whose rank's shard the data is (``make_sampler()`` passes the
            dataset's). Running under a distributed world that differs (a dataset built before
            the process group existed) then raises, and accelerate's ``prepare()``, which would
            split the shard again, is refused.

    Raises:
        ValueError: sizes out of range; when iterated under another world than ``shard_of``;
            when accelerate's ``prepare()`` would split a rank-sharded dataset again.
    """

    _state_sizes: tuple[str, ...] = ("data_len", "num_samples")

    def __init__(
        self,
        data_len: int,
        seed: int = 0,
        shuffle: bool = True,
        *,
        num_samples: int | None = None,
        shard_of: World | None = None,
    ) -> None:
        super().__init__(seed, shuffle)
        self.data_len = check_count("data_len", data_len)
        self.num_samples = (
            self.data_len if num_samples is None else check_count("num_samples", num_samples)
        )
        if self.num_samples > 0 and self.data_len == 0:
            raise ValueError(
                f"num_samples={self.num_samples} needs padding, but data_len is 0: an empty "
                "shard has no samples to repeat"
            )
        if shard_of is not None and not isinstance(shard_of, World):
            raise TypeError(f"shard_of must be a World or None, got {shard_of!r}")
        self.shard_of = shard_of
        self._warned_whole = False

    @property
    def shards_indices(self) -> bool:
        """False: every rank draws from its own ``range(data_len)``; nothing is split."""
        return False

    @property
    def num_padded(self) -> int:
        """Samples repeated per epoch to reach ``num_samples``."""
        return max(0, self.num_samples - self.data_len)

    @property
    def num_dropped(self) -> int:
        """Samples left out per epoch to stay within ``num_samples``."""
        return max(0, self.data_len - self.num_samples)

    @property
    def total_size(self) -> int:  # type: ignore[override]  # read-only: follows from the sizes
        """Indices yielded per epoch across all ranks (``num_samples`` on each)."""
        return self.num_samples * self.num_replicas

    @property
    def drop_last(self) -> bool:  # type: ignore[override]  # read-only: follows from the sizes
        """True when ``num_samples`` leaves samples out."""
        return self.num_samples < self.data_len

    def _data_shard_world(self) -> tuple[bool, World | None]:
        """Whether the data is rank-sharded, and the world of that shard when known."""
        if self.shard_of is not None:
            return True, self.shard_of
        world = shard_world_of_length(self.data_len)
        return world is not None, world

    def check_world(
        self, world: World | None = None, *, data_is_sharded: bool | None = None
    ) -> None:
        """Check that this sampler fits ``world`` (default: detected now); every pass runs it.

        Loaders that know more (``NNHandler``) call it early with their world and what they
        know of the data (``data_is_sharded``; None: from ``shard_of`` or the live
        ``RankMemCachedH5Dataset`` of this length).

        Raises:
            ValueError: the data is the shard of another world than ``world`` (``shard_of``).

        Warns:
            UserWarning: once per sampler, when ``world`` is distributed and the data is not
                rank-sharded: every rank would then see the whole dataset.
        """
        world = World.detect() if world is None else world
        if not world.is_distributed or self.split_by is not None:
            return
        sharded, shard = self._data_shard_world()
        if data_is_sharded is not None and data_is_sharded != sharded:
            sharded, shard = data_is_sharded, None  # the caller knows better than a length
        if shard is not None and (shard.rank, shard.world_size) != (world.rank, world.world_size):
            raise ValueError(
                f"{self!r} serves the shard of rank {shard.rank} of {shard.world_size}, but runs "
                f"as rank {world.rank} of {world.world_size}: the dataset was built before this "
                "process joined the job (e.g. in the parent of Lightning's ddp_spawn). Build it "
                "in each process: in Lightning's setup() or train_dataloader(), after "
                "init_process_group() elsewhere"
            )
        if not sharded and not self._warned_whole:
            self._warned_whole = True
            warnings.warn(
                f"EpochShuffleSampler(data_len={self.data_len}) runs as rank {world.rank} of "
                f"{world.world_size} and splits nothing across ranks: unless each rank's dataset "
                "holds only its own shard, every rank trains on the whole dataset. Use "
                f"DistributedEpochSampler({self.data_len}) to give each rank its own part (or "
                "pass shard_of=World.detect() for a rank-sharded dataset of your own)",
                UserWarning,
                stacklevel=3,
            )

    def _check_before_pass(self) -> None:
        self.check_world()

    @property
    def serves_rank_shard(self) -> bool:
        """True when the data is rank-sharded (``shard_of``, or a live rank cache's length)."""
        return self._data_shard_world()[0]

    def _order(self) -> npt.NDArray[np.int64]:
        return fit_length(self._epoch_order(self.data_len), self.num_samples)

    def __len__(self) -> int:
        return self.num_samples

    def __repr__(self) -> str:
        return (
            f"EpochShuffleSampler(data_len={self.data_len}, seed={self.seed}, "
            f"shuffle={self.shuffle}, epoch={self.epoch}, num_samples={self.num_samples})"
        )


class DistributedEpochSampler(_EpochSampler):
    """Splits one global dataset across ranks: disjoint parts, equal counts, new order per epoch.

    Each epoch draws one global permutation (the same on every rank and every world size),
    makes its length a multiple of ``world_size`` (``equal_steps="pad"`` repeats samples from its
    start, ``"drop"`` cuts the tail), and gives rank ``r`` the positions ``r, r + world_size,
    …``: one sample of each global step of ``world_size``. Every rank yields the same number of
    indices, so DDP ranks run the same number of steps.

    The state holds no rank: a state saved on any rank loads on every rank. Loaded on another
    ``world_size``, it resumes elastically: the rest of the epoch (every position no saving
    rank consumed, in the permutation's order) is split among the new ranks the same way,
    padded or cut by fewer than ``world_size`` (see ``samplers/elastic.py`` and docs/samplers.md).

    Args:
        data_len: Samples in the global dataset; or the dataset itself, when it can
            ``refresh()`` (``H5LazyDataset``): its length is then taken again at the start of
            every epoch (``set_epoch``, or a pass that begins an epoch), so rows a SWMR writer
            appended join the next epoch, never the current one. A state records the epoch's
            length, and a followed sampler resumes it whatever the file holds now. With a
            ``torch.distributed`` process group of several ranks, the ranks agree on the
            smallest length any of them refreshed to (an all-reduce: every rank calls
            ``set_epoch`` and runs the pass).
        seed: Base seed, the same on every rank.
        shuffle: False keeps file order (still interleaved across ranks).
        rank: This rank (detected with ``World.detect`` when None).
        world_size: Number of ranks (detected when None).
        equal_steps: ``"pad"`` (every sample at least once per epoch; ``num_padded``
            repeats) or ``"drop"`` (no repeats; ``num_dropped`` samples skipped per epoch).
        even: The old name of ``equal_steps`` (still accepted; a ``DeprecationWarning``).
    """

    _state_sizes: tuple[str, ...] = ("data_len",)
    _state_split: tuple[str, ...] = ("world_size",)

    def __init__(
        self,
        data_len: int | Refreshes,
        *,
        seed: int = 0,
        shuffle: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
        equal_steps: EvenMode = "pad",
        even: EvenMode | None = None,
    ) -> None:
        super().__init__(seed, shuffle, rank=rank, world_size=world_size)
        #: the dataset whose length each epoch takes (None: ``data_len`` is fixed)
        self.followed: Refreshes | None = data_len if isinstance(data_len, Refreshes) else None
        self.data_len = check_count(
            "data_len", data_len if self.followed is None else len(self.followed)
        )
        self.equal_steps: EvenMode = equal_steps_option(equal_steps, even, type(self).__name__)
        self._remaining_cache: tuple[Any, npt.NDArray[np.int64]] | None = None

    @property
    def world_size(self) -> int:
        """Number of ranks (given, or detected when the sampler is used)."""
        return self.world.world_size

    @world_size.setter
    def world_size(self, world_size: int) -> None:
        self.num_replicas = world_size

    def _layout(self) -> tuple[int, int]:
        """``(rank, world_size)`` this sampler splits by: ``(0, 1)`` while a framework splits."""
        if self.split_by is not None:
            return 0, 1
        world = self.world
        return world.rank, world.world_size

    @property
    def shards_indices(self) -> bool:
        """True when this sampler gives each of several ranks its own part of the indices."""
        return self._layout()[1] > 1

    def _state_value(self, name: str) -> Any:
        if name == "world_size":  # the world the order is split by (1 while accelerate splits)
            return self._layout()[1]
        return super()._state_value(name)

    @property
    def _left(self) -> int:
        """Samples of the epoch this world splits: all, or what earlier phases left."""
        return len(self._remaining()) if self._phases else self.data_len

    @property
    def _per_rank(self) -> int:
        return steps_per_rank(self._left, self._layout()[1], self.equal_steps)

    def _base_order(self) -> npt.NDArray[np.int64]:
        """The epoch's order of the whole dataset: a function of seed, epoch and data only."""
        return self._epoch_order(self.data_len)

    def _remaining(self) -> npt.NDArray[np.int64]:
        """What the epoch's earlier phases (on other worlds) left, in the base order."""
        key = (self.seed, self.epoch, self.data_len, tuple(self._phases))
        cached = self._remaining_cache
        if cached is None or cached[0] != key:
            left = remaining_after(self._base_order(), self._phases, self._positions)
            cached = self._remaining_cache = (key, left)
        return cached[1]

    def _positions(
        self,
        order: npt.NDArray[np.int64],
        phase: int,
        world_size: int,
        rank: int,
        options: tuple[int, ...],
    ) -> npt.NDArray[np.int64]:
        """Rank's positions in ``order`` for one phase: ``rank, rank + world_size, …``.

        Each global step of ``world_size`` positions gives one to every rank; the last step
        pads (positions past the end wrap to the start) or is dropped, per ``equal_steps``.
        """
        count = steps_per_rank(len(order), world_size, self.equal_steps)
        return np.arange(rank, count * world_size, world_size, dtype=np.int64)

    def _phase_options(self, split: dict[str, Any]) -> tuple[int, ...]:
        return ()

    def _epoch_starts(self) -> None:
        if self.followed is not None:
            self.data_len = self._length_now()

    def _length_now(self) -> int:
        """The followed dataset's length, refreshed; it may only grow."""
        assert self.followed is not None
        now = check_count("len(dataset)", self.followed.refresh())
        if self.world.world_size > 1:
            # each rank refreshed its own view, perhaps either side of an append: the epoch
            # takes the length every rank can see, so no row is served twice or missed
            now = smallest_of_ranks(now)
        if now < self.data_len:
            raise ValueError(
                f"the dataset has {now} samples now, fewer than the {self.data_len} of the "
                "last epoch: its file shrank; build the dataset and the sampler again"
            )
        return now

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the epoch ``state`` records (see ``_EpochSampler.load_state_dict``).

        A sampler that follows a dataset takes the epoch's length from the state (the file
        may have grown since it was saved: the appended rows wait for the next epoch).

        Raises:
            KeyError / ValueError: as the base class; ValueError also when the dataset now
                holds fewer samples than the state's epoch.
        """
        before = self.data_len
        saved = state.get("data_len") if isinstance(state, dict) else None
        if self.followed is not None and saved is not None:
            saved_len, now = check_count("data_len", saved), self._length_now()
            if saved_len > now:
                raise ValueError(
                    f"state was saved with data_len={saved!r} but the dataset holds {now} "
                    "samples now: its file shrank, or the state belongs to another dataset"
                )
            self.data_len = saved_len
        try:
            super().load_state_dict(state)
        except BaseException:
            self.data_len = before
            raise

    def _phases_of(self, state: dict[str, Any], consumed: int) -> tuple[list[Phase], bool]:
        phases, rebased = super()._phases_of(state, consumed)
        if rebased:  # the saving world's phase must hold what it says it consumed
            *earlier, (world, _, *_) = phases
            left = remaining_after(self._base_order_of(state), earlier, self._positions)
            limit = steps_per_rank(len(left), world, self.equal_steps)
            if consumed > limit:
                raise ValueError(
                    f"consumed={consumed} exceeds the epoch length {limit} of the "
                    f"world_size={world} that saved the state"
                )
        return phases, rebased

    def _base_order_of(self, state: dict[str, Any]) -> npt.NDArray[np.int64]:
        seed, epoch = self.seed, self.epoch
        self.seed, self.epoch = state[STATE_SEED], state[STATE_EPOCH]
        try:
            return self._base_order()
        finally:
            self.seed, self.epoch = seed, epoch

    @property
    def num_samples(self) -> int:  # type: ignore[override]  # read-only: follows from the sizes
        """Indices this rank yields per epoch (``len(self)``)."""
        return self._per_rank

    @property
    def total_size(self) -> int:  # type: ignore[override]  # read-only: follows from the sizes
        """Indices yielded per epoch across all ranks."""
        return self._per_rank * self._layout()[1]

    @property
    def drop_last(self) -> bool:  # type: ignore[override]  # read-only: follows from the sizes
        """True with ``equal_steps="drop"``."""
        return self.equal_steps == "drop"

    @property
    def even(self) -> EvenMode:
        """The old name of ``equal_steps`` (read-only)."""
        return self.equal_steps

    @property
    def num_padded(self) -> int:
        """Repeated samples per epoch (or resumed rest of one) across all ranks (``"pad"``)."""
        return max(0, self.total_size - self._left)

    @property
    def num_dropped(self) -> int:
        """Samples skipped per epoch (or resumed rest of one) across all ranks (``"drop"``)."""
        return max(0, self._left - self.total_size)

    def _order(self) -> npt.NDArray[np.int64]:
        rank, world_size = self._layout()
        left = self._remaining()
        options = self._phase_options({n: self._state_value(n) for n in self._state_split})
        mine = self._positions(left, len(self._phases), world_size, rank, options)
        return left[wrap(mine, len(left))]

    def __len__(self) -> int:
        return self._per_rank

    def __repr__(self) -> str:
        return (
            f"DistributedEpochSampler(data_len={self.data_len}, rank={self.rank}, "
            f"world_size={self.world_size}, seed={self.seed}, shuffle={self.shuffle}, "
            f"epoch={self.epoch}, equal_steps={self.equal_steps!r}, per_rank={self._per_rank})"
        )


class ShardSampler(DistributedSampler[int]):
    """This rank's positions ``rank, rank + world_size, …`` of ``range(data_len)``, unpadded.

    For evaluation: every sample is seen by exactly one rank, in file order; ranks may see one
    sample more or less than each other, which is fine where no gradients are synchronized
    (sum the metric's numerators and denominators across ranks). A ``DistributedSampler``, so
    Lightning does not split it again.

    Args:
        data_len: Samples in the global dataset.
        world: This process's place in the job (``World.detect()`` when None).
    """

    def __init__(self, data_len: int, world: World | None = None) -> None:
        # DistributedSampler.__init__ is not called (it needs a process group); see _EpochSampler
        self.data_len = check_count("data_len", data_len)
        self.world = World.detect() if world is None else world
        self.num_replicas, self.rank = self.world.world_size, self.world.rank
        self.epoch, self.seed, self.shuffle, self.drop_last = 0, 0, False, False
        self.num_samples = len(self)
        self.total_size = self.data_len

    @property
    def shards_indices(self) -> bool:
        """True on several ranks: each takes its own positions."""
        return self.world.world_size > 1

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.world.rank, self.data_len, self.world.world_size))

    def __len__(self) -> int:
        return len(range(self.world.rank, self.data_len, self.world.world_size))

    def __repr__(self) -> str:
        return f"ShardSampler(data_len={self.data_len}, {self.world})"
