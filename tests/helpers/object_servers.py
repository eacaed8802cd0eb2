"""Real servers on 127.0.0.1 for the remote tests: moto's S3 API and an HTTP Range server.

``RangeServer`` serves the files of one directory the way a static file server or a CDN does
(``Range``, ``ETag``, ``If-Match``), counts every request, and can add latency, fail the next
requests with a status, or be stopped mid-read: what the fault tests need.

Both run in a process of their own (one per test session, started on first use), never in a
thread of the test process: a garbage collection on a server's thread there can free an h5py
object, which waits for h5py's lock, held by the very read that waits for that server's reply
(seen once in CI: a read "did not answer" for 30 s). ``RangeServer`` here is the test's handle
on a server in that process; its settings and counters are read and written through it.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import gc
import os
import pickle
import re
import select
import socket
import subprocess
import sys
import threading
import time
import warnings
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
    """An event loop that knows every connection it made (``RangeServer._stop`` aborts them).

    It holds them strongly: a connection aiohttp let go of without closing it (seen under load,
    when the server stopped amid many requests) would otherwise be collected open, and warn.
    """

    def __init__(self) -> None:
        super().__init__()
        self.transports: set[asyncio.Transport] = set()

    def _make_socket_transport(self, *args: Any, **kwargs: Any) -> Any:
        transport = super()._make_socket_transport(*args, **kwargs)  # type: ignore[misc]
        self.transports.add(transport)
        return transport


class _ThreadedRangeServer:
    """An HTTP server for ``root`` on 127.0.0.1 that honours ``Range`` and ``If-Match``.

    It runs on an event loop in a thread of its own, in the server process.
    """

    def __init__(self, root: Path, *, latency_s: float = 0.0, port: int = 0) -> None:
        self.root = root
        self.latency_s = latency_s
        self.port = port or free_port()
        self.requests = 0
        self.ranges: list[tuple[str, int, int]] = []
        #: ``(X-Client header, name, start, end)`` of every range served: who asked for what
        #: (give each "node" its own header through ``storage_options={"headers": {...}}``)
        self.client_ranges: list[tuple[str, str, int, int]] = []
        self.fail_next: list[int] = []  # statuses for the next requests
        self.ignore_conditions = False
        self.short_replies = False  # send one byte less than asked (Content-Range says all)
        #: send an ETag with every reply (False: no ETag, no Last-Modified, nothing that tells
        #: a version from a same-size replacement, as some static servers and proxies do)
        self.etags = True
        #: answer 503 SlowDown (as S3 does) to requests above this many a second (0: never)
        self.throttle_per_s = 0.0
        self.throttled = 0  # requests answered 503 SlowDown
        self._recent: collections.deque[float] = collections.deque()
        self._loop = _Loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def start(self) -> _ThreadedRangeServer:
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
        aborted: set[asyncio.Transport] = set()
        for _ in range(10):  # more passes for connections whose accept was still under way
            fresh = self._loop.transports - aborted
            if not fresh and aborted:
                break
            for transport in fresh:
                transport.abort()
            aborted |= fresh
            await asyncio.sleep(0)  # their connection_lost runs now, while the loop runs
        self._loop.transports.clear()

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        if self.throttle_per_s and self._over_rate():
            self.throttled += 1
            return web.Response(status=503, text="<Error><Code>SlowDown</Code></Error>")
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
        tags = {"ETag": etag} if self.etags else {}
        if match is None:
            return web.Response(body=path.read_bytes(), headers=tags)
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
        headers = {**tags, "Content-Range": f"bytes {first}-{last}/{size}"}
        return web.Response(status=206, body=body, headers=headers)

    def _over_rate(self) -> bool:
        """True when the requests served in the last second reached ``throttle_per_s``."""
        now, recent = time.monotonic(), self._recent
        while recent and recent[0] <= now - 1.0:
            recent.popleft()
        if len(recent) >= self.throttle_per_s:
            return True
        recent.append(now)
        return False


#: the settings and counters of a ``RangeServer`` that live in the server process
_SERVER_STATE = (
    "requests",
    "ranges",
    "client_ranges",
    "fail_next",
    "ignore_conditions",
    "short_replies",
    "etags",
    "latency_s",
    "throttle_per_s",
    "throttled",
)
_REPLY_S = 60.0  # the bound on one answer of the server process


class _ServerProcess:
    """The process that runs this test session's servers, and the pipe that commands it.

    Started with ``subprocess`` (not ``multiprocessing``, whose exit handler in a forked child
    of the test process would terminate it), it ends when its stdin closes: when the test
    process and every child forked from it are gone.
    """

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--host"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._lock = threading.Lock()  # one command at a time, from any thread
        atexit.register(self.close)

    def close(self) -> None:
        """Close its stdin, which ends it; kill it if it has not ended within 10 s."""
        assert self._process.stdin is not None
        with contextlib.suppress(OSError):
            self._process.stdin.close()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        assert self._process.stdout is not None
        self._process.stdout.close()

    def call(self, *command: Any) -> Any:
        """Run ``command`` in the server process; its result, or its exception raised here."""
        process = self._process
        assert process.stdin is not None and process.stdout is not None
        with self._lock:
            pickle.dump(command, process.stdin)
            process.stdin.flush()
            ready, _, _ = select.select([process.stdout], [], [], _REPLY_S)
            if not ready:  # its answer may still come: the pipe is out of step for good
                self.close()
                _PROCESS.remove(self)
                raise TimeoutError(f"the test servers' process gave no answer to {command!r}")
            ok, value = pickle.load(process.stdout)
        if not ok:
            raise value
        return value


_PROCESS: list[_ServerProcess] = []


def _servers() -> _ServerProcess:
    if not _PROCESS:
        _PROCESS.append(_ServerProcess())
    return _PROCESS[0]


class _State:
    """A setting or counter of the server (``_SERVER_STATE``), read and written in its process."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, server: RangeServer, owner: type) -> Any:
        return _servers().call("get", server.id, self.name)

    def __set__(self, server: RangeServer, value: Any) -> None:
        _servers().call("set", server.id, self.name, value)


