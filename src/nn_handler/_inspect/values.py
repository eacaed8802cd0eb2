"""Attribute values as JSON values, and text that is safe to print on one terminal line.

``inspect`` reports attributes as plain JSON values (numbers, strings, lists, ``None``), never
Python reprs; the text view prints each on one line, cut to a width, with control characters
escaped so names or attributes written by other software cannot break (or drive) the terminal.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import h5py
import numpy as np

__all__ = ["MAX_LIST", "json_value", "one_line", "read_attrs", "safe_text"]

#: Arrays with more elements than this are summarised ({"dtype", "shape", "first"}).
MAX_LIST = 32
# C0/C1 controls, line separators, bidi overrides and isolates (they rewrite what a terminal
# shows), and lone surrogates (h5py's surrogateescape for bad UTF-8)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def safe_text(text: str) -> str:
    """``text`` with control characters (newlines, escapes, …) written as escapes."""
    return _CONTROL.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    if char in named:
        return named[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def one_line(value: Any, limit: int) -> str:
    """``value`` (a JSON value) as one line of at most ``limit`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = safe_text(text)
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def read_attrs(obj: h5py.HLObject, limit: int) -> dict[str, Any]:
    """Every attribute of ``obj`` as a JSON value (strings cut at ``limit`` characters).

    An attribute that cannot be read is reported as ``"<unreadable: reason>"``; one that cannot
    even be listed ends the listing with a ``"<attributes>"`` entry giving the reason.
    """
    out: dict[str, Any] = {}
    try:
        names = list(obj.attrs)
    except Exception as exc:  # a damaged attribute table: report it, keep going
        return {"<attributes>": f"<unreadable: {_reason(exc)}>"}
    for name in names:
        try:
            out[name] = json_value(obj.attrs[name], limit)
        except Exception as exc:  # types h5py cannot read (references, time, quad, …)
            out[name] = f"<unreadable: {_reason(exc)}>"
    return out


def json_value(value: Any, limit: int) -> Any:
    """Convert an attribute value read by h5py into a JSON value."""
    if isinstance(value, h5py.Empty):
        return None
    if isinstance(value, (bytes, np.bytes_)):
        return _cut(bytes(value).decode("utf-8", "replace"), limit)
    if isinstance(value, str):  # h5py keeps undecodable bytes as lone surrogates: replace them
        return _cut(value.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), limit)
    if isinstance(value, np.ndarray):
        return _array(value, limit)
    if isinstance(value, np.void) and value.dtype.names:
        return {n: json_value(value[n], limit) for n in value.dtype.names}
    if isinstance(value, np.generic):
        return _scalar(value.item(), limit)
    return _scalar(value, limit)


def _array(value: np.ndarray[Any, Any], limit: int) -> Any:
    if value.ndim == 0:
        return json_value(value[()], limit)
    if value.size > MAX_LIST:
        first = [json_value(v, limit) for v in value.ravel()[:8]]
        return {"dtype": str(value.dtype), "shape": list(value.shape), "first": first}
    if value.ndim > 1:
        return [_array(row, limit) for row in value]
    if value.dtype.names:  # records: one object each
        return [json_value(v, limit) for v in value]
    return [json_value(v, limit) for v in value.tolist()]


def _scalar(value: Any, limit: int) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)  # JSON has no NaN / inf
    if isinstance(value, complex):
        return [_scalar(value.real, limit), _scalar(value.imag, limit)]
    if isinstance(value, (bytes, str, np.ndarray, np.generic)):
        return json_value(value, limit)
    return _cut(f"<{type(value).__name__}>", limit)  # references and other objects


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def _reason(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
