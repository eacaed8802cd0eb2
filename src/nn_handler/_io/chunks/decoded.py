"""Every block of a dataset, decoded once, in one pass, in memory the node shares.

A random order over compressed chunks costs a whole chunk per sample (a 64-row chunk decoded to
serve one row) unless the decoded dataset stays in memory. When it fits the decoded budget
(``decoded_budget``), the chunk engine decodes all of it once, in file order, into a ``Region`` of
node memory (``storage/node_memory.py``), and every later read is one gather from it: a node's
DataLoader workers and ranks share one copy, and later epochs decode nothing.

A region is found by a name that is a hash of its *description*: the source file's identity
(device, inode, size, mtime and ctime in ns), the dataset (key, shape, dtype, filters) and this
module's layout. The region's header holds the description itself and is compared byte for byte
before the region is used; every read also checks that the file is still the one described
(``H5Source.check_unchanged``), so a region never serves another version of the file.

The pass is shared by every process that reads. The region holds a state per *segment* (a run
of consecutive blocks, ~16 MiB decoded): EMPTY, LOADING (with its filler) or READY. A reader
claims the next EMPTY segment in file order (under the region's lock), has the engine fill it
(the decode pool, the raw bytes read in spans, the next segment's bytes read ahead), marks it
READY and claims the next; once none is EMPTY it waits for the ones still LOADING. A filler is
known by a lock it holds on the region (by its pid and start time in memory shared with forked
processes only), never by a bare pid: a segment whose filler is gone is taken over at once, and
one that makes no progress for ``STALL_S`` seconds (a filler stopped, or stuck on a dead disk)
is filled by the waiting reader itself, said once. A fill that fails sets its segment back to
EMPTY and raises in the reader: a damaged chunk is an error in every process that reaches it,
never a gap.

The budget: ``FileOptions.decoded_budget`` (``decoded_budget=`` on every dataset), else
``NN_HANDLER_DECODED_BUDGET`` (bytes; ``"4GiB"`` style accepted), else half of the memory this
process may still fill (``MemAvailable``, or less where its cgroup ends first) and what the
user's live decoded copies on the node already hold. It bounds all of them together, checked
when a dataset is opened and again when its copy is made; a dataset whose copy another process
made is joined whatever the budget (but 0: never). Regions of other users, and of jobs that are
gone, never count.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._host import usable_ram_bytes
from ..._validate import format_bytes, parse_size
from ..notices import say_once
from ..process import PerProcess, process_stamp
from ..storage.node_memory import (
    Region,
    anonymous_region,
    node_regions_bytes,
    open_region,
    pin,
)
from ..storage.shm_folder import (
    NoRoomError,
    RegionError,
    region_exists,
    shm_dir,
    shm_room,
    usable_folder,
)
from .sources import Geometry

__all__ = [
    "BUDGET_ENV",
    "STALL_S",
    "DecodedBlocks",
    "decoded_budget",
    "fits_budget",
    "plan_decoded",
    "source_facts",
]

BUDGET_ENV = "NN_HANDLER_DECODED_BUDGET"
#: seconds a reader waits without progress on segments other processes fill, then fills them
STALL_S = 30.0
_SEGMENT_BYTES = 16 * 1024**2  # decoded bytes claimed at once by one process
_WAIT_S = 0.002  # between two looks at segments another process is filling
_AHEAD = 3  # segments past the one being filled whose raw bytes are read ahead
_LAYOUT = 2  # this module's layout of a region (in every description)
_EMPTY, _LOADING, _READY = 0, 1, 2
_NO_ROOM = "the shared memory is too small"  # the key of that notice, whichever dataset says it

# ``fill(first, count, dest)``: decode blocks ``[first, first + count)`` into ``dest`` (their
# rows, C-contiguous); ``advise(first, count)``: have those blocks' raw bytes read ahead
Fill = Callable[[int, int, np.ndarray[Any, Any]], None]
Advise = Callable[[int, int], None]


def decoded_budget(option: int | None) -> int:
    """The decoded budget in bytes (see the module docstring): every decoded copy of the node.

    The default is half of the memory this process may still fill plus what the user's live
    decoded copies on the node already hold: half of it, all copies together.

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


def source_facts(
    identity: dict[str, Any], path: str, key: str, filters: list[Any]
) -> dict[str, Any]:
    """What a region's description says of its source: the file as it is and the dataset."""
    return {"file": {"path": path, **identity}, "key": key, "filters": filters}


@dataclass
class _View:
    """One process's map of the region: states, fillers and the decoded blocks."""

    region: Any  # Region or the anonymous one
    states: np.ndarray[Any, Any]
    pids: np.ndarray[Any, Any]  # each LOADING segment's filler: pid and start time
    started: np.ndarray[Any, Any]
    blocks: np.ndarray[Any, Any]  # (count, block_rows, *row_shape)
    complete: bool = False
    advised: set[int] = field(default_factory=set)  # segments whose bytes this process asked for


