"""Range reads from S3 (and S3-compatible stores) through s3fs's aiobotocore client.

Every ``GetObject`` carries ``If-Match: <ETag recorded at open>`` (and the version id when the
bucket keeps versions), so S3 refuses a replaced object with ``412 Precondition Failed`` instead
of serving new bytes at old offsets. s3fs's own retry loop is bypassed (we call the client, not
``cat_file``): ``RemoteFile`` retries under one time bound.
"""

from __future__ import annotations

from typing import Any

from ..identity import ObjectVersion
from .failures import ChangedError, DeniedError, FatalError, RequestError, TransientError

__all__ = ["S3Fetcher", "close_client"]

_CHANGED = {"PreconditionFailed", "NoSuchKey", "NoSuchVersion", "404", "412"}
_DENIED = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "403",
    "401",
}
_TRANSIENT = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "InternalError",
    "ServiceUnavailable",
    "503",
    "500",
    "502",
    "504",
    "429",
}


class S3Fetcher:
    """One S3 object: ``HeadObject`` for its version, conditional ranged ``GetObject``."""

    def __init__(self, fs: Any, url: str) -> None:
        self.fs = fs
        self.bucket, self.key, self.pinned = fs.split_path(url)

    async def head(self) -> ObjectVersion:
        kwargs = {"VersionId": self.pinned} if self.pinned else {}
        resp = await self._call("head_object", **kwargs)
        return ObjectVersion(
            size=int(resp["ContentLength"]),
            etag=resp.get("ETag"),
            version=resp.get("VersionId") if resp.get("VersionId") not in ("null", "") else None,
            modified=str(resp["LastModified"]) if resp.get("LastModified") else None,
        )

    async def get(self, start: int, end: int, version: ObjectVersion) -> bytes:
        kwargs: dict[str, Any] = {"Range": f"bytes={start}-{end - 1}"}
        if version.etag:
            kwargs["IfMatch"] = version.etag
        if version.version:
            kwargs["VersionId"] = version.version
        resp = await self._call("get_object", **kwargs)
        body = resp["Body"]
        try:
            return bytes(await body.read())
        except (TimeoutError, OSError) as exc:  # reset mid-body (aiohttp: OSError)
            raise TransientError(type(exc).__name__, f"reply cut short ({exc})") from exc
        finally:
            body.close()

    async def _call(self, method: str, **kwargs: Any) -> Any:
        from botocore import exceptions as boto  # s3fs depends on botocore

        try:
            await self.fs.set_session()
            client = await self.fs.get_s3(self.bucket)
            return await getattr(client, method)(Bucket=self.bucket, Key=self.key, **kwargs)
        except boto.NoCredentialsError as exc:
            raise DeniedError("no credentials", str(exc)) from exc
        except boto.ClientError as exc:
            raise _classify(exc) from exc
        except (TimeoutError, boto.HTTPClientError, boto.ConnectionError, OSError) as exc:
            raise TransientError(type(exc).__name__, str(exc)) from exc


async def close_client(fs: Any) -> None:
    """Close the botocore client of ``fs`` (an ``S3FileSystem``): its aiohttp sessions."""
    creator = getattr(fs, "_s3creator", None)  # made on first use (``set_session``)
    if creator is not None:  # what s3fs's own ``close_session`` exits, as ``async with`` would
        await creator.__aexit__(None, None, None)


def _classify(exc: Any) -> RequestError:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
    label = f"{status} {code}".strip()
    detail = str(error.get("Message") or exc)
    if code in _CHANGED or status in _CHANGED:
        return ChangedError(label, detail)
    if code in _DENIED or status in _DENIED:
        return DeniedError(label, detail)
    if code in _TRANSIENT or status in _TRANSIENT or status.startswith("5"):
        return TransientError(label, detail)
    return FatalError(label, detail)
