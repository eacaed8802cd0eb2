import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nn_handler.dataloaders._per_sample.natural import _fast_order, natural_key, natural_order

# HDF5 names are NUL-free byte strings (UTF-8 in practice); mix digits in so runs are common
name_bytes = st.binary(max_size=12).map(lambda b: b.replace(b"\x00", b"")) | st.text(
    alphabet="ab_-.0123456789é", max_size=12
).map(str.encode)
shaped = st.tuples(
    st.sampled_from([b"", b"t", b"traj_", b"traj-", b"x.y_"]), st.integers(0, 10**12)
)


def reference(names):
    return sorted(range(len(names)), key=lambda i: natural_key(names[i]))


@given(st.lists(name_bytes, max_size=40))
def test_order_matches_the_reference_key_on_any_names(names):
    assert natural_order(names).tolist() == reference(names)


@given(st.lists(shaped, max_size=60), st.booleans())
def test_fast_path_matches_reference_on_text_number_names(parts, pad):
    names = [p + (str(n).zfill(6) if pad else str(n)).encode() for p, n in parts]
    assert natural_order(names).tolist() == reference(names)
    if names:
        assert _fast_order(names) is not None  # the vectorized path is the one under test


@given(st.lists(st.integers(0, 10**30), min_size=1, max_size=50, unique=True))
def test_numbers_sort_by_value_any_length(values):
    names = [b"trajectory_" + str(v).encode() for v in values]
    ordered = [names[i] for i in natural_order(names)]
    assert ordered == [b"trajectory_" + str(v).encode() for v in sorted(values)]


@given(st.lists(name_bytes, max_size=30), st.randoms())
def test_order_is_total_and_independent_of_input_order(names, rnd):
    shuffled = list(names)
    rnd.shuffle(shuffled)
    a = [names[i] for i in natural_order(names)]
    b = [shuffled[i] for i in natural_order(shuffled)]
    assert a == b


@given(st.lists(st.text(alphabet="abcXYZ_-.", max_size=8), max_size=30))
def test_names_without_digits_sort_like_plain_bytes(texts):
    names = [t.encode() for t in texts]
    assert [names[i] for i in natural_order(names)] == sorted(names)


@settings(max_examples=50)
@given(st.text(max_size=10), st.integers(0, 10**6), st.integers(0, 10**6))
def test_key_compares_numbers_by_value(prefix, a, b):
    prefix = prefix.rstrip("0123456789")
    ka, kb = natural_key(f"{prefix}{a}"), natural_key(f"{prefix}{b}")
    assert (ka < kb) == (a < b) or a == b


def test_examples():
    names = [b"trajectory_10", b"trajectory_2", b"trajectory_1", b"a", b"trajectory_01", b"b3c2"]
    names += [b"b3c10", b"b10c1", b"trajectory_"]
    ordered = [names[i].decode() for i in natural_order(names)]
    assert ordered == [
        "a",
        "b3c2",
        "b3c10",
        "b10c1",
        "trajectory_",
        "trajectory_01",
        "trajectory_1",
        "trajectory_2",
        "trajectory_10",
    ]
    assert natural_key("trajectory_2") < natural_key("trajectory_10")
    assert natural_key("é2") == natural_key("é2".encode())


@pytest.mark.parametrize("names", [[], [b""], [b"", b""], [b"x"]])
def test_edge_sizes(names):
    assert natural_order(names).tolist() == reference(names)
    assert natural_order(names).dtype == np.intp
