"""RemoteFile against real servers: the bytes, the requests, and every way a read can fail."""

from __future__ import annotations

import asyncio
import gc
import itertools
import pickle
import random
import time
import warnings
import weakref

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nn_handler._io.storage.remote.failures import RetryPolicy
from nn_handler._io.storage.remote.intervals import empty, union
from nn_handler._io.storage.remote.object_file import RemoteFile
from nn_handler._io.storage.remote.ranges import plan_requests
from nn_handler.dataloaders import FileChangedError, RemoteAccessError, RemoteReadError

from helpers.object_servers import put_object, range_server

DATA = np.random.default_rng(7).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
FAST = RetryPolicy(total_s=1.5, attempt_s=1.0, first_backoff_s=0.05)


def _read(source, ranges):
    buffers = [np.empty(n, np.uint8) for _, n in ranges]
    source.read_ranges(ranges, buffers)
    return [b.tobytes() for b in buffers]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    (root / "f.bin").write_bytes(DATA)
    with range_server(root) as server:
        yield server


@pytest.fixture(scope="module")
def s3_file(s3):
    put_object(s3, "bkt", "f.bin", DATA)
    return RemoteFile("s3://bkt/f.bin", s3)


RANGES = st.lists(
    st.tuples(st.integers(0, len(DATA) - 1), st.integers(0, 20_000)).map(
        lambda r: (r[0], min(r[1], len(DATA) - r[0]))
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ranges=RANGES)
def test_http_read_ranges_equal_the_bytes(served, ranges):
    source = RemoteFile(served.url("f.bin"), policy=RetryPolicy(gap=1000, max_request=7000))
    assert _read(source, ranges) == [DATA[o : o + n] for o, n in ranges]


@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ranges=RANGES)
def test_s3_read_ranges_equal_the_bytes(s3_file, ranges):
    assert _read(s3_file, ranges) == [DATA[o : o + n] for o, n in ranges]


@settings(max_examples=60, deadline=None)
@given(
    ranges=st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 50)), max_size=30),
    gap=st.integers(0, 40),
    max_request=st.integers(1, 120),
)
@example(ranges=[(289, 24), (350, 14), (363, 50)], gap=39, max_request=99)  # touch after a hole
def test_plan_requests_covers_each_range_once(ranges, gap, max_request):
    plan = plan_requests(ranges, gap=gap, max_request=max_request)
    members = sorted(k for r in plan for k in r.members)
    assert members == [k for k, (_, n) in enumerate(ranges) if n > 0]
    for req in plan:
        assert all(req.start <= ranges[k][0] and sum(ranges[k]) <= req.end for k in req.members)
        spans = union(empty(), [(ranges[k][0], sum(ranges[k])) for k in req.members]).tolist()
        assert spans[0][0] == req.start and spans[-1][1] == req.end
        assert all(b[0] - a[1] <= gap for a, b in itertools.pairwise(spans))  # holes fetched
    assert all(a.end <= b.start for a, b in itertools.pairwise(plan))


def test_neighbours_are_fetched_together(served):
    source = RemoteFile(served.url("f.bin"))
    before = source.requests
    _read(source, [(1000 * k, 500) for k in range(20)])  # gaps of 500 bytes: one request
    assert source.requests - before == 1


def test_pickled_copy_reads_the_same_version(served):
    source = RemoteFile(served.url("f.bin"))
    copy = pickle.loads(pickle.dumps(source))
    assert copy.identity == source.identity
    assert _read(copy, [(5, 10)]) == [DATA[5:15]]


@pytest.mark.parametrize("store", ["http", "s3"])
def test_replaced_object_fails_naming_the_url(store, http, s3):
    if store == "http":
        (http.root / "g.bin").write_bytes(DATA)
        source = RemoteFile(http.url("g.bin"))
        _read(source, [(0, 10)])
        (http.root / "g.bin").write_bytes(DATA[::-1])
    else:
        put_object(s3, "bkt", "g.bin", DATA)
        source = RemoteFile("s3://bkt/g.bin", s3)
        _read(source, [(0, 10)])
        put_object(s3, "bkt", "g.bin", DATA[::-1])
    with pytest.raises(FileChangedError, match=r"g\.bin.*changed after"):
        _read(source, [(0, 10)])


def test_server_ignoring_if_match_is_caught_by_the_etag(http):
    (http.root / "g.bin").write_bytes(DATA)
    source = RemoteFile(http.url("g.bin"))
    http.ignore_conditions = True
    (http.root / "g.bin").write_bytes(DATA[::-1] + b"x")
    with pytest.raises(FileChangedError, match="another version"):
        _read(source, [(0, 10)])


