"""The registry of peers and limits: each module in ``peers`` registers itself here once.

A peer names, per suite, the adapter that suite calls (``"layouts"``, ``"workloads"``,
``"sparse"``, ``"sparse-store"``, ``"predict"``); the suite asks ``adapters(suite)`` and never
names a peer, nor imports one. The types an adapter takes and gives live in ``cases``, which
peers import instead of a suite. Adding a peer to every suite it can run is one new module in
``peers`` (its ``register`` call lists its adapters) and its import line in
``peers/__init__.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["PEERS", "Peer", "adapters", "register"]


@dataclass(frozen=True)
class Peer:
    """One peer (another library) or limit (what the machine allows) and its suite adapters.

    Attributes:
        name: The registry key; also the row name where a suite takes it from here.
        kind: ``"peer"`` (another loader) or ``"limit"`` (a bound measured on the machine).
        suites: ``{suite: adapter}``; each suite documents its adapter's signature.
    """

    name: str
    kind: Literal["peer", "limit"]
    suites: Mapping[str, Callable[..., Any]]


PEERS: dict[str, Peer] = {}


def register(peer: Peer) -> Peer:
    """Add ``peer`` to ``PEERS``.

    Raises:
        ValueError: a peer of that name is registered already (each is wired once).
    """
    if peer.name in PEERS:
        raise ValueError(f"peer {peer.name!r} is registered twice")
    PEERS[peer.name] = peer
    return peer


def adapters(suite: str, kind: str | None = None) -> dict[str, Callable[..., Any]]:
    """``{peer name: adapter}`` of every registered peer (of ``kind``, if given) in ``suite``.

    In registration order: the order of ``peers/__init__.py``.
    """
    _load()
    return {
        p.name: p.suites[suite]
        for p in PEERS.values()
        if suite in p.suites and (kind is None or p.kind == kind)
    }


def _load() -> None:
    """Import ``peers`` (each module registers itself on import)."""
    from . import peers  # noqa: F401
