import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from nn_handler.dataloaders._combined.batch import (
    FLOAT_DTYPES,
    check_float_dtype,
    group_by_file,
    to_batch,
)
from nn_handler.dataloaders._combined.fields import OutputField
from nn_handler.dataloaders._tensors.split import split_batch


@given(st.lists(st.integers(0, 4), max_size=40))
def test_group_by_file_partitions_positions(files):
    arr = np.array(files, dtype=np.int64)
    seen = []
    for file_no, pos in group_by_file(arr):
        assert np.all(arr[pos] == file_no)
        assert np.all(np.diff(pos) > 0)  # request order kept within a file
        seen.extend(pos.tolist())
    assert sorted(seen) == list(range(len(files)))
    assert len({f for f, _ in group_by_file(arr)}) == len(set(files))


FIELDS = {
    "x": OutputField("x", (2,), np.dtype(">f8"), "float"),
    "n": OutputField("n", (), np.dtype(">i4"), "other"),
    "s": OutputField("s", (), np.dtype(object), "string"),
}


@pytest.mark.parametrize("dtype", list(FLOAT_DTYPES))
def test_to_batch_casts_floats_only(dtype):
    arrays = {
        "x": np.array([[1.5, -2.25], [3.0, 1e-3]], dtype=">f8"),
        "n": np.array([7, -1], dtype=">i4"),
        "s": np.array(["a", "é"], dtype=object),
    }
    batch = to_batch(arrays, FIELDS, dtype, pin=False)
    assert batch["x"].dtype == dtype
    expected = torch.tensor([[1.5, -2.25], [3.0, 1e-3]], dtype=torch.float64).to(dtype)
    assert torch.equal(batch["x"], expected)
    assert batch["n"].dtype == torch.int32 and batch["n"].tolist() == [7, -1]
    assert batch["s"] == ["a", "é"]
    samples = split_batch(batch)
    assert len(samples) == 2
    assert samples[1]["s"] == "é" and samples[1]["n"].item() == -1
    assert samples[0]["x"].shape == (2,)


def test_check_float_dtype():
    assert check_float_dtype(torch.bfloat16) is torch.bfloat16
    for bad in (torch.int8, np.float32, [torch.float32]):
        with pytest.raises(
            TypeError, match=re.escape("dtype must be one of torch.float16, torch.bfloat16")
        ):
            check_float_dtype(bad)
