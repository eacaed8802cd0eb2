"""What a suite hands its peers and what they hand back: the types both sides name.

A peer module imports this module, the harness and the registry, never a suite; a suite imports
this module and the registry, never a peer. So adding a peer to every suite it can run is one
module in ``peers`` (with its ``register`` line) and one import line in ``peers/__init__.py``.

* ``WorkloadCase`` and ``Limit``: the workloads suite's ``"workloads"`` adapters;
* ``Contender``: the sparse suite's ``"sparse"`` adapters (loaders it times in one process);
* ``StorePeer``, ``StoreRunner``, ``Conversion`` and ``PeerUnavailableError``: the sparse
  suite's ``"sparse-store"`` adapters (loaders that convert the ``.h5ad`` into a store of
  their own first, and run in an environment of their own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

if TYPE_CHECKING:
    from .suites.workload_files import Workload

__all__ = [
    "Contender",
    "Conversion",
    "Kind",
    "Limit",
    "PeerUnavailableError",
    "StorePeer",
    "StoreRunner",
    "WorkloadCase",
]

#: the batches a sparse loader serves: SciPy / torch CSR, or dense rows
Kind = Literal["csr", "dense"]


@dataclass(frozen=True)
class WorkloadCase:
    """One workload's file and what every contender and limit needs to read it."""

    path: str
    workload: Workload
    n: int
    batch_size: int
    budget_s: float


class Limit(Protocol):
    """A workload's limit, measured once per round."""

    name: str

    def measure(self) -> tuple[float, float]:
        """(samples/s, samples per CPU-second of one core; NaN when not counted)."""
        ...


@dataclass(frozen=True)
class Contender:
    """A loader to time (``make`` builds it fresh) and the index order of one of its epochs."""

    name: str
    make: Callable[[], Iterable[Any]]
    order: Callable[[], np.ndarray[Any, Any]]


class PeerUnavailableError(Exception):
    """A peer cannot be installed or run here; the message is the one-line reason."""


@dataclass(frozen=True)
class Conversion:
    """A store peer's one-time conversion of the ``.h5ad``: time, peak RSS and store size."""

    seconds: float
    peak_rss_bytes: int
    store_bytes: int


class StoreRunner(Protocol):
    """A store peer on one ``.h5ad``: convert once into ``store``, then time loading passes."""

    store: str

    @property
    def label(self) -> str:
        """Its rows' loader name: the peer, its version and its settings."""
        ...

    @property
    def batches(self) -> dict[Kind, str]:
        """What its sparse (``"csr"``) and dense passes serve, in words."""
        ...

    def convert(self) -> Conversion:
        """Convert the ``.h5ad`` (replacing an earlier store); time it.

        Raises:
            PeerUnavailableError: the conversion failed, with the reason.
        """
        ...

    def load(
        self, seconds: float, seed: int = 0, order_out: str | None = None, cold: bool = False
    ) -> dict[Kind, float]:
        """Cells/s of one CSR pass and one dense pass (``seconds`` each).

        With ``order_out``, the ``.h5ad`` rows of its first full batches are saved there (a
        ``(batches, batch_size)`` array, ``numpy.save``). ``cold``: the store's pages leave
        the page cache before each pass, and every batch is timed.

        Raises:
            PeerUnavailableError: the loading failed, with the reason.
        """
        ...


class StorePeer(Protocol):
    """A store peer's environment, found or made by its ``"sparse-store"`` adapter.

    The adapter is ``(envs, python, install) -> StorePeer``: ``envs`` is the folder of the
    peers' own environments, ``python`` the interpreter to make one from (None: any that fits),
    ``install`` whether it may make one; it raises ``PeerUnavailableError`` when it cannot.
    """

    @property
    def name(self) -> str:
        """The peer's name in the table's header and notes."""
        ...

    def runner(self, h5ad: str, batch: int, dataset_size: str | None) -> StoreRunner:
        """Its runner on ``h5ad`` (its store next to it), batches of ``batch`` cells.

        ``dataset_size``: how much the conversion holds in memory at once (None: its default).
        """
        ...

    def notes(self, batch: int) -> list[str]:
        """The table's notes on how it loads and mixes."""
        ...