@pytest.mark.parametrize("statuses", [[500], [503, 503], [429, 502]])
def test_transient_statuses_are_retried(http, statuses):
    (http.root / "g.bin").write_bytes(DATA)
    source = RemoteFile(http.url("g.bin"), policy=FAST)
    http.fail_next = list(statuses)
    assert _read(source, [(7, 100)]) == [DATA[7:107]]


def test_persistent_503_fails_within_the_bound_naming_url_and_status(http):
    (http.root / "g.bin").write_bytes(DATA)
    source = RemoteFile(http.url("g.bin"), policy=FAST)
    http.fail_next = [503] * 1000
    began = time.monotonic()
    with pytest.raises(RemoteReadError, match=r"g\.bin.*kept failing.*503.*attempts"):
        _read(source, [(0, 10)])
    assert time.monotonic() - began < 5


def test_short_reply_is_an_error(http):
    (http.root / "g.bin").write_bytes(DATA)
    source = RemoteFile(http.url("g.bin"), policy=FAST)
    http.short_replies = True
    with pytest.raises(RemoteReadError, match="short reply"):
        _read(source, [(0, 100)])


@pytest.mark.timeout(60)
def test_stopped_server_fails_within_the_bound(http):
    (http.root / "g.bin").write_bytes(DATA)
    source = RemoteFile(http.url("g.bin"), policy=FAST)
    _read(source, [(0, 10)])
    http.stop()
    began = time.monotonic()
    with pytest.raises(RemoteReadError, match=r"g\.bin"):
        _read(source, [(0, 10)])
    assert time.monotonic() - began < 5


@pytest.mark.timeout(60)
def test_stalled_server_fails_within_the_bound(http):
    (http.root / "g.bin").write_bytes(DATA)
    source = RemoteFile(http.url("g.bin"), policy=RetryPolicy(total_s=1.0, attempt_s=0.3))
    http.latency_s = 5.0  # every reply later than an attempt may wait
    began = time.monotonic()
    with pytest.raises(RemoteReadError, match="time-out"):
        _read(source, [(0, 10)])
    assert time.monotonic() - began < 4


def test_missing_object_is_file_not_found(http, s3):
    with pytest.raises(FileNotFoundError, match="nope"):
        RemoteFile(http.url("nope.h5"), policy=FAST)
    with pytest.raises(FileNotFoundError, match="nope"):
        RemoteFile("s3://bkt/nope.h5", s3, policy=FAST)


