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

Decoding is shared by every process that reads, and no read waits for more than its own
blocks: a batch decodes, straight into the region, the blocks no process has decoded yet, waits
for those another process is decoding, and gathers (``block_claims.py``: claims per block,
fillers known by what the kernel vouches for, every wait bounded). The first batch therefore
costs its own chunks, not the whole dataset; over the first epoch every block is decoded once,
by whichever process first needs it, and every read after that is one gather. A fill that fails
leaves its blocks EMPTY and raises in the reader: a damaged chunk is an error in every process
that reaches it, never a gap. The process that made the region shows how much of it is decoded
(a progress bar on a terminal for a copy of ``PROGRESS_BYTES`` or more, off with
``NN_HANDLER_PROGRESS=0``) and logs one line once every block is (``FillReport``).

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
import shutil
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._host import usable_ram_bytes
from ..._validate import format_bytes, parse_size
from ..indices import consecutive_runs
from ..notice_board import say_once_for_job
from ..notices import say_once
from ..platform import off
from ..process import PerProcess
from ..storage.node_memory import (
    NAMED,
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
from .block_claims import STALL_S, BlockClaims, Progress
from .block_fillers import Geometry
from .fill_report import FillReport, made_here

__all__ = [
    "BUDGET_ENV",
    "DecodedBlocks",
    "decoded_budget",
    "fits_budget",
    "plan_decoded",
    "source_facts",
]

BUDGET_ENV = "NN_HANDLER_DECODED_BUDGET"
_WAIT_S = 0.002  # between two looks at blocks another process is decoding
_LAYOUT = 3  # this module's layout of a region (in every description)
_NO_ROOM = "the shared memory is too small"  # the key of that notice, whichever dataset says it

# ``fill(ids, blocks)``: decode blocks ``ids`` (sorted, unique) into ``blocks[ids]``
Fill = Callable[[np.ndarray[Any, Any], np.ndarray[Any, Any]], None]


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
    if room is None:  # no /proc/meminfo (macOS, Windows): nothing to take half of
        off(
            "/proc/meminfo",
            f"no decoded budget unless set (decoded_budget=, or {BUDGET_ENV}): compressed "
            "datasets are read through their chunk windows",
        )
        return 0
    return (room + node_regions_bytes()) // 2


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
    """One process's map of the region: its claims and the decoded blocks."""

    region: Any  # Region or the anonymous one (None: no memory)
    claims: BlockClaims | None
    blocks: np.ndarray[Any, Any]  # (count, block_rows, *row_shape)
    report: FillReport | None = None
    complete: bool = False


class DecodedBlocks:
    """Every block of one dataset, decoded once, shared by the node (see the module docstring).

    Args:
        geometry: The dataset's blocks.
        facts: What the region's description says of the source (``source_facts``), or None
            for memory shared only with processes forked from this one (a file object; no
            room in ``/dev/shm``).
        where: The dataset and its file, for messages.
        option: ``FileOptions.decoded_budget``: the budget is checked again when the region is
            made (other datasets may have taken memory since).
    """

    def __init__(
        self,
        geometry: Geometry,
        facts: dict[str, Any] | None,
        where: str = "",
        option: int | None = None,
    ) -> None:
        self.geometry = geometry
        self.option = option
        self.where = where or f"dataset {geometry.key!r} of {geometry.path!r}"
        count = geometry.count
        self._pids_at = 8 + -(-count // 8) * 8  # (the settle counter first, then the states)
        self._started_at = self._pids_at + -(-4 * count // 8) * 8
        self._arena_at = -(-(self._started_at + 8 * count) // 64) * 64
        self.nbytes = self._arena_at + count * geometry.block_nbytes
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
            "nbytes": self.nbytes, "version": _LAYOUT,
        }  # fmt: skip
        return json.dumps({"source": facts, "layout": layout}, sort_keys=True).encode()

    @property
    def usable(self) -> bool:
        """False in a process that cannot reach the memory (spawned, for an unnamed region)."""
        return self.name is not None or self._tree is not None

    def ready(self) -> np.ndarray[Any, Any] | None:
        """The decoded blocks when this process knows every one is decoded, else None."""
        view = self._view.peek()
        return view.blocks if view is not None and view.complete else None

    def begun(self) -> bool:
        """True when some process has begun decoding (this process then joins at once)."""
        if self.name is not None:
            return region_exists(self.name)
        view = self._attach()
        return view is not None and view.claims is not None and view.claims.ready() > 0

    def serve(self, ids: np.ndarray[Any, Any], fill: Fill) -> np.ndarray[Any, Any] | None:
        """Every block of ``ids`` (sorted, unique) decoded: the blocks (None: no memory).

        What no process has decoded yet is decoded here, now (``fill``), and kept for every
        process; what another process is decoding is waited for (see ``block_claims.py``).

        Raises:
            Whatever ``fill`` raised (its blocks are left EMPTY).
        """
        view = self._attach()
        if view is None or view.claims is None:
            return None
        if view.complete:
            return view.blocks
        claims, progress = view.claims, Progress(view.claims)
        while True:
            stalled = progress.stalled()
            if stalled:
                self._say_stalled(claims, ids)
            mine, others = claims.claim(ids, stalled)
            if mine.size and not self._fill(view, mine, fill):
                return None  # the node's shared memory is full (said once): no copy here
            if not others:
                break
            time.sleep(_WAIT_S)  # the rest is being decoded by other processes
        self._note_done(view)
        return view.blocks

    def _fill(self, view: _View, ids: np.ndarray[Any, Any], fill: Fill) -> bool:
        """Decode blocks ``ids`` (claimed) into the copy; False when it has no room for them."""
        assert view.claims is not None
        try:
            self._reserve(view, ids)
            fill(ids, view.blocks)
        except NoRoomError as exc:
            view.claims.settle(ids, ok=False)
            self._view.pop()  # (this process reads through its window from now on)
            _say_no_room(
                f"{self.where}: its decoded copy ran out of shared memory ({exc}): its window "
                "of chunks serves it",
                self.geometry.count * self.geometry.block_nbytes,
            )
            return False
        except BaseException:
            view.claims.settle(ids, ok=False)
            raise
        view.claims.settle(ids, ok=True)
        return True

    def _reserve(self, view: _View, ids: np.ndarray[Any, Any]) -> None:
        """Give the blocks ``ids`` their memory before they are written (runs at once)."""
        size = self.geometry.block_nbytes
        for first, count in consecutive_runs(ids):
            view.region.reserve(self._arena_at + first * size, count * size)

    def _note_done(self, view: _View) -> None:
        """Count what is decoded now: show it (``FillReport``); complete once all are."""
        assert view.claims is not None
        ready = view.claims.ready()
        if view.report is not None:
            view.report.update(ready)
        view.complete = ready == self.geometry.count

    def _say_stalled(self, claims: BlockClaims, ids: np.ndarray[Any, Any]) -> None:
        _say_once(
            f"{self.where} stalled",
            f"no block of its decoded copy was decoded for {STALL_S:.0f} s while process(es) "
            f"{claims.fillers(ids)} decoded blocks this read needs: this process decodes them "
            "itself",
        )

    def _attach(self) -> _View | None:
        view = self._view.peek()
        if view is None:
            view = self._view.get_or_make(self._make_view)
        return view if view.region is not None else None

    def _make_view(self) -> _View:
        region = self._tree if self.name is None else self._open()
        if region is None:
            return _View(None, None, np.zeros((0, *self._block_shape()), self.geometry.dtype))
        memory, count = region.payload, self.geometry.count
        claims = BlockClaims(
            region,
            states=memory[8 : 8 + count],
            pids=memory[self._pids_at : self._pids_at + 4 * count].view(np.int32),
            started=memory[self._started_at : self._started_at + 8 * count].view(np.int64),
            settled=memory[:8].view(np.int64),
        )
        arena = memory[self._arena_at : self.nbytes].view(self.geometry.dtype)
        report = FillReport(self.where, self.geometry, region) if made_here(region) else None
        view = _View(region, claims, arena.reshape(-1, *self._block_shape()), report)
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
            return open_region(self.name, self.nbytes, self.description, self._arena_at)
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
    if not NAMED:  # macOS, Windows: by nature, so no warning
        off(
            "named regions (OFD locks, O_TMPFILE)",
            "a decoded copy serves this process and the workers it forks, not spawned ones",
        )
        return False
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
    say_once_for_job(
        _NO_ROOM,
        f"{message}; give the node more shared memory: `docker run --shm-size={wanted_gib}g ...`",
    )


def _shm_in_use() -> int:
    """Bytes in use in ``shm_dir()`` (0 where it cannot be asked)."""
    try:
        return int(shutil.disk_usage(shm_dir()).used)
    except OSError:
        return 0
