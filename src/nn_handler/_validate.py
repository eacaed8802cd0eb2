"""Argument checks that produce the library's error messages.

Every message names the argument, shows the value with ``!r`` and says what is allowed, so a user
can fix the call without reading our source.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = [
    "MAX_COUNT",
    "MAX_SEED",
    "check_callable",
    "check_choice",
    "check_count",
    "check_int",
    "check_int_at_most",
    "check_key",
    "check_loader_options",
    "check_non_negative_int",
    "check_parallel",
    "check_positive_int",
    "check_prefetch",
    "check_probability",
    "check_real",
    "check_seed",
    "format_bytes",
    "format_names",
    "max_parallel",
    "numpy_dtype",
    "parse_size",
    "usable_cores",
]

_MAX_LISTED = 20
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.I)
#: the largest size, length or count: what NumPy and torch index with (int64)
MAX_COUNT = 2**63 - 1
#: seeds and epochs are 64-bit words of NumPy's SeedSequence; a larger one would alias a smaller
MAX_SEED = 2**64 - 1
# Worker processes / threads per CPU beyond which more only queue for the same cores.
_PARALLEL_PER_CPU = 8
_PARALLEL_FLOOR = 64
# Batches in flight per worker: torch's DataLoader loops prefetch_factor * num_workers times at
# the start of each epoch, whatever the epoch's length, so the value itself must stay small.
_MAX_PREFETCH = 4096


def format_bytes(n: int | float) -> str:
    """Return ``n`` bytes as a short human string (``"1.5 GiB"``)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def format_names(names: Iterable[str]) -> str:
    """Return names as a short, sorted, readable list (truncated past 20 entries)."""
    items = sorted(names)
    if not items:
        return "(none)"
    shown = ", ".join(repr(n) for n in items[:_MAX_LISTED])
    extra = len(items) - _MAX_LISTED
    return shown + (f", … ({extra} more)" if extra > 0 else "")


def check_int(name: str, value: Any) -> int:
    """Return ``value`` as an int, or raise ``TypeError`` for non-integers (bools included)."""
    if isinstance(value, bool) or str(getattr(value, "dtype", "")) in ("bool", "torch.bool"):
        raise TypeError(f"{name} must be an integer, got bool {value!r}")
    try:
        return operator.index(value)
    except TypeError as exc:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}") from exc


def check_non_negative_int(name: str, value: Any) -> int:
    """Return ``value`` as an int ``>= 0`` or raise ``ValueError`` / ``TypeError``."""
    result = check_int(name, value)
    if result < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return result


def check_positive_int(name: str, value: Any) -> int:
    """Return ``value`` as an int ``>= 1`` or raise ``ValueError`` / ``TypeError``."""
    result = check_int(name, value)
    if result < 1:
        raise ValueError(f"{name} must be >= 1, got {value!r}")
    return result


def check_int_at_most(name: str, value: int, limit: int, why: str) -> int:
    """Return ``value`` when it is ``<= limit``, else raise ``ValueError`` naming ``why``.

    For integers that reach a C API of fixed width (HDF5's ``size_t`` / ``int``), which would
    otherwise fail with a bare ``OverflowError`` far from the call that set them.
    """
    if value > limit:
        raise ValueError(
            f"{name}={value!r} is larger than {limit:,}, the largest value {why} takes"
        )
    return value


def check_count(name: str, value: Any, *, minimum: int = 0) -> int:
    """Return ``value`` as an int in ``[minimum, MAX_COUNT]``: a size, length or count.

    Larger values cannot index a NumPy array or a tensor, and would fail far from the call
    (``OverflowError``, "Maximum allowed size exceeded") if let through.
    """
    result = check_int(name, value)
    if result < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return check_int_at_most(name, result, MAX_COUNT, "a NumPy array or torch tensor size (int64)")


def check_seed(name: str, value: Any) -> int:
    """Return ``value`` as an int in ``[0, MAX_SEED]`` (a seed or an epoch).

    Orders are drawn from ``np.random.default_rng([seed, epoch])``, whose words are 64 bits: a
    negative or larger value would give the same order as another, smaller one.
    """
    result = check_int(name, value)
    if result < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return check_int_at_most(name, result, MAX_SEED, "a 64-bit seed word")


def check_real(
    name: str, value: Any, *, low: float | None = None, high: float | None = None
) -> float:
    """Return ``value`` as a finite float in ``[low, high]`` (either bound optional).

    Raises:
        TypeError: ``value`` is not a real number (a bool or a string is not one).
        ValueError: NaN, an infinity, or outside the bounds.
    """
    lo = "-inf" if low is None else f"{low:g}"
    hi = "inf" if high is None else f"{high:g}"
    allowed = f"a finite number in [{lo}, {hi}]"
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {allowed}, got {type(value).__name__} {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    if (low is not None and result < low) or (high is not None and result > high):
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value!r}")
    return result


