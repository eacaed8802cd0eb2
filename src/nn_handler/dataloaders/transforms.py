"""Sample transforms for data stored encoded: ``decode_image`` for JPEG / PNG / … bytes.

Datasets return each encoded row (variable-length ``uint8`` in HDF5, one image per row) as a
1-d ``uint8`` tensor; pass a decoder as ``transform``::

    from functools import partial
    from nn_handler.dataloaders import H5LazyDataset
    from nn_handler.dataloaders.transforms import decode_image

    ds = H5LazyDataset("images.h5", "jpeg", "label", transform=partial(decode_image, mode="RGB"))

``functools.partial`` of a module-level function pickles, so the transform reaches spawn /
forkserver DataLoader workers. Decoding needs Pillow (``pip install "nn-handler[image]"``).
"""

from __future__ import annotations

import io
from typing import Any, Literal

import numpy as np
import torch

__all__ = ["decode_image"]

Layout = Literal["CHW", "HWC"]
_LAYOUTS: tuple[Layout, ...] = ("CHW", "HWC")


def decode_image(
    data: Any,
    *,
    mode: str | None = None,
    layout: Layout = "CHW",
    dtype: Any = torch.uint8,
    scale: bool = True,
) -> Any:
    """Decode one encoded image (JPEG, PNG, WebP, … anything Pillow opens).

    Args:
        data: The encoded bytes: a 1-d ``uint8`` tensor or array (what a dataset returns for a
            variable-length ``uint8`` row), ``bytes`` or ``memoryview``.
        mode: Pillow mode to convert to (``"RGB"``, ``"L"``, ``"RGBA"``, …), or None to keep
            the image's own (grayscale stays one channel, 16-bit PNGs stay 16-bit).
        layout: ``"CHW"`` returns a ``torch.Tensor`` of shape ``(C, H, W)`` (what conv layers
            take); ``"HWC"`` returns a NumPy array of shape ``(H, W, C)`` (what NumPy / Pillow
            code and augmentation libraries take). Grayscale images have ``C == 1``.
        dtype: Result dtype, a torch dtype for ``"CHW"`` or a NumPy dtype for ``"HWC"``
            (either kind is accepted for both). Integer dtypes keep the pixel values; float
            dtypes are divided by the format's maximum (255, or 65535 for 16-bit images) when
            ``scale`` is True, giving values in ``[0, 1]``.
        scale: Scale float results to ``[0, 1]`` (ignored for integer dtypes).

    Returns:
        The decoded image: a ``(C, H, W)`` tensor or an ``(H, W, C)`` array.

    Raises:
        ImportError: Pillow is not installed (the message says how to get it).
        ValueError: ``data`` is not an image Pillow can decode, or ``layout`` is unknown.
        TypeError: ``data`` is not bytes-like, or ``dtype`` is not a numeric dtype.
    """
    if layout not in _LAYOUTS:
        raise ValueError(f"layout must be one of {_LAYOUTS}, got {layout!r}")
    target = _numpy_dtype(dtype)
    pixels = _decode(_as_bytes(data), mode)
    if pixels.ndim == 2:
        pixels = pixels[:, :, np.newaxis]
    maximum = float(np.iinfo(pixels.dtype).max) if pixels.dtype.kind in "iu" else 1.0
    if target.kind == "f":
        out = pixels.astype(target)
        if scale:
            out /= target.type(maximum)
    else:
        out = pixels.astype(target, copy=False)
    if layout == "HWC":
        return np.ascontiguousarray(out)
    return torch.from_numpy(np.ascontiguousarray(out.transpose(2, 0, 1)))


def _as_bytes(data: Any) -> bytes:
    if isinstance(data, torch.Tensor):
        data = data.detach().cpu().numpy()
    if isinstance(data, np.ndarray):
        if data.ndim != 1 or data.dtype not in (np.uint8, np.int8):
            raise TypeError(
                f"data must be a 1-d uint8 tensor/array of encoded bytes, got {data.dtype} "
                f"of shape {data.shape}"
            )
        return data.tobytes()
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(
        "data must be encoded image bytes (1-d uint8 tensor, array or bytes), "
        f"got {type(data).__name__}"
    )


def _decode(raw: bytes, mode: str | None) -> np.ndarray[Any, Any]:
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError as exc:
        raise ImportError(
            'decode_image needs Pillow: pip install "nn-handler[image]" (or pip install pillow)'
        ) from exc
    try:
        with Image.open(io.BytesIO(raw)) as img:
            img.load()
            converted = img if mode is None or img.mode == mode else img.convert(mode)
            return np.asarray(converted)
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        head = raw[:8].hex(" ")
        raise ValueError(
            f"cannot decode {len(raw)} bytes as an image (first bytes {head}): {exc}"
        ) from exc


def _numpy_dtype(dtype: Any) -> np.dtype[Any]:
    if isinstance(dtype, torch.dtype):
        try:
            result: np.dtype[Any] = torch.empty((), dtype=dtype).numpy().dtype
        except TypeError as exc:  # bfloat16 and friends have no NumPy dtype
            raise TypeError(f"dtype {dtype} has no NumPy equivalent; pass torch.float32") from exc
    else:
        try:
            result = np.dtype(dtype)
        except TypeError as exc:
            raise TypeError(f"dtype must be a numeric torch or NumPy dtype, got {dtype!r}") from exc
    if result.kind not in "iuf":
        raise TypeError(f"dtype must be an integer or float dtype, got {result}")
    return result
