import functools
import pickle

import numpy as np
import pytest
import torch
from torch.utils.data import default_collate

from nn_handler.dataloaders._per_sample.collate import collate_labels, pad_collate


def sample(shape, value, **labels):
    return {"data": torch.full(shape, value, dtype=torch.float32), "labels": labels}


def test_pads_every_varying_axis_with_lengths_mask_and_values():
    batch = [sample((2, 3), 1.0), sample((4, 1), 2.0), sample((1, 2), 3.0)]
    out = pad_collate(batch, padding_value=-5)
    assert set(out) == {"data", "lengths", "mask", "labels"}
    assert out["data"].shape == (3, 4, 3) and out["mask"].shape == (3, 4, 3)
    assert out["lengths"].dtype == torch.int64
    assert out["lengths"].tolist() == [[2, 3], [4, 1], [1, 2]]
    for b, (s, v) in enumerate((((2, 3), 1.0), ((4, 1), 2.0), ((1, 2), 3.0))):
        region = (b, slice(0, s[0]), slice(0, s[1]))
        assert (out["data"][region] == v).all() and out["mask"][region].all()
        assert out["mask"][b].sum().item() == s[0] * s[1]
        assert (out["data"][b][~out["mask"][b]] == -5).all()
    assert out["labels"] == {}


def test_fixed_shapes_match_default_collate():
    batch = [sample((2, 2), float(i), label=i, name=f"s{i}") for i in range(3)]
    out = pad_collate(batch)
    ref = default_collate(batch)
    assert torch.equal(out["data"], ref["data"]) and out["mask"].all()
    assert torch.equal(out["labels"]["label"], ref["labels"]["label"])
    assert out["labels"]["name"] == ref["labels"]["name"] == ["s0", "s1", "s2"]


def test_axes_restrict_what_may_differ():
    batch = [sample((3, 2), 1.0), sample((5, 2), 1.0)]
    assert pad_collate(batch, axes=0)["data"].shape == (2, 5, 2)
    assert pad_collate(batch, axes=[-2])["data"].shape == (2, 5, 2)
    with pytest.raises(
        ValueError,
        match=r"samples differ along axis 0, which is not in axes; shapes: \[\(3, 2\), \(5, 2\)\]",
    ):
        pad_collate(batch, axes=1)
    with pytest.raises(ValueError, match=r"axes=5 must be None or sample axes in \[-2, 2\)"):
        pad_collate(batch, axes=5)
    with pytest.raises(ValueError, match="axes=True must be None"):
        pad_collate(batch, axes=True)


def test_scalar_samples():
    out = pad_collate([{"data": torch.tensor(1.5)}, {"data": torch.tensor(2.5)}])
    assert out["data"].tolist() == [1.5, 2.5] and out["lengths"].shape == (2, 0)
    assert out["mask"].all()


def test_bad_batches():
    with pytest.raises(TypeError, match="needs a non-empty batch"):
        pad_collate([])
    with pytest.raises(TypeError, match="sample 1 must be a dict with a tensor 'data'"):
        pad_collate([sample((1,), 0), {"data": np.zeros(1)}])
    with pytest.raises(TypeError, match="sample 0 must be a dict"):
        pad_collate([torch.zeros(2)])
    with pytest.raises(ValueError, match=r"samples differ in rank; shapes: \[\(1,\), \(1, 1\)\]"):
        pad_collate([sample((1,), 0), sample((1, 1), 0)])
    mixed = [sample((1,), 0), {"data": torch.zeros(1, dtype=torch.float64)}]
    with pytest.raises(
        TypeError, match=r"differ in dtype \(torch\.float32, torch\.float64\); pass dtype="
    ):
        pad_collate(mixed)


def test_label_collation_rules():
    labels = [
        {"n": 1, "x": 0.5, "s": "a", "arr": np.arange(2), "ragged": np.arange(1), "only0": 7},
        {"n": 2, "x": 1.5, "s": "b", "arr": np.arange(2) + 1, "ragged": np.arange(3), "none": None},
    ]
    out = collate_labels(labels)
    assert list(out) == ["n", "x", "s", "arr", "ragged", "only0", "none"]
    assert torch.equal(out["n"], torch.tensor([1, 2]))
    assert out["x"].dtype == torch.float64 and out["x"].tolist() == [0.5, 1.5]
    assert out["s"] == ["a", "b"]
    assert torch.equal(out["arr"], torch.tensor([[0, 1], [1, 2]]))
    assert isinstance(out["ragged"], list) and [len(a) for a in out["ragged"]] == [1, 3]
    assert out["only0"] == [7, None] and out["none"] == [None, None]
    strings = collate_labels([{"t": np.array(["a", "b"])}, {"t": np.array(["c", "d"])}])
    assert [a.tolist() for a in strings["t"]] == [["a", "b"], ["c", "d"]]


def test_partial_pickles_for_spawn_workers():
    fn = pickle.loads(pickle.dumps(functools.partial(pad_collate, padding_value=-1, axes=0)))
    assert fn([sample((1,), 2.0), sample((2,), 2.0)])["data"].tolist() == [[2.0, -1.0], [2.0, 2.0]]