class _Progress:
    """Whether the segments' states have changed in the last ``STALL_S`` seconds."""

    def __init__(self, states: np.ndarray[Any, Any]) -> None:
        self._states = states
        self._seen = states.tobytes()
        self._since = time.monotonic()

    def stalled(self) -> bool:
        now, seen = time.monotonic(), self._states.tobytes()
        if seen != self._seen:
            self._seen, self._since = seen, now
        return now - self._since > STALL_S


class DecodedBlocks:
    """Every block of one dataset, decoded, shared by the node (see the module docstring).

    Args:
        geometry: The dataset's blocks.
        facts: What the region's description says of the source (``source_facts``), or None
            for memory shared only with processes forked from this one (a file object; no
            room in ``/dev/shm``).
        where: The dataset and its file, for messages.
        option: ``FileOptions.decoded_budget``: the budget is checked again when the region is
            made (other datasets may have taken memory since).
        segment_bytes: Decoded bytes of one segment (at least a block).
    """

    def __init__(
        self,
        geometry: Geometry,
        facts: dict[str, Any] | None,
        where: str = "",
        option: int | None = None,
        segment_bytes: int = _SEGMENT_BYTES,
    ) -> None:
        self.geometry = geometry
        self.option = option
        self.where = where or f"dataset {geometry.key!r} of {geometry.path!r}"
        self.segment_blocks = max(1, segment_bytes // max(1, geometry.block_nbytes))
        self.segments = -(-geometry.count // self.segment_blocks)
        self._pids_at = -(-self.segments // 8) * 8
        self._started_at = self._pids_at + -(-4 * self.segments // 8) * 8
        self._arena_at = -(-(self._started_at + 8 * self.segments) // 64) * 64
        self.nbytes = self._arena_at + geometry.count * geometry.block_nbytes
        self.description = None if facts is None else self._describe(facts)
        self.name = None if self.description is None else _name_of(self.description)
        self._tree = anonymous_region(self.nbytes) if facts is None else None
        self._view: PerProcess[_View] = PerProcess()
        # the process that builds the dataset keeps its region while the dataset lives there:
        # DataLoader workers that end with each epoch find it again the next epoch
        self._pin = None if self.name is None else pin(self.name)
        if self._pin is not None:
            weakref.finalize(self, self._pin.release)

    def _describe(self, facts: dict[str, Any]) -> bytes:
        g = self.geometry
        layout = {
            "shape": [g.length, *g.row_shape], "dtype": g.dtype.str, "block_rows": g.block_rows,
            "segment_blocks": self.segment_blocks, "nbytes": self.nbytes, "version": _LAYOUT,
        }  # fmt: skip
        return json.dumps({"source": facts, "layout": layout}, sort_keys=True).encode()

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
            return region_exists(self.name)
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
        progress = _Progress(view.states)
        while not view.complete:
            segment = self._claim(view, progress.stalled())
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

    def _claim(self, view: _View, stalled: bool = False) -> int | None:
        """The next segment to fill (EMPTY, or LOADING by a filler gone or stalled), or None."""
        with view.region.lock():
            states = view.states
            empty = np.flatnonzero(states == _EMPTY)
            if empty.size:
                segment = int(empty[0])
            else:
                loading = np.flatnonzero(states == _LOADING).tolist()
                gone = [s for s in loading if not self._filler_alive(view, s)]
                if not gone and not (loading and stalled):
                    view.complete = not loading  # (read under the lock: the blocks are whole)
                    return None
                segment = gone[0] if gone else loading[0]
                if not gone:
                    self._say_stalled(view, segment)
            states[segment] = _LOADING
            view.pids[segment], view.started[segment] = process_stamp()
            view.region.hold_fill(segment)
            return segment

    def _filler_alive(self, view: _View, segment: int) -> bool:
        pid, started = int(view.pids[segment]), int(view.started[segment])
        return bool(view.region.filler_alive(segment, pid, started))

    def _settle(self, view: _View, segment: int, state: int) -> None:
        """Mark ``segment`` READY, or EMPTY again unless another filler took it over."""
        with view.region.lock():
            mine = (int(view.pids[segment]), int(view.started[segment])) == process_stamp()
            if state == _READY or mine:
                view.states[segment] = state
            view.region.drop_fill(segment)

    def _say_stalled(self, view: _View, segment: int) -> None:
        _say_once(
            f"{self.where} stalled",
            f"segment {segment} of its decoded copy made no progress for {STALL_S:.0f} s while "
            f"process {int(view.pids[segment])} filled it: this process decodes it itself",
        )

    def _attach(self) -> _View | None:
        view = self._view.peek()
        if view is None:
            view = self._view.get_or_make(self._make_view)
        return view if view.region is not None else None

    def _make_view(self) -> _View:
        region = self._tree if self.name is None else self._open()
        if region is None:
            empty = np.zeros(0, np.uint8)
            blocks = empty.reshape(0, *self._block_shape())
            return _View(None, empty, empty, empty, blocks)
        memory, segments = region.payload, self.segments
        states = memory[:segments]
        pids = memory[self._pids_at : self._pids_at + 4 * segments].view(np.int32)
        started = memory[self._started_at : self._started_at + 8 * segments].view(np.int64)
        arena = memory[self._arena_at : self.nbytes].view(self.geometry.dtype)
        view = _View(region, states, pids, started, arena.reshape(-1, *self._block_shape()))
        if isinstance(region, Region):
            weakref.finalize(view, region.release)
        return view

    def _open(self) -> Region | None:
        assert self.name is not None
        assert self.description is not None
        size = self.geometry.count * self.geometry.block_nbytes
        if not region_exists(self.name) and not fits_budget(size, self.option):
            others = node_regions_bytes()
            _say_once(
                self.where,
                f"its decoded copy ({format_bytes(size)}) no longer fits the decoded budget "
                f"({format_bytes(decoded_budget(self.option))}) beside the other decoded copies "
                f"this user holds on the node ({format_bytes(others)}): its window of chunks "
                "serves it",
            )
            return None
        try:
            return open_region(self.name, self.nbytes, self.description)
        except NoRoomError as exc:
            _say_no_room(
                f"{self.where}: its decoded copy cannot be shared ({exc}): its window of chunks "
                "serves it, and the same for every decoded copy that does not fit",
                size,
            )
        except RegionError as exc:
            _say_once(
                self.where,
                f"its decoded copy cannot be shared ({exc}): its window of chunks serves it",
            )
        except OSError as exc:
            _say_once(self.where, f"its decoded copy cannot be shared ({exc})")
        return None

    def _block_shape(self) -> tuple[int, ...]:
        return (self.geometry.block_rows, *self.geometry.row_shape)

    def __getstate__(self) -> dict[str, Any]:
        # anonymous memory reaches forked processes only: a pickled copy goes without it
        state = dict(self.__dict__)
        state["_tree"] = None
        state["_pin"] = None  # (the process that built the dataset keeps the region)
        return state


def plan_decoded(
    geometry: Geometry, facts: dict[str, Any] | None, option: int | None, where: str
) -> DecodedBlocks | None:
    """A ``DecodedBlocks`` for a dataset whose decoded size fits the budget, else None.

    Args:
        geometry: The dataset's blocks.
        facts: What its region's description says of the source (``source_facts``), or None:
            memory shared with forked processes only (also where the node's shared memory has
            no room, or the user's folder of regions cannot be trusted; said once).
        option: ``FileOptions.decoded_budget``.
        where: The dataset and its file, for messages.
    """
    size = geometry.count * geometry.block_nbytes
    if decoded_budget(option) == 0:
        return None  # never, even where another process made it
    named = None if facts is None else DecodedBlocks(geometry, facts, where, option)
    if named is not None and region_exists(str(named.name)):
        return named  # another process made it: join it
    if not fits_budget(size, option):
        return None
    if named is not None and _shareable(size, where):
        return named
    return DecodedBlocks(geometry, None, where, option)


def _shareable(size: int, where: str) -> bool:
    """True when the node can share a decoded copy of ``size`` bytes by name (else said once)."""
    unusable = usable_folder()
    if unusable is not None:
        _say_once(
            where,
            "its decoded copy is shared with forked workers only, not with the node's other "
            f"processes: {unusable}",
        )
        return False
    room = shm_room()
    if room < size:
        _say_no_room(
            f"{shm_dir()} has {format_bytes(room)} free, less than the decoded copy of {where} "
            f"({format_bytes(size)}): decoded copies that do not fit are kept in the memory of "
            "the process that reads them (shared with the DataLoader workers it forks), not once "
            "for the node",
            size,
        )
        return False
    return True


def _name_of(description: bytes) -> str:
    return hashlib.blake2b(description, digest_size=16).hexdigest()


def _say_once(what: str, message: str) -> None:
    """Say ``message`` about ``what`` (the dataset) once per process."""
    say_once(what, f"{what}: {message}")


def _say_no_room(message: str, size: int) -> None:
    """Say that the shared memory is too small, once for the whole job, with how to grow it.

    One line whichever dataset, process or DataLoader worker finds it first (``notices.py``):
    they all find the same small ``/dev/shm``. The size asked for holds ``size`` more bytes
    beside what is in use, rounded up, plus a GiB.
    """
    wanted_gib = -(-(_shm_in_use() + size) // 1024**3) + 1
    say_once(
        _NO_ROOM,
        f"{message}; give the node more shared memory: `docker run --shm-size={wanted_gib}g ...`",
        job=True,
    )


def _shm_in_use() -> int:
    """Bytes in use in ``shm_dir()`` (0 where it cannot be asked)."""
    try:
        st = os.statvfs(shm_dir())
    except OSError:
        return 0
    return int((st.f_blocks - st.f_bavail) * st.f_frsize)
