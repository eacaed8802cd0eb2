"""``nn-handler inspect`` and ``bench`` on URLs, run as a subprocess against the local servers."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from nn_handler import cli
from nn_handler._io.storage.remote import object_file
from nn_handler._io.storage.remote.failures import RetryPolicy
from nn_handler.bench import file_bench as fb
from nn_handler.bench import remote_file as rf
from nn_handler.cli import _options

from helpers.object_servers import put_object

SRC = Path(__file__).resolve().parents[2] / "src"
N, WIDTH, CHUNK = 2000, 8, 50
MOTO_REGION = '{"region_name": "us-east-1"}'  # a JSON value: parsed into a dict


def _write(path: Path) -> Path:
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        x = rng.standard_normal((N, WIDTH)).astype(np.float32)
        f.create_dataset("x", data=x, chunks=(CHUNK, WIDTH), compression="gzip")
        f.create_dataset("y", data=rng.integers(0, 10, N))
    return path


def run(*args: object, env: dict[str, str] | None = None, timeout: float = 120):
    """The command in a fresh interpreter (this checkout's sources first); a traceback fails."""
    env = dict(os.environ if env is None else env, PYTHONWARNINGS="error")
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "nn_handler.cli", *map(str, args)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


def _s3_args(options: dict) -> list[str]:
    """``options`` (moto's endpoint and test keys) as repeated ``--storage-option``."""
    return [
        *("--storage-option", f"endpoint_url={options['endpoint_url']}"),
        *("--storage-option", "key=testing", "--storage-option", "secret=testing"),
        *("--storage-option", f"client_kwargs={MOTO_REGION}"),
    ]


def test_storage_option_values_are_json_when_they_parse():
    assert _options._storage_option("anon=true") == ("anon", True)
    assert _options._storage_option("retries=3") == ("retries", 3)
    assert _options._storage_option(f"client_kwargs={MOTO_REGION}") == (
        "client_kwargs",
        {"region_name": "us-east-1"},
    )
    assert _options._storage_option("endpoint_url=http://h:9000/a=b") == (
        "endpoint_url",
        "http://h:9000/a=b",
    )
    assert _options._storage_option("profile=") == ("profile", "")


@pytest.mark.slow  # subprocesses
def test_inspect_a_url_on_http_as_text_and_json(http):
    _write(http.root / "f.h5")
    code, out, err = run("inspect", http.url("f.h5"))
    assert code == 0, err
    assert out.startswith(f"{http.url('f.h5')}  (")
    assert f"x  shape=({N}, {WIDTH}) dtype=float32 layout=chunked" in out
    assert "reads: decode" in out
    code, out, err = run("inspect", http.url("f.h5"), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["path"] == http.url("f.h5")
    assert report["file_bytes"] == (http.root / "f.h5").stat().st_size


@pytest.mark.slow  # subprocesses
def test_inspect_an_s3_object_with_storage_options(s3, tmp_path):
    put_object(s3, "cli", "f.h5", _write(tmp_path / "f.h5").read_bytes())
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    code, out, err = run("inspect", "s3://cli/f.h5", *_s3_args(s3), env=env)
    assert code == 0, err
    assert "s3://cli/f.h5" in out
    assert f"y  shape=({N},) dtype=int64 layout=contiguous" in out


@pytest.mark.slow  # subprocesses
def test_missing_credentials_name_the_variables(s3):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    # no profile file, no instance-metadata probe: only the environment could hold keys
    env.update(AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    endpoint = f"endpoint_url={s3['endpoint_url']}"
    code, out, err = run("inspect", "s3://cli/f.h5", "--storage-option", endpoint, env=env)
    assert code == 1
    assert out == ""
    assert err.startswith("nn-handler inspect: error: 's3://cli/f.h5' refused access")
    assert "AWS_ACCESS_KEY_ID" in err
    assert len(err.strip().splitlines()) == 1


def test_bad_urls_and_options_are_one_line_errors(http, tmp_path, capsys):
    local = _write(tmp_path / "f.h5")
    cases = [
        (["inspect", http.url("nope.h5")], "no object at url="),
        (["inspect", "nosuchprotocol://b/f.h5"], "fsspec cannot open protocol"),
        (["inspect", str(local), "--storage-option", "anon=true"], "applies to URLs only"),
        (["bench", str(local), "--x-key", "x", "--cache-dir", str(tmp_path)], "applies to URLs"),
    ]
    for args, message in cases:
        assert cli.main(args) == 1
        out, err = capsys.readouterr()
        assert out == ""
        assert err.startswith(f"nn-handler {args[0]}: error: ")
        assert message in err
        assert len(err.strip().splitlines()) == 1, err
    with pytest.raises(SystemExit) as usage:
        cli.main(["inspect", http.url("f.h5"), "--storage-option", "no-equals-sign"])
    assert usage.value.code == 2
    assert "expected KEY=VALUE, got 'no-equals-sign'" in capsys.readouterr().err


@pytest.mark.skipif(
    importlib.util.find_spec("gcsfs") is not None,
    reason="gcsfs is installed: gs:// URLs do not lack their package",
)
def test_a_missing_filesystem_package_is_named(capsys):
    assert cli.main(["inspect", "gs://bucket/f.h5"]) == 1
    err = capsys.readouterr().err
    assert "needs fsspec and gcsfs: pip install 'nn-handler[remote]' gcsfs" in err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.timeout(60)
def test_an_unreachable_server_fails_within_the_bound(http, monkeypatch, capsys):
    _write(http.root / "f.h5")
    url = http.url("f.h5")
    http.stop()  # the port now refuses connections
    monkeypatch.setattr(object_file, "RetryPolicy", lambda: RetryPolicy(total_s=2, attempt_s=1))
    began = time.monotonic()
    assert cli.main(["inspect", url]) == 1
    assert time.monotonic() - began < 10
    err = capsys.readouterr().err
    assert err.startswith(f"nn-handler inspect: error: {url!r} kept failing")
    assert "attempts over" in err


def _table(out: str) -> dict[str, float]:
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ")]
    return {r[0][2:]: float(r[1].replace(",", "")) for r in rows[1:] if len(r) == 4}


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_bench_a_url_with_a_cache_dir(http, tmp_path):
    _write(http.root / "f.h5")
    cache = tmp_path / "node-cache"
    args = ("bench", http.url("f.h5"), "--x-key", "x", "--y-key", "y", "--seconds", "0.3")
    code, out, err = run(*args, "--batch-size", "64", "--cache-dir", cache)
    assert code == 0, err
    rates = _table(out)
    timed = [fb.GETITEMS, fb.EPOCH, fb.CHUNK, fb.BLOCKS, rf.CACHE_COLD, rf.CACHE_WARM]
    assert list(rates) == [rf.NAIVE_FSSPEC, *timed, fb.CACHED]
    assert fb.NAIVE not in rates  # h5py cannot open a URL: its baseline is the fsspec one
    assert all(rate > 0 for rate in rates.values())
    assert "over the network, without cache_dir: each pass fetches again" in out
    stream, cached, _preload = out.split("recommendation:\n")[1].strip().splitlines()
    assert f"cache_dir={str(cache)!r}" in stream
    assert cached.startswith("  - cache_dir: H5LazyDataset + batched_loader + ")
    assert "read the same batches back from it at" in cached
    assert list(cache.iterdir()) == []  # the scratch entry is removed


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_bench_an_s3_object_without_a_cache_dir_advises_one(s3, tmp_path):
    put_object(s3, "cli", "b.h5", _write(tmp_path / "b.h5").read_bytes())
    args = ("bench", "s3://cli/b.h5", "--x-key", "x", "--seconds", "0.2", *_s3_args(s3))
    code, out, err = run(*args, "--batch-size", "500")
    assert code == 0, err
    assert rf.NAIVE_FSSPEC in _table(out)
    assert rf.CACHE_WARM not in _table(out)
    assert "storage_options=..., cache_dir='<node-local dir>'" in out
    assert "testing" not in out  # the keys given are not echoed
    assert "measure it with --cache-dir DIR" in out
