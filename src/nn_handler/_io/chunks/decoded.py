"""Every block of a dataset, decoded once, in one pass, in memory the node shares.

A random order over compressed chunks costs a whole chunk per sample (a 64-row chunk decoded to
serve one row) unless the decoded dataset stays in memory. When it fits the decoded budget
(``decoded_budget``), the chunk engine decodes all of it once, in file order, into a ``Region`` of
node memory (``storage/node_memory.py``), and every later read is one gather from it: a node's
DataLoader workers and ranks share one copy, and later epochs decode nothing.

The pass is shared by every process that reads. The region holds a state per *segment* (a run
of consecutive blocks, ~16 MiB decoded): EMPTY, LOADING (with its filler's pid) or READY. A
reader claims the next EMPTY segment in file order (under the region's lock), has the engine fill
it (the decode pool, the raw bytes read in spans, the next segment's bytes read ahead), marks it
READY and claims the next; once none is EMPTY it waits for the ones still LOADING, and takes over
any whose filler died. A fill that fails sets its segment back to EMPTY and raises in the reader:
a damaged chunk is an error in every process that reaches it, never a gap.

The budget: ``FileOptions.decoded_budget`` (``decoded_budget=`` on every dataset), else
``NN_HANDLER_DECODED_BUDGET`` (bytes; ``"4GiB"`` style accepted), else half of the memory this
process may still fill (``MemAvailable``, or less where its cgroup ends first) and the node's
decoded copies already hold. It bounds all the node's decoded copies together, checked when a
dataset is opened and again when its copy is made; a dataset whose copy another process made is
joined whatever the budget (but 0: never).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._host import usable_ram_bytes
from ..._validate import format_bytes, parse_size
from ..process import PerProcess, process_alive
from ..storage.node_memory import (
    Region,
    anonymous_region,
    node_regions_bytes,
    open_region,
    shm_dir,
    shm_room,
    sweep_at_exit,
)
from .sources import Geometry

__all__ = [
    "BUDGET_ENV",
    "DecodedBlocks",
    "decoded_budget",
    "fits_budget",
    "plan_decoded",
    "region_name",
]

BUDGET_ENV = "NN_HANDLER_DECODED_BUDGET"
_SEGMENT_BYTES = 16 * 1024**2  # decoded bytes claimed at once by one process
_WAIT_S = 0.002  # between two looks at segments another process is filling
_AHEAD = 3  # segments past the one being filled whose raw bytes are read ahead
_EMPTY, _LOADING, _READY = 0, 1, 2
_log = logging.getLogger(__name__)
_said: set[str] = set()

# ``fill(first, count, dest)``: decode blocks ``[first, first + count)`` into ``dest`` (their
# rows, C-contiguous); ``advise(first, count)``: have those blocks' raw bytes read ahead
Fill = Callable[[int, int, np.ndarray[Any, Any]], None]
Advise = Callable[[int, int], None]


def decoded_budget(option: int | None) -> int:
    """The decoded budget in bytes (see the module docstring): every decoded copy of the node.

    The default is half of the memory this process may still fill plus what the node's decoded
    copies already hold: half of it, all copies together.

    Raises:
        ValueError: ``NN_HANDLER_DECODED_BUDGET`` is set to something that is not a size.
    """
    if option is not None:
        return option
    env = os.environ.get(BUDGET_ENV, "").strip()
    if env:
        value = parse_size(BUDGET_ENV, env)
        if value < 0:
            raise ValueError(f"{BUDGET_ENV} must be a size of at least 0 bytes, got {env!r}")
        return value
    room = usable_ram_bytes()
    return 0 if room is None else (room + node_regions_bytes()) // 2


def fits_budget(size: int, option: int | None) -> bool:
    """True when ``size`` more bytes of decoded copies stay within the budget (never for 0)."""
    budget = decoded_budget(option)
    return budget > 0 and size + node_regions_bytes() <= budget


def region_name(identity: dict[str, Any], path: str, key: str, geometry: Geometry) -> str:
    """The name of a dataset's region: the same bytes, the same blocks, the same name."""
    facts = [identity, path, key, geometry.length, list(geometry.row_shape)]
    facts += [geometry.dtype.str, geometry.block_rows, 1]  # (1: this module's layout)
    text = json.dumps(facts, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


@dataclass
class _View:
    """One process's map of the region: states, fillers and the decoded blocks."""

    region: Any  # Region or the anonymous one
    states: np.ndarray[Any, Any]
    owners: np.ndarray[Any, Any]
    blocks: np.ndarray[Any, Any]  # (count, block_rows, *row_shape)
    complete: bool = False
    advised: set[int] = field(default_factory=set)  # segments whose bytes this process asked for


class DecodedBlocks:
    """Every block of one dataset, decoded, shared by the node (see the module docstring).

    Args:
        geometry: The dataset's blocks.
        name: The region's name (``region_name``), or None for memory shared only with
            processes forked from this one (a file object; no room in ``/dev/shm``).
        where: The dataset and its file, for messages.
        option: ``FileOptions.decoded_budget``: the budget is checked again when the region is
            made (other datasets may have taken memory since).
        segment_bytes: Decoded bytes of one segment (at least a block).
    """

    def __init__(
        self,
        geometry: Geometry,
        name: str | None,
        where: str = "",
        option: int | None = None,
        segment_bytes: int = _SEGMENT_BYTES,
    ) -> None:
        self.geometry = geometry
        self.name = name
        self.option = option
        self.where = where or f"dataset {geometry.key!r} of {geometry.path!r}"
        self.segment_blocks = max(1, segment_bytes // max(1, geometry.block_nbytes))
        self.segments = -(-geometry.count // self.segment_blocks)
        self._owners_at = -(-self.segments // 8) * 8
        self._arena_at = -(-(self._owners_at + 4 * self.segments) // 64) * 64
        self.nbytes = self._arena_at + geometry.count * geometry.block_nbytes
        self._tree = anonymous_region(self.nbytes) if name is None else None
        self._view: PerProcess[_View] = PerProcess()
        if name is not None:
            # the process that builds the dataset outlives its workers (which may be the only
            # users of the region, and end without releasing it): it unlinks what is left
            sweep_at_exit()

    @property
    def usable(self) -> bool:
        """False in a process that cannot reach the memory (spawned, for an unnamed region)."""
        return self.name is not None or self._tree is not None

    def ready(self) -> np.ndarray[Any, Any] | None:
        """The decoded blocks when this process knows the pass is complete, else None."""
        view = self._view.peek()
        return view.blocks if view is not None and view.complete else None

    def begun(self) -> bool:
        """True when some process has started the pass (this process then joins it at once)."""
        if self.name is not None:
            return os.path.exists(_path(self.name))
        view = self._attach()
        return view is not None and bool(np.any(view.states != _EMPTY))

    def complete(self, fill: Fill, advise: Advise) -> np.ndarray[Any, Any] | None:
        """Take part in the pass until every block is decoded; the blocks (None: no memory).

        Raises:
            Whatever ``fill`` raised for a segment (that segment is left EMPTY).
        """
        view = self._attach()
        if view is None:
            return None
        while not view.complete:
            segment = self._claim(view)
            if segment is None:
                time.sleep(_WAIT_S)  # the rest is being filled by other processes
                continue
            self._fill(view, segment, fill, advise)
        return view.blocks

    def _fill(self, view: _View, segment: int, fill: Fill, advise: Advise) -> None:
        first = segment * self.segment_blocks
        count = min(self.segment_blocks, self.geometry.count - first)
        # this segment's raw bytes and the next few EMPTY ones' are read by the kernel while
        # this one decodes (bounded: _AHEAD segments of ~16 MiB decoded), each asked for once
        for ahead in range(segment, min(self.segments, segment + 1 + _AHEAD)):
            if ahead not in view.advised and (ahead == segment or view.states[ahead] == _EMPTY):
                view.advised.add(ahead)
                start = ahead * self.segment_blocks
                advise(start, min(self.segment_blocks, self.geometry.count - start))
        try:
            fill(first, count, view.blocks[first : first + count])
        except BaseException:
            self._settle(view, segment, _EMPTY)
            raise
        self._settle(view, segment, _READY)

    def _claim(self, view: _View) -> int | None:
        """The next segment to fill (EMPTY, or LOADING by a process that died), or None."""
        with view.region.lock():
            states, owners = view.states, view.owners
            empty = np.flatnonzero(states == _EMPTY)
            if empty.size:
                segment = int(empty[0])
            else:
                loading = np.flatnonzero(states == _LOADING).tolist()
                dead = [s for s in loading if not process_alive(int(owners[s]))]
                if not dead:
                    view.complete = not loading  # (read under the lock: the blocks are whole)
                    return None
                segment = dead[0]
            states[segment], owners[segment] = _LOADING, os.getpid()
            return segment

    def _settle(self, view: _View, segment: int, state: int) -> None:
        with view.region.lock():
            view.states[segment] = state

    def _attach(self) -> _View | None:
        view = self._view.peek()
        if view is None:
            view = self._view.get_or_make(self._make_view)
        return view if view.region is not None else None

    def _make_view(self) -> _View:
        region = self._tree if self.name is None else self._open()
        if region is None:
            empty = np.zeros(0, np.uint8)
            return _View(None, empty, empty, empty.reshape(0, *self._block_shape()))
        memory = region.payload
        states = memory[: self.segments]
        owners = memory[self._owners_at : self._owners_at + 4 * self.segments].view(np.int32)
        arena = memory[self._arena_at : self.nbytes].view(self.geometry.dtype)
        view = _View(region, states, owners, arena.reshape(-1, *self._block_shape()))
        if isinstance(region, Region):
            weakref.finalize(view, region.release)
        return view

    def _open(self) -> Region | None:
        assert self.name is not None
        size = self.geometry.count * self.geometry.block_nbytes
        if not os.path.exists(_path(self.name)) and not fits_budget(size, self.option):
            _say_once(
                self.where,
                f"its decoded copy ({format_bytes(size)}) no longer fits the decoded budget "
                f"({format_bytes(decoded_budget(self.option))}, with the node's other copies): "
                "its window of chunks serves it",
            )
            return None
        try:
            region = open_region(self.name, self.nbytes)
        except OSError as exc:
            _say_once(self.where, f"its decoded copy cannot be shared ({exc})")
            return None
        if region is None:
            _say_once(
                self.where,
                f"{shm_dir()} has no room for its decoded copy ({format_bytes(self.nbytes)}, "
                f"{format_bytes(shm_room())} free): each process decodes what it reads; give "
                "the node more shared memory (docker run --shm-size=...)",
            )
        return region

    def _block_shape(self) -> tuple[int, ...]:
        return (self.geometry.block_rows, *self.geometry.row_shape)

    def __getstate__(self) -> dict[str, Any]:
        # anonymous memory reaches forked processes only: a pickled copy goes without it
        state = dict(self.__dict__)
        state["_tree"] = None
        return state


def plan_decoded(
    geometry: Geometry, name: str | None, option: int | None, where: str
) -> DecodedBlocks | None:
    """A ``DecodedBlocks`` for a dataset whose decoded size fits the budget, else None.

    Args:
        geometry: The dataset's blocks.
        name: Its region's name (``region_name``), or None: memory shared with forked
            processes only (also where the node's shared memory has no room; said once).
        option: ``FileOptions.decoded_budget``.
        where: The dataset and its file, for messages.
    """
    size = geometry.count * geometry.block_nbytes
    if decoded_budget(option) == 0:
        return None  # never, even where another process made it
    if name is not None and os.path.exists(_path(name)):
        return DecodedBlocks(geometry, name, where, option)  # another process made it: join it
    if not fits_budget(size, option):
        return None
    if name is not None and shm_room() < size:
        _say_once(
            where,
            f"{shm_dir()} has {format_bytes(shm_room())} free, less than the decoded dataset "
            f"({format_bytes(size)}): it is shared with forked workers only, not with the "
            "node's other ranks; give the node more shared memory (docker run --shm-size=...)",
        )
        name = None
    return DecodedBlocks(geometry, name, where, option)


def _path(name: str) -> str:
    return os.path.join(shm_dir(), f"nn_handler-{name}")


def _say_once(what: str, message: str) -> None:
    if what not in _said:
        _said.add(what)
        _log.warning("nn_handler: %s: %s", what, message)
