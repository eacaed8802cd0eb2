"""Real servers on 127.0.0.1 for the remote tests: moto's S3 API and an HTTP Range server.

``RangeServer`` serves the files of one directory the way a static file server or a CDN does
(``Range``, ``ETag``, ``If-Match``), counts every request, and can add latency, fail the next
requests with a status, or be stopped mid-read: what the fault tests need. Both run in a thread
of the test process with their own event loop, and are stopped by their context managers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiohttp import web

_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Loop(asyncio.SelectorEventLoop):
    """An event loop that knows every connection it made (``RangeServer._stop`` aborts them)."""

    def __init__(self) -> None:
        super().__init__()
        self.transports: weakref.WeakSet[asyncio.Transport] = weakref.WeakSet()

    def _make_socket_transport(self, *args: Any, **kwargs: Any) -> Any:
        transport = super()._make_socket_transport(*args, **kwargs)  # type: ignore[misc]
        self.transports.add(transport)
        return transport


class RangeServer:
    """An HTTP server for ``root`` on 127.0.0.1 that honours ``Range`` and ``If-Match``."""

    def __init__(self, root: Path, *, latency_s: float = 0.0) -> None:
        self.root = root
        self.latency_s = latency_s
        self.port = free_port()
        self.requests = 0
        self.ranges: list[tuple[str, int, int]] = []
        #: ``(X-Client header, name, start, end)`` of every range served: who asked for what
        #: (give each "node" its own header through ``storage_options={"headers": {...}}``)
        self.client_ranges: list[tuple[str, str, int, int]] = []
        self.fail_next: list[int] = []  # statuses for the next requests
        self.ignore_conditions = False
        self.short_replies = False  # send one byte less than asked (Content-Range says all)
        self._loop = _Loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def start(self) -> RangeServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        """Stop serving: every connection is cut, a reply still being sent included."""
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._stop(self._runner), self._loop).result(10)
            self._runner = None

    def close(self) -> None:
        self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/{name:.*}", self._serve)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self, runner: web.AppRunner) -> None:
        await runner.cleanup()
        # cleanup closes a connection only once the reply in its buffer is sent, and forgets
        # one accepted while it waited for the others: abort every connection this server
        # made, or it outlives this loop and the collector warns about it ("unclosed
        # transport") in whatever test runs then
        for _ in range(2):  # a second pass for one whose accept was still under way
            for transport in list(self._loop.transports):
                transport.abort()
            await asyncio.sleep(0)  # their connection_lost runs now, while the loop runs

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if self.fail_next:
            return web.Response(status=self.fail_next.pop(0), text="injected failure")
        path = self.root / request.match_info["name"]
        if not path.is_file():
            return web.Response(status=404, text="not found")
        st = os.stat(path)
        etag = f'"{st.st_size:x}-{st.st_mtime_ns:x}-{st.st_ino:x}"'
        wanted = request.headers.get("If-Match")
        if wanted and wanted != etag and not self.ignore_conditions:
            return web.Response(status=412, text="precondition failed")
        match = _RANGE.fullmatch(request.headers.get("Range", ""))
        size = st.st_size
        if match is None:
            return web.Response(body=path.read_bytes(), headers={"ETag": etag})
        first = int(match.group(1))
        last = min(int(match.group(2) or size - 1), size - 1)
        if first >= size:
            return web.Response(status=416, headers={"Content-Range": f"bytes */{size}"})
        self.ranges.append((request.match_info["name"], first, last + 1))
        client = request.headers.get("X-Client", "")
        self.client_ranges.append((client, request.match_info["name"], first, last + 1))
        with open(path, "rb") as f:  # only the bytes asked for: large files stay cheap
            f.seek(first)
            body = f.read(last + 1 - first - int(self.short_replies))
        headers = {"ETag": etag, "Content-Range": f"bytes {first}-{last}/{size}"}
        return web.Response(status=206, body=body, headers=headers)


@contextlib.contextmanager
def range_server(root: Path, **kwargs: Any) -> Iterator[RangeServer]:
    server = RangeServer(root, **kwargs).start()
    try:
        yield server
    finally:
        server.close()


@contextlib.contextmanager
def s3_server() -> Iterator[dict[str, Any]]:
    """moto's S3 API on 127.0.0.1; yields the ``storage_options`` that reach it."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield {
            "endpoint_url": f"http://127.0.0.1:{port}",
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"region_name": "us-east-1"},
        }
    finally:
        server.stop()


def put_object(options: dict[str, Any], bucket: str, key: str, data: bytes) -> None:
    """Create ``bucket`` if needed and write ``key`` (with boto3, not the code under test)."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=options["endpoint_url"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key=key, Body=data)


def main() -> None:
    """``python tests/helpers/object_servers.py ROOT PORT [LATENCY_S]``: serve until killed."""
    import sys
    import time

    root, port = Path(sys.argv[1]), int(sys.argv[2])
    server = RangeServer(root, latency_s=float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)
    server.port = port
    server.start()
    print("ready", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
