import numpy as np
import pytest

from nn_handler.dataloaders._combined.sample_filters import FILTERS, FilterSpec


def test_defaults_are_inactive():
    spec = FilterSpec.build()
    assert spec.active() == () and spec.needs() == {}


def test_active_filters_and_needed_fields_in_order():
    spec = FilterSpec.build(
        where=lambda c: c,
        min_valid_fraction=0,
        valid_field="sig",
        label=0,
        epoch_max=3,
        bg_label=np.bool_(False),
        cs_label=True,
        allowed_guids=[b"x", "y", np.str_("x")],
    )
    assert spec.active() == FILTERS
    assert spec.needs() == {
        "guid": "allowed_guids",
        "cs_label": "cs_label",
        "bg_label": "bg_label",
        "epoch": "epoch_min/epoch_max",
        "target": "label",
        "sig": "min_valid_fraction",
    }
    assert spec.allowed_guids.tolist() == ["x", "y"] and spec.bg_label is False
    assert spec.epoch_min is None and spec.epoch_max == 3.0


def test_equal_bounds_are_allowed():
    spec = FilterSpec.build(epoch_min=np.float32(2), epoch_max=2)
    assert (spec.epoch_min, spec.epoch_max) == (2.0, 2.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epoch_min": True}, "epoch_min must be a number or None, got True"),
        ({"time_axis": 1.5}, "time_axis must be an integer, got float 1.5"),
        ({"valid_field": ""}, "valid_field must be a non-empty field name, got ''"),
        ({"allowed_guids": 5}, "allowed_guids must be an iterable of ids"),
        ({"label": True}, "label must be an integer, got bool True"),
    ],
)
def test_argument_errors(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        FilterSpec.build(**kwargs)
