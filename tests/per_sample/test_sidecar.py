import logging
import os

import numpy as np

from nn_handler.dataloaders._per_sample import sidecar as _sidecar
from nn_handler.dataloaders._per_sample.sidecar import (
    SIDECAR_SUFFIX,
    file_stamp,
    load_sidecar,
    save_sidecar,
    sidecar_path,
)

PARAMS = {"group": "/", "pattern": None}


def data_file(tmp_path, content=b"hdf5-ish bytes"):
    path = tmp_path / "d.h5"
    path.write_bytes(content)
    return str(path)


def arrays():
    return {"blob": np.frombuffer(b"ab", np.uint8).copy(), "offsets": np.array([0, 1, 2])}


def test_roundtrip_and_name(tmp_path):
    path = data_file(tmp_path)
    assert sidecar_path(path) == path + SIDECAR_SUFFIX == path + ".nnh-index.npz"
    assert save_sidecar(path, arrays(), {**PARAMS, **file_stamp(path), "extra": [1, "x"]})
    got, header = load_sidecar(path, PARAMS)
    assert got["blob"].tobytes() == b"ab" and got["offsets"].tolist() == [0, 1, 2]
    assert header["extra"] == [1, "x"] and header["version"] == 2
    assert sorted(os.listdir(tmp_path)) == ["d.h5", "d.h5.nnh-index.npz"]  # no temp left


def test_missing_stale_or_other_parameters_mean_rebuild(tmp_path, caplog):
    path = data_file(tmp_path)
    assert load_sidecar(path, PARAMS) is None
    save_sidecar(path, arrays(), {**PARAMS, **file_stamp(path)})
    with caplog.at_level(logging.DEBUG, logger=_sidecar._log.name):
        assert load_sidecar(path, {"group": "/x", "pattern": None}) is None
        assert "stale" in caplog.text and "group" in caplog.text
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
        assert load_sidecar(path, PARAMS) is None
    save_sidecar(path, arrays(), {**PARAMS, **file_stamp(path)})
    assert load_sidecar(path, PARAMS) is not None
    with open(path, "ab") as fh:
        fh.write(b"more")  # size changes
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # mtime as recorded
    assert load_sidecar(path, PARAMS) is None


def test_stamp_is_the_one_given_not_the_time_of_writing(tmp_path):
    path = data_file(tmp_path)
    before = file_stamp(path)
    with open(path, "ab") as fh:
        fh.write(b"changed during the build")
    save_sidecar(path, arrays(), {**PARAMS, **before})
    assert load_sidecar(path, PARAMS) is None


def test_corrupt_or_foreign_sidecars_are_ignored(tmp_path):
    path = data_file(tmp_path)
    side = sidecar_path(path)
    for content in (b"", b"garbage", b"PK\x03\x04broken zip"):
        with open(side, "wb") as fh:
            fh.write(content)
        assert load_sidecar(path, PARAMS) is None
    np.savez(side, blob=np.zeros(1))  # an npz without our header
    assert load_sidecar(path, PARAMS) is None
    with open(side, "wb") as fh:
        np.save(fh, np.zeros(3))  # a plain .npy
    assert load_sidecar(path, PARAMS) is None
    np.savez(side, header=np.frombuffer(b"{not json", np.uint8))
    assert load_sidecar(path, PARAMS) is None


def test_write_failure_is_logged_and_leaves_nothing(tmp_path, monkeypatch, caplog):
    path = data_file(tmp_path)

    def fail(src, dst):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(_sidecar.os, "replace", fail)
    with caplog.at_level(logging.INFO, logger=_sidecar._log.name):
        assert not save_sidecar(path, arrays(), {**PARAMS, **file_stamp(path)})
    assert (
        "cannot write the index sidecar" in caplog.text and "Read-only file system" in caplog.text
    )
    assert os.listdir(tmp_path) == ["d.h5"]


def test_sidecar_honours_the_umask(tmp_path):
    path = data_file(tmp_path)
    old = os.umask(0o022)
    try:
        save_sidecar(path, arrays(), {**PARAMS, **file_stamp(path)})
    finally:
        os.umask(old)
    assert os.stat(sidecar_path(path)).st_mode & 0o777 == 0o644
