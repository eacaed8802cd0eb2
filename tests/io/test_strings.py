"""_io/file/strings.py: stored strings decoded in a chosen encoding, or an error naming the row."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nn_handler._io.file.strings import (
    as_bytes_array,
    check_encoding,
    decode_strings,
    in_rows,
)
from nn_handler.dataloaders import DataFileError

WHERE = in_rows("y_key='y'", "label_encoding", "f.h5", np.array([5, 9, 2]))


@pytest.mark.parametrize(
    "values",
    [
        np.array([b"ab", b"c", b""], dtype="S2"),
        np.array([b"ab", "c", b""], dtype=object),
        np.array(["ab", "c", ""]),
    ],
    ids=["fixed-bytes", "object-mixed", "unicode"],
)
def test_every_stored_form_decodes_to_str(values):
    out = decode_strings(values, "utf-8", WHERE)
    assert out.dtype.kind == "U" and out.tolist() == ["ab", "c", ""]
    assert decode_strings(values.reshape(3, 1), "utf-8", WHERE).shape == (3, 1)
    assert decode_strings(values, "bytes", WHERE).tolist() == [b"ab", b"c", b""]


def test_utf8_and_empty():
    assert decode_strings(np.array(["é".encode()], dtype=object), "utf-8", WHERE).tolist() == ["é"]
    empty = decode_strings(np.array([], dtype=object), "utf-8", WHERE)
    assert empty.shape == (0,) and empty.dtype.kind == "U"


def test_bytes_that_do_not_decode_name_the_field_the_row_the_bytes_and_the_argument():
    values = np.array([b"ok", b"fine", b"\xff" * 40], dtype=object)
    with pytest.raises(DataFileError) as info:
        decode_strings(values, "utf-8", WHERE)
    text = str(info.value)
    assert text.startswith("y_key='y' of row 2 in 'f.h5' is not utf-8 (b'" + "\\xff" * 32 + "...'")
    assert "pass label_encoding=" in text and info.value.path == "f.h5"
    assert isinstance(info.value.__cause__, UnicodeDecodeError)
    with pytest.raises(DataFileError, match=r"row 5 in 'f\.h5' is not ascii"):
        decode_strings(np.array(["é".encode()], dtype=object), "ascii", WHERE)


@given(st.lists(st.binary(max_size=12), max_size=20))
def test_latin1_decodes_any_bytes_as_python_does(items):
    values = np.array(items, dtype=object)
    expected = [v.rstrip(b"\0").decode("latin-1") for v in items]  # NumPy S drops trailing NULs
    assert decode_strings(values, "latin-1", WHERE).tolist() == expected
    assert as_bytes_array(values).tolist() == [v.rstrip(b"\0") for v in items]


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        ("no-such-codec", ValueError, "label_encoding='no-such-codec' is not a Python codec"),
        ("base64", ValueError, "label_encoding='base64' is not a text encoding"),
        (b"utf-8", TypeError, "label_encoding must be a codec name .* got bytes b'utf-8'"),
    ],
)
def test_check_encoding_names_the_argument(value, error, words):
    with pytest.raises(error, match=words):
        check_encoding("label_encoding", value)
    assert check_encoding("label_encoding", "latin-1") == "latin-1"
