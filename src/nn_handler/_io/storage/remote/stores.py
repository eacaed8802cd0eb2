"""The fsspec filesystem and the fetcher for a URL, and what to do when credentials are missing.

``storage_options`` are passed to the filesystem as pandas, xarray and anndata pass them (for
S3: ``key``, ``secret``, ``token``, ``anon``, ``profile``, ``endpoint_url``, ``client_kwargs``,
…). Credentials come from the environment by default (each store's own chain: variables, profile,
instance role). We only add time limits to botocore's client (unless the user set their own):
our retry loop (``object_file.py``) is the one that bounds the time a read may take.

Clients: fsspec keeps one filesystem per set of options in each process (its instance cache),
shared by every file opened with them, and closes its client at exit. A filesystem made for one
fetcher alone (``skip_instance_cache``) is ours to close: its HTTP session is closed when the
fetcher is closed (``close_fetcher``) or collected, on fsspec's event loop, never left to a
later collection that would warn about its open connections in whatever runs then.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from ...process import process_generation
from .failures import RetryPolicy
from .generic import Fetcher, GenericFetcher
from .http import HTTPFetcher, close_session
from .s3 import S3Fetcher, close_client
from .urls import HTTP_SCHEMES, S3_SCHEMES, protocol_of

__all__ = ["close_fetcher", "close_fetcher_here", "credentials_hint", "open_fetcher"]

CloseClient = Callable[[Any], Coroutine[Any, Any, None]]

# the fetchers whose filesystem is their own: the finalizer that closes its client
_closers: weakref.WeakKeyDictionary[Any, weakref.finalize[Any, Any]] = weakref.WeakKeyDictionary()
# closes started and not yet done: held, or a task could be collected half way
_closing: set[Any] = set()

# the package each protocol needs (named in the ImportError)
_PACKAGES = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "az": "adlfs",
    "abfs": "adlfs",
    "abfss": "adlfs",
    "http": "aiohttp",
    "https": "aiohttp",
}
_CREDENTIALS = {
    "s3": "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary "
    "keys), or AWS_PROFILE, or pass storage_options={'key': ..., 'secret': ...}; for a public "
    "bucket pass storage_options={'anon': True}",
    "gs": "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or run `gcloud auth "
    "application-default login`, or pass storage_options={'token': ...}; for a public bucket "
    "pass storage_options={'token': 'anon'}",
    "az": "set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME with "
    "AZURE_STORAGE_ACCOUNT_KEY (or AZURE_STORAGE_SAS_TOKEN), or pass storage_options="
    "{'account_name': ..., 'account_key': ...}",
    "http": "pass storage_options={'headers': {'Authorization': ...}} or "
    "storage_options={'client_kwargs': {'auth': aiohttp.BasicAuth(user, password)}}",
}
_ALIASES = {"s3a": "s3", "gcs": "gs", "abfs": "az", "abfss": "az", "https": "http"}


def open_fetcher(
    url: str, storage_options: Mapping[str, Any] | None, policy: RetryPolicy
) -> Fetcher:
    """The fetcher that reads ``url``, on a filesystem made from ``storage_options``.

    Raises:
        ImportError: the protocol's filesystem package is not installed (the message names it).
        ValueError: fsspec knows no such protocol.
    """
    protocol = protocol_of(url)
    options = dict(storage_options or {})
    fsspec = _import("fsspec", protocol)
    if protocol in S3_SCHEMES:
        _limit_botocore(options, policy)
    try:
        fs = fsspec.filesystem(protocol, **options)
    except ImportError as exc:
        raise _missing_package(protocol, exc) from exc
    except ValueError as exc:
        raise ValueError(f"url={url!r}: fsspec cannot open protocol {protocol!r} ({exc})") from exc
    fetcher: Fetcher
    close: CloseClient | None = None
    if protocol in S3_SCHEMES:
        fetcher, close = S3Fetcher(fs, url), close_client
    elif protocol in HTTP_SCHEMES:
        fetcher, close = HTTPFetcher(fs, url), close_session
    else:  # its client is the store's own business: fsspec's finalizer closes it
        fetcher = GenericFetcher(fs, fs._strip_protocol(url))
    if close is not None and not _shared(fs):
        closer = weakref.finalize(fetcher, _close_client, fs, close, process_generation())
        closer.atexit = False  # at exit fsspec's own finalizer closes it, and waits
        _closers[fetcher] = closer
    return fetcher


def close_fetcher(fetcher: Fetcher) -> None:
    """Close the client of ``fetcher``'s filesystem now, when that filesystem is its alone.

    A filesystem fsspec shares among the files opened with the same options stays open for
    them. Safe in any process: a copy inherited through ``fork`` closes nothing of the parent's.
    """
    closer = _closers.pop(fetcher, None)
    if closer is not None:
        closer()


async def close_fetcher_here(fetcher: Fetcher) -> None:
    """Close the client of ``fetcher``'s own filesystem on the running loop, and wait for it.

    For a fetcher made on a loop that stops after its use (``close_fetcher`` only starts the
    close on the filesystem's loop, which would be gone before the close ran).
    """
    closer = _closers.pop(fetcher, None)
    detached = closer.detach() if closer is not None else None
    if detached is not None:
        _, _, (fs, close, _), _ = detached
        await close(fs)


def _shared(fs: Any) -> bool:
    """Whether ``fs`` is in fsspec's instance cache (handed to every caller with its options)."""
    cache = getattr(type(fs), "_cache", None)
    return cache is not None and cache.get(getattr(fs, "_fs_token", None)) is fs


def _close_client(fs: Any, close: CloseClient, generation: int) -> None:
    """Start ``close(fs)`` on the filesystem's event loop; never wait for it.

    Runs when a fetcher is closed or collected, and a collection runs on any thread: fsspec's
    loop thread, or a thread the loop may be waiting for (h5py's lock, see
    ``process.collection_paused``). So the close is only scheduled. (fsspec's own finalizer
    waits for the loop from the collecting thread, gives up after a moment under load, and
    then leaves s3fs's connections open.) The coroutine holds ``fs`` until the session is
    closed: the filesystem is freed after it, on the loop's thread.
    """
    if process_generation() != generation:  # a forked child's copy: the parent's client
        return
    loop = getattr(fs, "loop", None)
    if loop is None or loop.is_closed() or not loop.is_running():
        return  # no loop to close on: fsspec's finalizer closes what it can
    try:
        on_loop = asyncio.get_running_loop() is loop
    except RuntimeError:
        on_loop = False
    closing: Any
    if on_loop:
        closing = loop.create_task(close(fs))
    else:
        closing = asyncio.run_coroutine_threadsafe(close(fs), loop)
    _closing.add(closing)
    closing.add_done_callback(_closing.discard)


def credentials_hint(url: str) -> str:
    """What to set so that the store of ``url`` finds credentials."""
    protocol = protocol_of(url)
    return _CREDENTIALS.get(
        _ALIASES.get(protocol, protocol),
        f"pass the credentials fsspec's {protocol!r} filesystem takes in storage_options",
    )


def _limit_botocore(options: dict[str, Any], policy: RetryPolicy) -> None:
    """One attempt per botocore call, each within ``policy.attempt_s`` (we retry ourselves)."""
    config = dict(options.get("config_kwargs") or {})
    config.setdefault("retries", {"max_attempts": 1, "mode": "standard"})
    config.setdefault("connect_timeout", min(5.0, policy.attempt_s))
    config.setdefault("read_timeout", policy.attempt_s)
    options["config_kwargs"] = config


def _import(name: str, protocol: str) -> Any:
    try:
        return __import__(name)
    except ImportError as exc:
        raise _missing_package(protocol, exc) from exc


def _missing_package(protocol: str, exc: ImportError) -> ImportError:
    package = _PACKAGES.get(protocol, f"the fsspec implementation of {protocol!r}")
    return ImportError(
        f"reading {protocol}:// URLs needs fsspec and {package}: pip install 'nn-handler[remote]'"
        f"{'' if package in ('s3fs', 'aiohttp') else f' {package}'} ({exc})"
    )