class RangeServer:
    """The test's handle on an HTTP Range server for ``root``, running in the server process.

    ``requests``, ``ranges``, ``client_ranges``, ``fail_next``, ``ignore_conditions``,
    ``short_replies``, ``etags`` and ``latency_s`` are the server's own: each read or
    assignment reaches it (assign a new list to ``fail_next``; a list read from it is a copy).
    """

    requests = _State()
    #: ``(name, start, end)`` of every range served
    ranges = _State()
    #: ``(X-Client header, name, start, end)`` of every range served: who asked for what
    #: (give each "node" its own header through ``storage_options={"headers": {...}}``)
    client_ranges = _State()
    fail_next = _State()  # statuses for the next requests
    ignore_conditions = _State()
    short_replies = _State()  # send one byte less than asked (Content-Range says all)
    etags = _State()  # False: no ETag (and never a Last-Modified): no validator at all
    latency_s = _State()
    throttle_per_s = _State()  # 503 SlowDown above this many requests a second (0: never)
    throttled = _State()

    def __init__(self, root: Path, *, latency_s: float = 0.0) -> None:
        self.root = root
        self.id, self.port = _servers().call("start_http", root, latency_s)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        """Stop serving: every connection is cut, a reply still being sent included."""
        _servers().call("stop_http", self.id)

    def close(self) -> None:
        """Stop, and fail if the server left a connection to the collector (a warning there)."""
        warned = _servers().call("close_http", self.id)
        assert not warned, f"the HTTP server left connections behind: {warned}"


@contextlib.contextmanager
def range_server(root: Path, **kwargs: Any) -> Iterator[RangeServer]:
    server = RangeServer(root, **kwargs)
    try:
        yield server
    finally:
        server.close()


@contextlib.contextmanager
def s3_server() -> Iterator[dict[str, Any]]:
    """moto's S3 API on 127.0.0.1, in the server process; yields the ``storage_options``."""
    port = _servers().call("start_s3")
    try:
        yield {
            "endpoint_url": f"http://127.0.0.1:{port}",
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"region_name": "us-east-1"},
        }
    finally:
        _servers().call("stop_s3", port)


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


class _Host:
    """The server process's side: the servers it runs, by id, and the commands on them."""

    def __init__(self) -> None:
        self.http: dict[int, _ThreadedRangeServer] = {}
        self.s3: dict[int, Any] = {}
        self.warned: list[str] = []

    def start_http(self, root: Path, latency_s: float) -> tuple[int, int]:
        server = _ThreadedRangeServer(root, latency_s=latency_s).start()
        self.http[id(server)] = server
        return id(server), server.port

    def get(self, key: int, name: str) -> Any:
        assert name in _SERVER_STATE, name
        return getattr(self.http[key], name)

    def set(self, key: int, name: str, value: Any) -> None:
        assert name in _SERVER_STATE, name
        setattr(self.http[key], name, value)

    def stop_http(self, key: int) -> None:
        self.http[key].stop()

    def close_http(self, key: int) -> list[str]:
        self.http.pop(key).close()
        gc.collect()  # what the server left to the collector warns now, into ``warned``
        warned, self.warned[:] = list(self.warned), []
        return warned

    def start_s3(self) -> int:
        from moto.server import ThreadedMotoServer

        port = free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        self.s3[port] = server
        return port

    def stop_s3(self, port: int) -> None:
        self.s3.pop(port).stop()


def _host() -> None:
    """Serve the commands of a test process (pickled on stdin) until it closes stdin."""
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    requests, replies = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a library prints goes to stderr, not into the replies
    host = _Host()
    warnings.simplefilter("always", ResourceWarning)
    warnings.showwarning = lambda message, *_: host.warned.append(str(message))  # type: ignore[assignment]
    while True:
        try:
            name, *args = pickle.load(requests)
        except EOFError:
            return
        try:
            reply: tuple[bool, Any] = (True, getattr(host, name)(*args))
        except Exception as error:  # the test process raises it
            reply = (False, error)
        try:
            data = pickle.dumps(reply)
        except Exception:  # an error that does not pickle: its text does
            data = pickle.dumps((False, RuntimeError(repr(reply[1]))))
        replies.write(data)
        replies.flush()


def main() -> None:
    """``python tests/helpers/object_servers.py ROOT PORT [LATENCY_S]``: serve until killed.

    (``--host`` instead: the server process of a test session.)
    """
    if sys.argv[1:] == ["--host"]:
        _host()
        return
    root, port = Path(sys.argv[1]), int(sys.argv[2])
    latency_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    _ThreadedRangeServer(root, latency_s=latency_s, port=port).start()
    print("ready", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
