"""The one harness every suite times through: rounds, alternation, medians, ratios, targets.

``best_of`` (the fastest of rounds, for one-shot reads) is the package's own, re-exported.

Every suite measures its baseline and its limit in the same process and run as its contenders,
in rounds whose order alternates (so no contender always runs right after the same other one),
and reports medians and ratios: absolute numbers drift on shared machines, ratios much less.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from nn_handler.bench.timing import best_of

T = TypeVar("T")

__all__ = [
    "Check",
    "Rates",
    "alternating",
    "best_of",
    "format_targets",
    "median",
    "ratios",
    "round_order",
]


def median(values: Iterable[float]) -> float:
    """Median of the values that are not NaN (NaN, not measured, when none are)."""
    kept = [v for v in values if v == v]
    return statistics.median(kept) if kept else float("nan")


def ratios(num: Sequence[float], den: Sequence[float]) -> list[float]:
    """Per-round ratios ``num[i] / den[i]`` (NaN where the denominator is 0).

    Taken within each round, so drift between rounds cancels; pairs up to the shorter input.
    """
    return [a / b if b else float("nan") for a, b in zip(num, den, strict=False)]


@dataclass
class Rates:
    """One contender's rate in every round; ``rate`` is their median."""

    name: str
    rates: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Median over the rounds (NaN when never measured)."""
        return median(self.rates)


def round_order(items: Sequence[T], round_index: int) -> list[T]:
    """The contenders' order in round ``round_index``: as given on even rounds, reversed on odd.

    No contender always runs right after the same other one, so drifting noise (page cache,
    heat, neighbours on the machine) spreads over all of them.
    """
    return list(items) if round_index % 2 == 0 else list(reversed(items))


def alternating(items: Sequence[T], rounds: int) -> Iterator[tuple[int, list[T]]]:
    """``(round, items in that round's order)`` for ``rounds`` rounds (see ``round_order``)."""
    for r in range(rounds):
        yield r, round_order(items, r)


@dataclass(frozen=True)
class Check:
    """A target: ``ratio`` measured against ``goal`` (None or NaN: not measured)."""

    label: str
    ratio: float | None
    goal: float

    def line(self) -> str:
        """``- label: ratio (met | NOT met | not measured)``."""
        if self.ratio is None:
            return f"- {self.label}: not measured"
        if self.ratio != self.ratio:
            return f"- {self.label}: {self.ratio:.2f} (not measured)"
        return (
            f"- {self.label}: {self.ratio:.2f} ({'met' if self.ratio >= self.goal else 'NOT met'})"
        )


def format_targets(checks: Iterable[Check]) -> list[str]:
    """One line per target."""
    return [c.line() for c in checks]
