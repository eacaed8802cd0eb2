"""Range reads through any fsspec filesystem (gs://, az://, memory://, …): the fallback fetcher.

The fetcher protocol (``Fetcher``) is what ``RemoteFile`` needs from a store: the current version
of the object (``head``) and one range of it, conditional on a version (``get``). S3 and HTTP
have their own fetchers that send ``If-Match``; here the version is compared at open and the
length of every reply is checked, but the store is not asked to refuse a newer version (fsspec
has no common way to say so): see ``docs/remote.md``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from ..identity import ObjectVersion
from .failures import ChangedError, DeniedError, TransientError

__all__ = ["Fetcher", "GenericFetcher", "version_from_info"]

_ETAG_KEYS = ("ETag", "etag", "generation", "md5Hash", "content_md5")
_VERSION_KEYS = ("VersionId", "version_id", "generation")
_MODIFIED_KEYS = ("LastModified", "last_modified", "mtime", "updated", "created")


class Fetcher(Protocol):
    """One object in one store, read by ranges (see the module docstring)."""

    async def head(self) -> ObjectVersion:
        """The object's current version (size and tags).

        Raises:
            RequestError: one of its kinds (``failures.py``).
        """

    async def get(self, start: int, end: int, version: ObjectVersion) -> bytes:
        """Bytes ``[start, end)`` of ``version``; ``ChangedError`` when the object is another now.

        Raises:
            RequestError: one of its kinds (``failures.py``).
        """


class GenericFetcher:
    """Any fsspec filesystem: ``info`` for the version, ``cat_file`` for a range."""

    def __init__(self, fs: Any, path: str) -> None:
        self.fs = fs
        self.path = path

    async def head(self) -> ObjectVersion:
        info = await self._call("info", self.path)
        return version_from_info(info)

    async def get(self, start: int, end: int, version: ObjectVersion) -> bytes:
        data = await self._call("cat_file", self.path, start=start, end=end)
        return bytes(data)

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            if getattr(self.fs, "async_impl", False):
                return await getattr(self.fs, f"_{method}")(*args, **kwargs)
            return await asyncio.to_thread(getattr(self.fs, method), *args, **kwargs)
        except FileNotFoundError as exc:
            raise ChangedError("not found", f"the object does not exist ({exc})") from exc
        except PermissionError as exc:
            raise DeniedError("denied", str(exc)) from exc
        except (OSError, TimeoutError) as exc:
            raise TransientError(type(exc).__name__, str(exc)) from exc


def version_from_info(info: dict[str, Any]) -> ObjectVersion:
    """An ``ObjectVersion`` from an fsspec ``info`` dict (whichever tags the store gives)."""

    def first(keys: tuple[str, ...]) -> str | None:
        found = next((info[k] for k in keys if info.get(k) not in (None, "")), None)
        return None if found is None else str(found)

    return ObjectVersion(
        size=int(info["size"]),
        etag=first(_ETAG_KEYS),
        version=first(_VERSION_KEYS),
        modified=first(_MODIFIED_KEYS),
    )
