import h5py
import numpy as np
import pytest

from nn_handler._io.formats.attrs import LabelReader, attribute_names, decode_value


def where():
    return "7 ('/x' in 'f.h5')"


@pytest.fixture
def obj(tmp_path):
    f = h5py.File(tmp_path / "a.h5", "w")
    d = f.create_dataset("x", data=np.arange(3))
    yield f, d
    f.close()


def test_names_in_name_order(obj):
    _, d = obj
    for key in ("b", "a", "c"):
        d.attrs[key] = 1
    assert attribute_names(d.id) == [b"a", b"b", b"c"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (np.int32(-3), -3),
        (np.uint64(2**63), 2**63),
        (np.float16(0.5), 0.5),
        (np.bool_(False), False),
        ("ünïcode", "ünïcode"),
        (b"vlen bytes", "vlen bytes"),
        (np.bytes_(b"fixed"), "fixed"),
        (np.bytes_(b"\xff\xfe"), b"\xff\xfe".decode("utf-8", "surrogateescape")),
        (np.complex128(1 - 1j), 1 - 1j),
    ],
)
def test_scalars_become_python_values(obj, value, expected):
    _, d = obj
    d.attrs["v"] = value
    got = LabelReader(None).read(d.id, where)["v"]
    assert got == expected and type(got) is type(expected)


def test_arrays_stay_numpy_and_strings_become_str(obj):
    _, d = obj
    d.attrs["f"] = np.ones((2, 2), np.float32)
    d.attrs["s"] = ["x", "yy"]
    d.attrs["b"] = np.array([[b"a"], [b"bc"]])
    d.attrs.create("arr_type", data=np.arange(6).reshape(2, 3), dtype=np.dtype("(3,)i2"))
    labels = LabelReader(None).read(d.id, where)
    assert labels["f"].dtype == np.float32 and labels["f"].shape == (2, 2)
    assert labels["s"].tolist() == ["x", "yy"] and labels["s"].dtype.kind == "U"
    assert labels["b"].tolist() == [["a"], ["bc"]] and labels["b"].shape == (2, 1)
    np.testing.assert_array_equal(labels["arr_type"], d.attrs["arr_type"])
    assert labels["arr_type"].shape == d.attrs["arr_type"].shape


def test_matches_h5py_for_numbers_and_arrays(obj):
    _, d = obj
    d.attrs["a"] = np.arange(5, dtype=">f8")
    d.attrs["e"] = np.array([1, 2], dtype=h5py.enum_dtype({"A": 1, "B": 2}, basetype="i1"))
    labels = LabelReader(None).read(d.id, where)
    for key in ("a", "e"):
        np.testing.assert_array_equal(labels[key], d.attrs[key])
        assert labels[key].dtype == d.attrs[key].dtype


def test_empty_and_references(obj):
    f, d = obj
    d.attrs["none"] = h5py.Empty("i4")
    assert LabelReader(None).read(d.id, where) == {"none": None}
    d.attrs["refs"] = np.array([f.ref, d.ref], dtype=h5py.ref_dtype)
    with pytest.raises(
        TypeError,
        match=r"attribute 'refs' of sample 7 \('/x' in 'f.h5'\) holds HDF5 object references",
    ):
        LabelReader(None).read(d.id, where)
    assert LabelReader([b"none"]).read(d.id, where) == {"none": None}


def test_missing_names_list_what_exists(obj):
    _, d = obj
    d.attrs["label"] = 1
    d.attrs["other"] = 2
    with pytest.raises(KeyError, match=r"has no attribute 'lab'; it has: 'label', 'other'"):
        LabelReader([b"label", b"lab"]).read(d.id, where)


def test_decode_value_rules():
    assert decode_value(np.array(3)) == 3
    assert decode_value(np.array(b"x")) == "x"
    arr = np.arange(3)
    assert decode_value(arr) is arr
    void = decode_value(np.array((1, 2.0), dtype=[("a", "i4"), ("b", "f8")]))
    assert isinstance(void, np.void) and void["a"] == 1
