"""What went wrong with one request, and how long to keep retrying it.

A fetcher (``s3.py``, ``http.py``, ``generic.py``) sorts every failure into one of four
kinds: ``TransientError`` (5xx, throttling, time-outs, resets, refused connections, short
replies: try again after a pause), ``ChangedError`` (the object is no longer the version
recorded at open: never retried), ``DeniedError`` (credentials missing or refused) and
``FatalError`` (anything a retry cannot fix). ``RetryPolicy`` bounds the retrying: exponential
backoff with jitter, each attempt under its own time limit, all attempts of one request within
``total_s``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ...._validate import check_non_negative_int, check_positive_int

__all__ = [
    "ChangedError",
    "DeniedError",
    "FatalError",
    "RequestError",
    "RetryPolicy",
    "TransientError",
]

# Our own generator: the retries run on fsspec's thread, and drawing from the ``random`` module
# there would move the user's seeded sequence under them (not cryptography, only jitter).
_jitter = random.Random()


class RequestError(Exception):
    """One failed request: ``status`` (HTTP status or error code) and a description."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


class TransientError(RequestError):
    """Worth another try: 5xx, throttling, time-out, reset or refused connection, short reply."""


class ChangedError(RequestError):
    """The object is gone or is another version than the one recorded at open."""


class DeniedError(RequestError):
    """No credentials, or credentials the store refuses."""


class FatalError(RequestError):
    """A failure no retry can fix (a bad request, a server that ignores ``Range``, …)."""


@dataclass(frozen=True)
class RetryPolicy:
    """How requests are sent and retried.

    Attributes:
        total_s: All attempts of one request end within this many seconds; then the read fails.
        attempt_s: One attempt (connect, headers, body) is abandoned after this many seconds.
        first_backoff_s: Pause before the second attempt; doubled after each failure.
        max_backoff_s: Longest pause between attempts.
        gap: Ranges this close (bytes) are fetched by one request (``ranges.plan_requests``).
        max_request: Largest request (bytes); longer runs are split and fetched at once.
        concurrency: Requests in flight at once, per ``read_ranges`` call.
    """

    total_s: float = 30.0
    attempt_s: float = 10.0
    first_backoff_s: float = 0.1
    max_backoff_s: float = 2.0
    gap: int = 32 * 1024
    max_request: int = 8 * 1024**2
    concurrency: int = 64

    def __post_init__(self) -> None:
        for name in ("total_s", "attempt_s", "first_backoff_s", "max_backoff_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        check_non_negative_int("gap", self.gap)
        check_positive_int("max_request", self.max_request)
        check_positive_int("concurrency", self.concurrency)

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based), with jitter."""
        base: float = min(self.max_backoff_s, self.first_backoff_s * 2 ** (attempt - 1))
        return base * (0.5 + _jitter.random() / 2)