def check_probability(name: str, value: Any) -> float:
    """Return ``value`` as a float in ``[0, 1]`` or raise ``ValueError`` / ``TypeError``."""
    return check_real(name, value, low=0.0, high=1.0)


def max_parallel() -> int:
    """The most worker processes or threads one call may start: 8 per CPU, at least 64."""
    return max(_PARALLEL_FLOOR, _PARALLEL_PER_CPU * (os.cpu_count() or 1))


def check_parallel(name: str, value: Any, *, minimum: int) -> int:
    """Return ``value`` as a number of workers or threads in ``[minimum, max_parallel()]``.

    The upper bound turns a typo (``num_workers=2**20``) into an error before the first
    process or thread starts, instead of thousands of them queueing for the same cores.
    """
    result = check_int(name, value)
    if result < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    limit = max_parallel()
    if result > limit:
        raise ValueError(
            f"{name}={value!r} is more than {limit:,}, the most this library starts "
            f"({_PARALLEL_PER_CPU} per CPU of this machine's {os.cpu_count() or 1}, at least "
            f"{_PARALLEL_FLOOR}): more would only queue for the same cores"
        )
    return result


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1  # pragma: no cover - macOS / Windows


def check_loader_options(options: Mapping[str, Any]) -> None:
    """Check the worker keywords of a ``DataLoader`` among ``options`` before any worker starts.

    ``batch_size`` (None or 1 up to ``MAX_COUNT``), ``num_workers`` (0 up to
    ``max_parallel()``), ``prefetch_factor`` (None, or 1 up to 4,096) and ``timeout``
    (seconds, finite and >= 0; 0 waits forever; more needs workers) reach torch's DataLoader,
    which would accept NaN, an infinity, a float or a bool there and fail (or overflow, or
    loop) only while iterating.
    """
    if options.get("batch_size") is not None:
        check_count("batch_size", options["batch_size"], minimum=1)
    if "num_workers" in options:
        check_parallel("num_workers", options["num_workers"], minimum=0)
    if options.get("prefetch_factor") is not None:
        check_prefetch("prefetch_factor", options["prefetch_factor"])
    if "timeout" in options:
        # threading's own limit: a longer wait overflows inside the queue torch waits on
        timeout = check_real("timeout", options["timeout"], low=0.0, high=threading.TIMEOUT_MAX)
        if timeout > 0 and not options.get("num_workers"):
            raise ValueError(
                f"timeout={options['timeout']!r} waits for worker processes, but num_workers is "
                "0 (batches are read in this process); pass num_workers > 0 or drop timeout"
            )


def check_prefetch(name: str, value: Any) -> int:
    """Return ``value`` as batches in flight per worker or thread: 1 up to 4,096."""
    result = check_positive_int(name, value)
    if result > _MAX_PREFETCH:
        raise ValueError(
            f"{name}={value!r} is more than {_MAX_PREFETCH:,} batches in flight per worker, the "
            "most this library allows (each one is held in memory; torch's DataLoader loops "
            "over them all at the start of every epoch)"
        )
    return result


def check_callable(name: str, value: Any, *, optional: bool = True) -> None:
    """Raise ``TypeError`` unless ``value`` is callable (or None when ``optional``)."""
    if not (callable(value) or (optional and value is None)):
        raise TypeError(f"{name} must be callable{' or None' if optional else ''}, got {value!r}")


def check_key(name: str, value: Any, *, optional: bool) -> None:
    """Raise ``TypeError`` unless ``value`` is a non-empty dataset path (or None if optional)."""
    if value is None and optional:
        return
    if not isinstance(value, str) or not value:
        allowed = "a non-empty string or None" if optional else "a non-empty string"
        raise TypeError(f"{name} must be {allowed} (a dataset path in the file), got {value!r}")


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> Any:
    """Return ``value`` if it is one of ``allowed``, else raise ``ValueError`` listing them."""
    options = tuple(allowed)
    if value not in options:
        listed = ", ".join(repr(o) for o in options)
        raise ValueError(f"{name} must be one of {listed}; got {value!r}")
    return value


def numpy_dtype(name: str, value: Any) -> np.dtype[Any] | None:
    """Return ``np.dtype(value)`` (``None`` passes through) or raise naming the argument."""
    if value is None:
        return None
    try:
        dtype: np.dtype[Any] = np.dtype(value)
        return dtype
    except TypeError as exc:
        raise TypeError(
            f"{name} must be a NumPy dtype (e.g. np.float32 or 'int64') or None, got {value!r}"
        ) from exc


def parse_size(name: str, value: Any) -> int:
    """Return ``value`` (an int, or text like ``"1MiB"``, ``"64k"``, ``"2GB"``) as bytes.

    Units are binary (``k`` = 1024). Raises ``ValueError`` / ``TypeError`` naming ``name``.
    """
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match is None:
            raise ValueError(
                f"{name} must be a size such as 1048576, '1MiB', '512KiB' or '2GiB', got {value!r}"
            )
        return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    return check_int(name, value)
