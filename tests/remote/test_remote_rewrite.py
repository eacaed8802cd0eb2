"""nn-handler rewrite reads its input from a URL (HTTP Range server, moto's S3) to a local file."""

import h5py
import numpy as np

from nn_handler.rewrite import rewrite_file

from helpers.object_servers import put_object
from helpers.rewrite_files import assert_rewritten, write_every_kind


def test_rewrite_from_http(http, tmp_path):
    src = write_every_kind(http.root / "in.h5", n=250)
    dst = tmp_path / "out.h5"
    report = rewrite_file(http.url("in.h5"), dst, shuffle_rows=2, memory="32MiB")
    assert report.source == http.url("in.h5")
    with h5py.File(dst) as f:
        assert f["_nn_handler/row_order"].attrs["source"] == "in.h5"
    assert_rewritten(src, dst, permuted={"x", "y", "u8", "b", "s", "fs", "img", "tab", "t",
                                          "g/h/z"})  # fmt: skip


def test_rewrite_from_s3_with_storage_options(s3, tmp_path):
    src = write_every_kind(tmp_path / "in.h5", n=120)
    put_object(s3, "rw-bucket", "in.h5", src.read_bytes())
    dst = tmp_path / "out.h5"
    rewrite_file("s3://rw-bucket/in.h5", dst, storage_options=s3, memory="32MiB")
    assert_rewritten(src, dst)
    with h5py.File(dst) as f:
        assert np.array_equal(f["y"][...], np.arange(120))
