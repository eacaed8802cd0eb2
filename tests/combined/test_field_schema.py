import h5py
import numpy as np
import pytest

from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler.dataloaders._combined.fields import (
    DEFAULT_FIELDS,
    FieldInfo,
    FileSchema,
    field_list,
    output_fields,
    resolve_field_names,
    scan_file,
)


def test_resolve_field_names_renames_and_adds():
    keys = resolve_field_names({"guid": "meta/id", "extra": "x"})
    assert list(keys)[: len(DEFAULT_FIELDS)] == list(DEFAULT_FIELDS)
    assert keys["guid"] == "meta/id" and keys["extra"] == "x" and keys["epoch"] == "epoch"
    assert resolve_field_names(None) == {n: n for n in DEFAULT_FIELDS}


def test_scan_file_reads_shapes_without_data(make_h5):
    dt = h5py.string_dtype("utf-8")
    path = make_h5({"fhr_st": np.zeros((4, 2, 3), np.float32), "epoch": np.arange(4.0)})
    with h5py.File(path, "a") as f:
        f.create_dataset("guid", data=["a", "b", "c", "d"], dtype=dt)
        f.create_group("target")
    source = H5Source(path, FileOptions())
    keys = {"fhr_st": "fhr_st", "epoch": "epoch", "guid": "guid", "weight": "weight"}
    schema = scan_file(source, keys)
    assert schema.length == 4 and set(schema.fields) == {"fhr_st", "epoch", "guid"}
    assert schema.fields["fhr_st"].row_shape == (2, 3) and schema.fields["guid"].is_string
    assert schema.fields["fhr_st"].row_nbytes == 24 and not schema.fields["epoch"].is_string
    with pytest.raises(TypeError, match=r"field 'target' .* is a group"):
        scan_file(source, {"target": "target"})
    source.close()


def _schema(path, **fields):
    infos = {k: FieldInfo(k, 2, shape, np.dtype(dt)) for k, (shape, dt) in fields.items()}
    return FileSchema(path, 2, infos)


def test_output_fields_promote_and_classify():
    a = _schema("a", w=((), "f4"), n=((3,), ">i2"), s=((), "S3"), b=((), "?"))
    b = _schema("b", w=((), "f8"), n=((3,), "i1"), s=((), h5py.string_dtype()), b=((), "?"))
    out = output_fields([a, b], ["w", "n", "s", "b"])
    assert (out["w"].kind, out["w"].dtype) == ("float", np.dtype("f8"))
    assert (out["n"].kind, out["n"].dtype, out["n"].row_shape) == ("other", np.dtype("i2"), (3,))
    assert out["n"].dtype.isnative
    assert (out["s"].kind, out["s"].dtype) == ("string", np.dtype(object))
    assert out["b"].dtype == np.dtype(bool)


def test_output_fields_reject_what_torch_cannot_hold():
    compound = _schema("c", r=((), [("a", "i4"), ("b", "f4")]))
    with pytest.raises(TypeError, match=r"field 'r' .* torch cannot represent"):
        output_fields([compound], ["r"])


def test_field_list():
    assert field_list(None) is None
    assert field_list(("a", "b", "a")) == ["a", "b"]
    with pytest.raises(TypeError, match="load_fields must hold field names"):
        field_list(["a", 3])
