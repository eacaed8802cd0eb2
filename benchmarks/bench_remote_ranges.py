"""Which client fetches many byte ranges of one object fastest: ours, fsspec's or obstore's.

Run: ``python benchmarks/bench_remote_ranges.py [--latency 0.02] [--ranges 400]``

Reads ``--ranges`` random 16 KB ranges (a shuffle window of chunks) of a 64 MB object in one
call, from (1) an aiohttp Range server in its own process with ``--latency`` seconds added to
every request and (2) moto's S3 server, with:

* ``ours``: ``RemoteFile.read_ranges`` (conditional on the ETag, merged within 32 KB,
  64 requests in flight), and the same with merging off (``gap=0``);
* ``fsspec``: ``fs.cat_ranges`` (s3fs / HTTPFileSystem, async, unconditional);
* ``obstore``: ``obstore.get_ranges`` (Rust, merges within 1 MB, unconditional).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from nn_handler._io.storage.remote.failures import RetryPolicy  # noqa: E402
from nn_handler._io.storage.remote.object_file import RemoteFile  # noqa: E402

from helpers.object_servers import put_object, range_server, s3_server  # noqa: E402

SIZE, LENGTH = 64 * 1024**2, 16 * 1024


def _ranges(n: int, seed: int) -> list[tuple[int, int]]:
    starts = np.random.default_rng(seed).choice(SIZE // LENGTH, n, replace=False) * LENGTH
    return [(int(s), LENGTH) for s in sorted(starts)]


def _time(fn, repeats: int = 3) -> float:
    best = float("inf")
    for k in range(repeats):
        began = time.perf_counter()
        fn(k)
        best = min(best, time.perf_counter() - began)
    return best


def _ours(url: str, options: dict, n: int, gap: int) -> float:
    source = RemoteFile(url, options, policy=RetryPolicy(gap=gap))

    def run(k: int) -> None:
        ranges = _ranges(n, k)
        source.read_ranges(ranges, [np.empty(m, np.uint8) for _, m in ranges])

    return _time(run)


def _fsspec(url: str, options: dict, n: int) -> float:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url, **options)

    def run(k: int) -> None:
        ranges = _ranges(n, k)
        fs.cat_ranges([path] * n, [o for o, _ in ranges], [o + m for o, m in ranges])

    return _time(run)


def _obstore(store, path: str, n: int) -> float:
    import obstore

    def run(k: int) -> None:
        ranges = _ranges(n, k)
        obstore.get_ranges(
            store, path, starts=[o for o, _ in ranges], lengths=[m for _, m in ranges]
        )

    return _time(run)


def _report(where: str, n: int, times: dict[str, float]) -> None:
    print(f"\n{where}: {n} ranges of {LENGTH // 1024} KB, best of 3")
    for name, seconds in times.items():
        print(f"  {name:<22} {seconds * 1000:8.1f} ms   {n / seconds:9.0f} ranges/s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--ranges", type=int, default=400)
    args = parser.parse_args()
    data = np.random.default_rng(0).integers(0, 256, SIZE, dtype=np.uint8).tobytes()
    from obstore.store import HTTPStore, S3Store

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "f.bin").write_bytes(data)
        with range_server(Path(tmp), latency_s=args.latency) as server:
            url = server.url("f.bin")
            store = HTTPStore.from_url(server.url(""), client_options={"allow_http": True})
            _report(
                f"HTTP server, {args.latency * 1000:.0f} ms per request",
                args.ranges,
                {
                    "ours (gap 32 KB)": _ours(url, {}, args.ranges, 32 * 1024),
                    "ours (gap 0)": _ours(url, {}, args.ranges, 0),
                    "ours (gap 1 MB)": _ours(url, {}, args.ranges, 1024**2),
                    "fsspec cat_ranges": _fsspec(url, {}, args.ranges),
                    "obstore get_ranges": _obstore(store, "f.bin", args.ranges),
                },
            )
    n = max(20, args.ranges // 10)  # moto answers ~35 requests/s on 2 cores
    with s3_server() as options:
        put_object(options, "bkt", "f.bin", data)
        store = S3Store(
            "bkt",
            endpoint=options["endpoint_url"],
            access_key_id="testing",
            secret_access_key="testing",
            region="us-east-1",
            client_options={"allow_http": True},
        )
        _report(
            "moto S3 server (no added latency)",
            n,
            {
                "ours (gap 32 KB)": _ours("s3://bkt/f.bin", options, n, 32 * 1024),
                "ours (gap 0)": _ours("s3://bkt/f.bin", options, n, 0),
                "ours (gap 1 MB)": _ours("s3://bkt/f.bin", options, n, 1024**2),
                "s3fs cat_ranges": _fsspec("s3://bkt/f.bin", options, n),
                "obstore get_ranges": _obstore(store, "f.bin", n),
            },
        )


if __name__ == "__main__":
    main()
