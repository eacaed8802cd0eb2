"""The test servers themselves: nothing of theirs is left for the collector after a test."""

from __future__ import annotations

import gc
import socket
import time
import warnings

from helpers.object_servers import range_server


def test_a_server_stopped_mid_reply_leaves_no_connection_open(tmp_path):
    # A reply the client has not read yet when the server stops stays in the connection's
    # buffer: closed politely, the connection would wait for the client to read it, outlive
    # the server's loop, and warn ("unclosed transport") when collected. The server runs in a
    # process of its own, which collects as the server closes and reports what warned there:
    # ``close`` fails on it. Nothing may warn in this process either.
    size = 32 << 20  # more than the socket buffers hold
    (tmp_path / "f.bin").write_bytes(bytes(size))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with socket.socket() as client:
            with range_server(tmp_path) as server:
                client.connect(("127.0.0.1", server.port))
                client.sendall(
                    f"GET /f.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=0-{size - 1}\r\n\r\n".encode()
                )
                deadline = time.monotonic() + 10
                while not server.requests and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert server.requests == 1
                time.sleep(0.2)  # the reply fills the buffers
            gc.collect()
    assert not [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


def test_a_server_without_etags_gives_no_validator(http):
    (http.root / "f.bin").write_bytes(b"abcdef")

    def headers():
        with socket.create_connection(("127.0.0.1", http.port), timeout=10) as client:
            client.sendall(b"GET /f.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=0-2\r\n\r\n")
            reply = b""
            while b"\r\n\r\n" not in reply:
                reply += client.recv(4096)
        return reply.split(b"\r\n\r\n")[0].decode().lower()

    assert "etag:" in headers()
    http.etags = False
    assert "etag:" not in headers() and "last-modified:" not in headers()
    assert "content-range: bytes 0-2/6" in headers()
