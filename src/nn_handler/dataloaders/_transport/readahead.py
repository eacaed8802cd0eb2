"""A sampler wrapper that announces each coming batch to the dataset before it is read.

A dataset that decodes chunks ahead (``ReadsAhead``: ``read_ahead(indices)``) keeps its decode
threads busy when it learns the next batches early. ``batched_loader``'s loader is a plain
``DataLoader(view, batch_size, sampler=...)`` (what Lightning and accelerate rebuild
correctly), so the announcement is made by the index sampler: ``ReadaheadSampler`` draws
``ahead`` batches of indices from the sampler it wraps, hands each to ``read_ahead`` and then
yields them one by one, in the same order, cut at the same batch borders as the DataLoader
cuts them.

Everything else is the wrapped sampler's: ``set_epoch``, ``load_state_dict``, ``len``, its
``generator`` (accelerate's hook) and any other attribute; ``state_dict()["consumed"]`` leaves
out the indices drawn ahead but not yet handed out. Around a ``DistributedSampler`` the wrapper
is one too, so Lightning leaves it alone as it would the sampler itself.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DistributedSampler, Sampler

from .._contracts.protocols import STATE_CONSUMED, Resumable, splits_across_ranks

__all__ = ["ReadaheadSampler"]


class ReadaheadSampler(Sampler[int]):
    """Yield ``sampler``'s indices, announcing each batch ``ahead`` batches before it is read.

    Args:
        sampler: The sampler of single indices to wrap.
        read_ahead: Called with each batch's indices when it is drawn.
        ahead: Batches announced ahead of the one being read.
        batch_size: The loader's batch size (the borders ``read_ahead`` sees).
    """

    def __new__(cls, sampler: Any = None, *args: Any, **kwargs: Any) -> ReadaheadSampler:
        """Create the wrapper (the distributed flavour around a ``DistributedSampler``)."""
        if cls is ReadaheadSampler and isinstance(sampler, DistributedSampler):
            cls = _DistributedReadahead
        return super().__new__(cls)

    def __init__(
        self, sampler: Sampler[int], read_ahead: Callable[[Any], None], ahead: int, batch_size: int
    ) -> None:
        self.sampler = sampler
        self.read_ahead = read_ahead
        self.ahead = max(0, int(ahead))
        self.batch_size = int(batch_size)
        self._held = 0  # drawn from the sampler, not yet handed out

    def __iter__(self) -> Iterator[int]:
        source = iter(self.sampler)
        queued: deque[list[int]] = deque()
        self._held = 0
        try:
            while True:
                while len(queued) <= self.ahead:
                    batch = list(itertools.islice(source, self.batch_size))
                    if not batch:
                        break
                    self.read_ahead(batch)
                    queued.append(batch)
                    self._held += len(batch)
                if not queued:
                    return
                for index in queued.popleft():
                    self._held -= 1
                    yield index
        finally:
            self._held = 0

    def __len__(self) -> int:
        return len(self.sampler)  # type: ignore[arg-type]

    @property
    def state_dict(self) -> Callable[[], dict[str, Any]]:
        """The wrapped sampler's ``state_dict``, ``consumed`` without the indices drawn ahead.

        Absent (``AttributeError``) when the wrapped sampler keeps no state, so that
        ``isinstance(wrapper, Resumable)`` says what the wrapped sampler is.
        """
        sampler = self.sampler
        if not isinstance(sampler, Resumable):
            raise AttributeError(f"{type(sampler).__name__} keeps no state")

        def state_dict() -> dict[str, Any]:
            state = dict(sampler.state_dict())
            if self._held and isinstance(state.get(STATE_CONSUMED), int):
                state[STATE_CONSUMED] -= self._held
            return state

        return state_dict

    @property
    def generator(self) -> torch.Generator | None:
        """The wrapped sampler's ``generator`` (accelerate installs one through here)."""
        return self.sampler.generator  # type: ignore[attr-defined, no-any-return]

    @generator.setter
    def generator(self, generator: torch.Generator | None) -> None:
        self.sampler.generator = generator  # type: ignore[attr-defined]

    @property
    def shards_indices(self) -> bool:
        """Whether the wrapped sampler gives each rank its own part of the indices."""
        return splits_across_ranks(self.sampler)

    def __getattr__(self, name: str) -> Any:
        if name == "sampler" or name.startswith("__"):  # unpickling, copy: not forwarded
            raise AttributeError(name)
        return getattr(self.sampler, name)

    def __repr__(self) -> str:
        return f"ReadaheadSampler({self.sampler!r}, ahead={self.ahead})"


class _DistributedReadahead(ReadaheadSampler, DistributedSampler[int]):
    """A ``ReadaheadSampler`` around a ``DistributedSampler``: distributed itself.

    ``DistributedSampler.__init__`` is not called; its attributes are the wrapped sampler's.
    """

    @property
    def rank(self) -> int:  # type: ignore[override]  # read-only: the wrapped sampler's
        """The wrapped sampler's rank."""
        return int(self.sampler.rank)  # type: ignore[attr-defined]

    @property
    def num_replicas(self) -> int:  # type: ignore[override]  # read-only: the wrapped sampler's
        """The wrapped sampler's number of ranks."""
        return int(self.sampler.num_replicas)  # type: ignore[attr-defined]

    @property
    def epoch(self) -> int:  # type: ignore[override]  # read-only: the wrapped sampler's
        """The wrapped sampler's epoch."""
        return int(self.sampler.epoch)  # type: ignore[attr-defined]

    def set_epoch(self, epoch: int) -> None:
        """The wrapped sampler's ``set_epoch``."""
        self.sampler.set_epoch(epoch)  # type: ignore[attr-defined]
