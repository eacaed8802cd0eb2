"""``pad_collate``: batch samples whose data differ in shape, by padding to the longest.

A batch of ``{"data": tensor, "labels": dict}`` samples becomes::

    {"data":    (B, *max_shape) tensor, padded with ``padding_value``,
     "lengths": (B, ndim) int64 tensor, each sample's own shape,
     "mask":    (B, *max_shape) bool tensor, True where data is real,
     "labels":  {name: collated values}}

Labels are collated per name: a name every sample has goes through torch's ``default_collate``
(numbers -> one tensor, equal-shape numeric arrays -> one stacked tensor, strings -> a list) and
stays a plain list where that is not possible (arrays of different shapes, string arrays, None);
a name only some samples have becomes a list with ``None`` for the samples without it.
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import default_collate

__all__ = ["collate_labels", "pad_collate"]

_MISSING = object()


def pad_collate(
    batch: Sequence[Mapping[str, Any]],
    *,
    padding_value: float = 0,
    axes: int | Sequence[int] | None = None,
) -> dict[str, Any]:
    """Collate ``{"data", "labels"}`` samples, padding data to the largest shape in the batch.

    Use it as ``DataLoader(..., collate_fn=pad_collate)``; bind options with
    ``functools.partial(pad_collate, padding_value=-1, axes=0)`` (picklable, so it works
    with spawn workers too).

    Args:
        batch: Samples as returned by ``H5SampleDataset``.
        padding_value: Value written into the padding.
        axes: Sample axes allowed to differ (negative counts from the end); None allows every
            axis. Samples that differ along any other axis raise ``ValueError``.

    Returns:
        ``{"data", "lengths", "mask", "labels"}`` as described in the module docstring.

    Raises:
        TypeError: the batch is empty, a sample has no tensor ``"data"``, or dtypes differ;
            ``padding_value`` is not a number (a bool only pads bool data), ``axes`` not an
            int or a sequence of ints.
        ValueError: samples differ in rank, or along an axis not in ``axes``;
            ``padding_value`` does not fit the samples' integer dtype.
    """
    tensors = _data_tensors(batch)
    ndim = tensors[0].dim()
    allowed = _normalize_axes(axes, ndim)
    shapes = [tuple(t.shape) for t in tensors]
    _check_fixed_axes(shapes, allowed)
    max_shape = tuple(max(s[d] for s in shapes) for d in range(ndim))
    fill = _check_padding(padding_value, tensors[0].dtype)
    data = tensors[0].new_full((len(tensors), *max_shape), fill)
    mask = torch.zeros((len(tensors), *max_shape), dtype=torch.bool)
    for b, t in enumerate(tensors):
        region: tuple[Any, ...] = (b, *(slice(0, n) for n in t.shape))
        data[region] = t
        mask[region] = True
    lengths = torch.tensor(shapes, dtype=torch.int64).reshape(len(tensors), ndim)
    labels = collate_labels([s.get("labels", {}) for s in batch])
    return {"data": data, "lengths": lengths, "mask": mask, "labels": labels}


def collate_labels(labels: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Collate a list of label dicts by name (rules in the module docstring)."""
    names = list(dict.fromkeys(k for d in labels for k in d))
    out: dict[str, Any] = {}
    for name in names:
        values = [d.get(name, _MISSING) for d in labels]
        if any(v is _MISSING for v in values):
            out[name] = [None if v is _MISSING else v for v in values]
            continue
        try:
            out[name] = default_collate(values)
        except (TypeError, RuntimeError):
            out[name] = list(values)
    return out


def _data_tensors(batch: Sequence[Mapping[str, Any]]) -> list[torch.Tensor]:
    if len(batch) == 0:
        raise TypeError("pad_collate needs a non-empty batch of samples")
    tensors = []
    for i, sample in enumerate(batch):
        data = sample.get("data") if isinstance(sample, Mapping) else None
        if not isinstance(data, torch.Tensor):
            raise TypeError(
                f"pad_collate: sample {i} must be a dict with a tensor 'data' "
                f"(as H5SampleDataset returns), got {type(sample).__name__}"
            )
        tensors.append(data)
    dims = {t.dim() for t in tensors}
    if len(dims) > 1:
        shapes = [tuple(t.shape) for t in tensors]
        raise ValueError(f"pad_collate: samples differ in rank; shapes: {shapes}")
    dtypes = sorted({str(t.dtype) for t in tensors})
    if len(dtypes) > 1:
        raise TypeError(
            f"pad_collate: samples differ in dtype ({', '.join(dtypes)}); pass dtype=... to the "
            "dataset to cast them to one"
        )
    return tensors


def _normalize_axes(axes: Any, ndim: int) -> set[int]:
    if axes is None:
        return set(range(ndim))
    if isinstance(axes, str) or not isinstance(axes, int | Sequence):
        raise TypeError(
            f"pad_collate: axes must be None, an int or a sequence of ints, got "
            f"{type(axes).__name__} {axes!r}"
        )
    items = [axes] if isinstance(axes, int) else list(axes)
    result = set()
    for a in items:
        if isinstance(a, bool) or not isinstance(a, int) or not -ndim <= a < ndim:
            raise ValueError(
                f"pad_collate: axes={axes!r} must be None or sample axes in [{-ndim}, {ndim})"
            )
        result.add(a % ndim)
    return result


def _check_padding(value: Any, dtype: torch.dtype) -> float | int | bool:
    """``value`` as the fill of ``dtype`` data, or raise naming ``padding_value``."""
    is_bool = isinstance(value, bool)
    if (is_bool and dtype != torch.bool) or not isinstance(value, numbers.Real):
        only = " (a bool pads bool data only)" if is_bool else ""
        raise TypeError(
            f"pad_collate: padding_value must be a real number{only}, "
            f"got {type(value).__name__} {value!r}"
        )
    if dtype == torch.bool:
        return bool(value)
    if dtype.is_floating_point:
        return float(value)  # NaN and inf pad floats well
    info = torch.iinfo(dtype)
    if isinstance(value, numbers.Integral):
        whole, number = True, operator.index(value)
    else:
        whole = float(value).is_integer()
        number = int(float(value)) if whole else 0
    if not (whole and info.min <= number <= info.max):
        raise ValueError(
            f"pad_collate: padding_value={value!r} does not fit the samples' dtype {dtype} "
            f"(integers in [{info.min:,}, {info.max:,}])"
        )
    return number


def _check_fixed_axes(shapes: list[tuple[int, ...]], allowed: set[int]) -> None:
    for d in range(len(shapes[0])):
        sizes = {s[d] for s in shapes}
        if d not in allowed and len(sizes) > 1:
            raise ValueError(
                f"pad_collate: samples differ along axis {d}, which is not in axes; "
                f"shapes: {shapes}"
            )
