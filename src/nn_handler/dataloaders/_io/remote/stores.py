"""The fsspec filesystem and the fetcher for a URL, and what to do when credentials are missing.

``storage_options`` are passed to the filesystem as pandas, xarray and anndata pass them (for
S3: ``key``, ``secret``, ``token``, ``anon``, ``profile``, ``endpoint_url``, ``client_kwargs``,
…). Credentials come from the environment by default (each store's own chain: variables, profile,
instance role). We only add time limits to botocore's client (unless the user set their own):
our retry loop (``object_file.py``) is the one that bounds the time a read may take.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .failures import RetryPolicy
from .generic import Fetcher, GenericFetcher
from .http import HTTPFetcher
from .s3 import S3Fetcher
from .urls import HTTP_SCHEMES, S3_SCHEMES, protocol_of

__all__ = ["credentials_hint", "open_fetcher"]

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
    if protocol in S3_SCHEMES:
        return S3Fetcher(fs, url)
    if protocol in HTTP_SCHEMES:
        return HTTPFetcher(fs, url)
    return GenericFetcher(fs, fs._strip_protocol(url))


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
