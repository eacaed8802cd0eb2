"""Range reads from an HTTP(S) server, conditional on the ETag (or date) seen at open.

Each request sends ``Range`` and ``If-Match: <strong ETag>`` (or ``If-Unmodified-Since`` when
the server gives only a date); a server that honours it answers ``412`` for a replaced file. A
server that ignores conditions is caught too: every reply's ETag and ``Content-Range`` total are
compared with the version recorded at open. A server that ignores ``Range`` (``200`` with the
whole body) is refused at open: reading a file by chunks needs ranges.
"""

from __future__ import annotations

import re
from typing import Any

from ..identity import ObjectVersion
from .failures import ChangedError, DeniedError, FatalError, RequestError, TransientError

__all__ = ["HTTPFetcher", "close_session"]

_TOTAL = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_TRANSIENT = {408, 425, 429, 500, 502, 503, 504}


class HTTPFetcher:
    """One URL on an HTTP server (through fsspec's ``HTTPFileSystem`` aiohttp session)."""

    def __init__(self, fs: Any, url: str) -> None:
        self.fs = fs
        self.url = url

    async def head(self) -> ObjectVersion:
        # a one-byte range, not HEAD: it proves the server honours Range, and gives the size
        status, headers, body = await self._request({"Range": "bytes=0-0"})
        if status == 200:
            raise FatalError("200", "the server ignores Range requests (it sent the whole file)")
        _check_status(status, body)
        total = _content_range(headers)[2]
        if total is None:
            raise FatalError(str(status), "the server gives no total size in Content-Range")
        return ObjectVersion(
            size=total, etag=headers.get("ETag"), modified=headers.get("Last-Modified")
        )

    async def get(self, start: int, end: int, version: ObjectVersion) -> bytes:
        request = {"Range": f"bytes={start}-{end - 1}"}
        if version.etag and not version.etag.startswith("W/"):  # If-Match wants a strong tag
            request["If-Match"] = version.etag
        elif version.modified:
            request["If-Unmodified-Since"] = version.modified
        status, headers, body = await self._request(request)
        if status == 200:  # whole body: the condition failed on a server that ignores it
            raise ChangedError("200", "the server sent the whole file instead of the range asked")
        _check_status(status, body)
        first, last, total = _content_range(headers)
        etag = headers.get("ETag")
        if (version.etag and etag and etag != version.etag) or total not in (None, version.size):
            raise ChangedError(
                str(status),
                f"the server now has another version (ETag {etag!r}, {total} bytes; at open: "
                f"{version.describe()})",
            )
        if (first, last) != (start, end - 1):
            raise FatalError(str(status), f"asked for bytes {start}-{end - 1}, got {first}-{last}")
        return body

    async def _request(self, headers: dict[str, str]) -> tuple[int, Any, bytes]:
        import aiohttp  # fsspec's HTTPFileSystem needs it

        kwargs = dict(getattr(self.fs, "kwargs", {}))
        headers = {**kwargs.pop("headers", {}), **headers}
        try:
            session = await self.fs.set_session()
            async with session.get(self.url, headers=headers, **kwargs) as resp:
                body = await resp.read()
                return resp.status, resp.headers, body
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise TransientError(type(exc).__name__, str(exc) or type(exc).__name__) from exc


async def close_session(fs: Any) -> None:
    """Close the aiohttp session of ``fs`` (an ``HTTPFileSystem``) and its connections."""
    session = getattr(fs, "_session", None)  # made on first use (``set_session``)
    if session is not None:
        await session.close()


def _check_status(status: int, body: bytes) -> None:
    if status == 206:
        return
    text = body[:200].decode("utf-8", "replace").strip()
    failure: type[RequestError]
    if status in (404, 410, 412, 416):
        failure = ChangedError
    elif status in (401, 403):
        failure = DeniedError
    elif status in _TRANSIENT or status >= 500:
        failure = TransientError
    else:
        failure = FatalError
    raise failure(str(status), text or "no message")


def _content_range(headers: Any) -> tuple[int | None, int | None, int | None]:
    match = _TOTAL.match(headers.get("Content-Range", ""))
    if match is None:
        return None, None, None
    first, last, total = match.groups()
    return int(first), int(last), None if total == "*" else int(total)
