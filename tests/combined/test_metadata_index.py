from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nn_handler.dataloaders._combined import metadata as _metadata_index
from nn_handler.dataloaders._combined.fields import FieldInfo, FileSchema
from nn_handler.dataloaders._combined.metadata import (
    check_filter_fields,
    concat_index,
    has_class,
    removed_total,
    select_rows,
    valid_steps,
)
from nn_handler.dataloaders._combined.sample_filters import FilterSpec


@dataclass
class ArrayColumns:
    """A ColumnSource over in-memory arrays that records every read."""

    schema: FileSchema
    data: dict
    reads: list

    def read(self, field, rows):
        assert np.all(np.diff(rows) > 0)  # sorted and unique, as the pool's readers get them
        self.reads.append((field, rows.size))
        return self.data[field][rows]


def _columns(data):
    n = len(next(iter(data.values())))
    fields = {k: FieldInfo(k, n, tuple(v.shape[1:]), v.dtype) for k, v in data.items()}
    return ArrayColumns(FileSchema("mem.h5", n, fields), data, [])


def test_valid_steps_any_layout():
    rows = np.ones((2, 3, 4), dtype=np.float32)  # (n, channels, time)
    rows[0, :, 0] = 0  # all channels zero: invalid
    rows[0, 1, 1] = 0  # one channel zero: still valid
    rows[1, 2, 3] = np.nan  # one channel NaN: invalid
    rows[1, 0, 2] = np.inf
    assert valid_steps(rows, -1).tolist() == [[False, True, True, True], [True, True, False, False]]
    assert valid_steps(np.moveaxis(rows, 2, 1), 0).tolist() == valid_steps(rows, 1 - 2).tolist()
    ints = np.array([[0, 3, 0]], dtype=np.int16)
    assert valid_steps(ints, 0).tolist() == [[False, True, False]]


@settings(deadline=None)
@given(
    hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=3, max_dims=3, max_side=4),
        elements=st.sampled_from([0.0, 1.0, np.nan, -np.inf]),
    )
)
def test_valid_steps_match_a_loop(rows):
    got = valid_steps(rows, -1)
    for i in range(rows.shape[0]):
        for t in range(rows.shape[2]):
            step = rows[i, :, t]
            assert got[i, t] == bool(np.all(np.isfinite(step)) and np.any(step != 0))


def test_has_class():
    onehot = np.eye(3)[[[0, 1], [2, 2], [1, 1]]]  # (n=3, T=2, C=3)
    assert has_class(onehot, 1).tolist() == [True, False, True]
    assert has_class(np.eye(3)[[0, 2]], 2).tolist() == [False, True]  # (n, C)
    assert has_class(np.zeros((0, 4, 3)), 0).tolist() == []


def test_select_rows_reads_only_survivors_in_blocks(monkeypatch):
    monkeypatch.setattr(_metadata_index, "_BLOCK_BYTES", 2 * 3 * 8)  # two rows of target
    data = {
        "cs_label": np.array([1, 1, 0, 1, 1, 1, 0], dtype=np.int8),
        "epoch": np.array([1.0, 5.0, 5.0, np.nan, 7.0, 9.0, 3.0]),
        "target": np.eye(3)[[0, 1, 1, 1, 2, 1, 1]],
    }
    cols = _columns(data)
    spec = FilterSpec.build(cs_label=True, epoch_min=2, label=1)
    rows, removed = select_rows(spec, cols)
    assert rows.tolist() == [1, 5]
    assert removed == {"cs_label": 2, "epoch_range": 2, "label": 1}
    # cs_label reads all 7; epoch reads the 5 survivors; target the 3 left, in blocks of 2
    assert cols.reads == [("cs_label", 7), ("epoch", 5), ("target", 2), ("target", 1)]


def test_select_rows_stops_reading_when_nothing_is_left():
    cols = _columns({"cs_label": np.zeros(4, dtype=bool), "epoch": np.arange(4.0)})
    rows, removed = select_rows(FilterSpec.build(cs_label=True, epoch_max=2), cols)
    assert rows.size == 0 and removed == {"cs_label": 4, "epoch_range": 0}
    assert cols.reads == [("cs_label", 4)]


def test_where_gets_whole_columns_with_str_ids():
    data = {
        "guid": np.array([b"a", b"b", b"a"]),
        "weight": np.array([0.1, 0.9, 0.5]),
        "fhr_st": np.zeros((3, 2)),
    }
    seen = {}

    def rule(cols):
        seen.update(cols)
        return cols["guid"] == "a"

    rows, removed = select_rows(FilterSpec.build(where=rule), _columns(data))
    assert rows.tolist() == [0, 2] and removed == {"where": 1}
    assert sorted(seen) == ["guid", "weight"]  # only one-value-per-sample fields
    assert seen["guid"].dtype.kind == "U"


def test_check_filter_fields_errors():
    cols = _columns({"target": np.eye(2)[[0, 1]], "fhr_st": np.zeros((2, 5))})
    with pytest.raises(ValueError, match=r"label=2 is outside the class range 0\.\.1"):
        check_filter_fields(FilterSpec.build(label=2), cols.schema)
    with pytest.raises(ValueError, match="time_axis=-2 is not an axis of field 'fhr_st'"):
        check_filter_fields(FilterSpec.build(min_valid_fraction=0.5, time_axis=-2), cols.schema)
    check_filter_fields(FilterSpec.build(label=1, min_valid_fraction=0.5), cols.schema)


def test_concat_index_and_totals():
    file_of, row_of = concat_index([(0, np.array([1, 4])), (3, np.array([0]))])
    assert file_of.tolist() == [0, 0, 3] and row_of.tolist() == [1, 4, 0]
    assert concat_index([])[0].dtype == np.int64
    assert removed_total([{"a": 1}, {"a": 2, "b": 1}], ["a", "b", "c"]) == {"a": 3, "b": 1, "c": 0}
