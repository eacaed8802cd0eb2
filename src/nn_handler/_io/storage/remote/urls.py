"""Which paths are URLs, and how to write one in a message.

A URL is ``scheme://rest``: ``s3://bucket/key``, ``gs://``, ``az://`` / ``abfs://``,
``http(s)://`` or any other protocol fsspec knows. A local path (``data/x.h5``, a Windows drive,
``file:///x.h5`` aside) is not one. Messages show a URL without its query string and user
info, which may carry signatures or passwords.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["HTTP_SCHEMES", "S3_SCHEMES", "is_url", "protocol_of", "safe_url"]

S3_SCHEMES = ("s3", "s3a")
HTTP_SCHEMES = ("http", "https")
# two or more letters: a Windows drive letter ("C:\\...") is one
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+)://")


def is_url(path: Any) -> bool:
    """True when ``path`` is a string (or path-like) of the form ``scheme://…`` (not ``file://``)."""
    if not isinstance(path, str | os.PathLike):
        return False
    text = os.fspath(path)
    match = _URL.match(text) if isinstance(text, str) else None
    return match is not None and match.group(1).lower() not in ("file", "local")


def protocol_of(url: str) -> str:
    """The URL's scheme in lower case (``"s3"``, ``"https"``, …).

    Raises:
        ValueError: ``url`` is not a URL.
    """
    match = _URL.match(url)
    if match is None:
        raise ValueError(f"url={url!r} is not a URL; expected scheme://bucket/key or http(s)://…")
    return match.group(1).lower()


def safe_url(url: str) -> str:
    """``url`` without user info and query (signatures, tokens), for messages and cache keys."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