def test_missing_credentials_name_the_variables(s3, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    options = {k: v for k, v in s3.items() if k not in ("key", "secret")}
    options["skip_instance_cache"] = True
    with pytest.raises(RemoteAccessError, match=r"AWS_ACCESS_KEY_ID.*AWS_SECRET_ACCESS_KEY"):
        RemoteFile("s3://bkt/f.bin", options, policy=FAST)


def test_a_range_past_the_end_is_refused(served):
    source = RemoteFile(served.url("f.bin"))
    with pytest.raises(FileChangedError, match="bytes up to"):
        _read(source, [(len(DATA) - 5, 10)])


def test_requests_run_with_automatic_collection_paused(served, monkeypatch):
    """h5py holds its lock while it reads through us; a collection on the event loop's thread
    freeing an h5py object would wait for that lock while we wait for the loop (a deadlock
    until the time bound): no automatic collection may start while a read waits."""
    seen: list[bool] = []
    get = RemoteFile._get

    async def recording(self, fetcher, start, end):
        seen.append(gc.isenabled())  # on the event loop's thread
        return await get(self, fetcher, start, end)

    monkeypatch.setattr(RemoteFile, "_get", recording)
    source = RemoteFile(served.url("f.bin"))
    assert gc.isenabled()
    assert _read(source, [(0, 10), (5000, 100)])[1] == DATA[5000:5100]
    assert seen and not any(seen)
    assert gc.isenabled()  # on again after


@pytest.mark.timeout(60)
def test_a_failed_read_leaves_no_request_running(http):
    # One request is refused for good while the others are still being retried: the read
    # fails at once, and the retries stop with it instead of running on in fsspec's thread.
    (http.root / "g.bin").write_bytes(DATA)
    source = RemoteFile(http.url("g.bin"), policy=RetryPolicy(total_s=3.0, attempt_s=1.0))
    _read(source, [(0, 10)])
    far_apart = [(k * 50_000, 10) for k in range(6)]  # six requests (gap is 32 KiB)
    http.fail_next = [503] * 5 + [403] + [503] * 1000
    with pytest.raises(RemoteAccessError, match=r"g\.bin"):
        _read(source, far_apart)
    sent = http.requests
    time.sleep(1.0)  # longer than the retries' backoff
    assert http.requests == sent


def test_retries_leave_the_random_module_alone(http):
    # The backoff's jitter is drawn on fsspec's thread: from the ``random`` module, it would
    # move a user's seeded sequence (and hypothesis reports it as a flaky strategy).
    (http.root / "g.bin").write_bytes(DATA)
    source = RemoteFile(http.url("g.bin"), policy=FAST)
    random.seed(5)
    before, sent = random.getstate(), http.requests
    http.fail_next = [503, 503, 503]
    assert _read(source, [(7, 100)]) == [DATA[7:107]]
    assert http.requests - sent == 4
    assert random.getstate() == before


@pytest.mark.timeout(60)
def test_a_read_over_its_bound_fails_and_stops_its_requests(http):
    # One request at a time, each slower than the whole read may take: the call's own bound
    # ends it, and the requests still queued are not sent afterwards.
    (http.root / "g.bin").write_bytes(DATA)
    policy = RetryPolicy(total_s=0.6, attempt_s=0.4, concurrency=1)
    source = RemoteFile(http.url("g.bin"), policy=policy)
    _read(source, [(0, 10)])
    http.latency_s = 0.3
    with pytest.raises(RemoteReadError, match=r"g\.bin.*did not answer within 0\.6s"):
        _read(source, [(k * 50_000, 10) for k in range(6)])
    time.sleep(0.5)  # let a request cut off mid-reply reach the server's count
    sent = http.requests
    time.sleep(1.0)
    assert http.requests == sent < 7


def test_reading_from_fsspecs_loop_thread_is_refused(served):
    import asyncio

    from fsspec.asyn import get_loop

    source = RemoteFile(served.url("f.bin"))
    _read(source, [(0, 10)])

    async def on_the_loop():
        return _read(source, [(0, 10)])

    with pytest.raises(RuntimeError, match="event loop thread"):
        asyncio.run_coroutine_threadsafe(on_the_loop(), get_loop()).result(10)


def _own_file(store, served, s3):
    """A RemoteFile on a filesystem of its own (not shared through fsspec's instance cache)."""
    if store == "http":
        url, options = served.url("f.bin"), {}
    else:
        put_object(s3, "bkt", "f.bin", DATA)
        url, options = "s3://bkt/f.bin", dict(s3)
    return RemoteFile(url, {**options, "skip_instance_cache": True})


def _collect(on_the_loop):
    """A full collection, here or on fsspec's event loop thread (collections run on any)."""
    if not on_the_loop:
        gc.collect()
        return
    from fsspec.asyn import get_loop

    async def collect():
        gc.collect()

    asyncio.run_coroutine_threadsafe(collect(), get_loop()).result(10)


@pytest.mark.parametrize("store", ["http", "s3"])
@pytest.mark.parametrize("drop", ["closed", "collected", "collected on the loop"])
def test_a_client_of_its_own_is_closed_when_its_file_goes(store, drop, served, s3, monkeypatch):
    # fsspec's finalizer closes a dropped filesystem's client by waiting a moment for the loop
    # from the collecting thread; under load it gives up (and s3fs's fallback then closes
    # nothing), leaving connections for a later collection to warn about in whatever test runs
    # then. It is switched off here: our close must do it all.
    import fsspec

    cls = fsspec.get_filesystem_class(store)
    monkeypatch.setattr(cls, "close_session", staticmethod(lambda loop, client: None))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        source = _own_file(store, served, s3)
        assert _read(source, [(0, 10), (200_000, 10)]) == [DATA[:10], DATA[200_000:200_010]]
        fs = weakref.ref(source.fetcher().fs)
        if drop == "closed":
            source.close()
        else:
            source._cycle = source  # left to the collector, as objects in a cycle are
            del source
            _collect(on_the_loop=drop == "collected on the loop")
        # the close runs on the loop and holds the filesystem (a cycle) until it is done: then
        # a collection frees it, and a session or connection left open would warn
        deadline = time.monotonic() + 10
        while fs() is not None and time.monotonic() < deadline:
            time.sleep(0.02)
            gc.collect()
        assert fs() is None
    assert not [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


def test_closing_a_file_leaves_a_shared_client_open(served):
    # fsspec hands one filesystem to every file opened with the same options in a process
    first, second = RemoteFile(served.url("f.bin")), RemoteFile(served.url("f.bin"))
    assert first.fetcher().fs is second.fetcher().fs
    first.close()
    time.sleep(0.1)  # a close, had one been started on the loop, would have run
    assert _read(second, [(5, 10)]) == [DATA[5:15]]
    assert not second.fetcher().fs._session.closed
