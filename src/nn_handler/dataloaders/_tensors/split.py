"""Stacked batches and samples: one batch → one value per sample, and back.

Every dataset reads a whole batch at once and stacks it; ``__getitems__`` (DataLoader's
per-sample path) and a single ``dataset[i]`` then split that batch into samples, and a
per-sample transform turns the samples into a batch again. Both directions live here, once:

* ``split_batch``: a tensor splits along axis 0 into views of its rows, a list (strings,
  tensors of different shapes) is already one value per sample, a tuple ``(x, y)`` becomes
  ``(x_i, y_i)`` pairs and a dict ``{name: batch}`` one dict per sample, at any depth;
* ``collect``: samples → a stacked tensor where they are tensors of one shape and dtype, else a
  list (decoded images of different sizes, strings).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

__all__ = ["Transform", "apply", "collect", "restack", "split_batch", "split_samples"]

Transform = Callable[[Any], Any] | None


def split_batch(batch: Any) -> list[Any]:
    """One value per sample of a stacked ``batch``.

    Args:
        batch: A tensor (split along axis 0: views of its rows, no copy), a list (one value
            per sample already), a tuple of batches (one tuple per sample) or a mapping of
            batches (one dict per sample); parts of a tuple or mapping nest the same way.

    Raises:
        ValueError: the parts of a tuple or mapping hold different numbers of samples.
    """
    if isinstance(batch, torch.Tensor):
        return list(batch.unbind(0))
    if isinstance(batch, Mapping):
        names = list(batch)
        columns = [split_batch(batch[name]) for name in names]
        return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]
    if isinstance(batch, tuple):
        return list(zip(*(split_batch(part) for part in batch), strict=True))
    return list(batch)


def split_samples(
    x: Any, y: Any | None, transform: Transform = None, target_transform: Transform = None
) -> list[Any]:
    """Samples ``x_i`` (``y`` is None) or ``(x_i, y_i)`` of batches ``x`` and ``y``.

    ``transform`` / ``target_transform`` run on each sample's ``x_i`` / ``y_i``.
    """
    xs = apply(transform, split_batch(x))
    if y is None:
        return xs
    return split_batch((xs, apply(target_transform, split_batch(y))))


def apply(fn: Transform, values: list[Any]) -> list[Any]:
    """``fn`` applied to each value (the values themselves when ``fn`` is None)."""
    return values if fn is None else [fn(v) for v in values]


def collect(values: Sequence[Any]) -> torch.Tensor | list[Any]:
    """Stack ``values`` if they are tensors of one shape and dtype, else return them as a list."""
    if values and all(isinstance(v, torch.Tensor) for v in values):
        first = values[0]
        if all(v.shape == first.shape and v.dtype == first.dtype for v in values):
            return torch.stack(list(values))
    return list(values)


def restack(fn: Callable[[Any], Any], batch: Any) -> torch.Tensor | list[Any]:
    """``batch`` with ``fn`` run on each sample, stacked again (see ``collect``)."""
    return collect(apply(fn, split_batch(batch)))
