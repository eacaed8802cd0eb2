"""The byte-range seam: ``LocalFile.read_ranges`` is slicing the file, or an error naming it."""

import os
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nn_handler._io.storage.byte_source import ByteSource, LocalFile, Mappable
from nn_handler._io.storage.identity import FileIdentity
from nn_handler.dataloaders import FileChangedError

from helpers.process import as_if_forked

SIZE = 4096
CONTENT = np.random.default_rng(0).integers(0, 256, SIZE, dtype=np.uint8).tobytes()


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("bytes") / "f.bin"
    path.write_bytes(CONTENT)
    return str(path)


def ranges_in(size):
    start = st.integers(0, size)
    return st.lists(start.flatmap(lambda o: st.tuples(st.just(o), st.integers(0, size - o))))


def with_neighbours(ranges):
    """Add the range right after each one (adjacent: read in one preadv) and a copy (overlap)."""
    out = []
    for offset, length in ranges:
        out.append((offset, length))
        end = offset + length
        out.append((end, min(7, SIZE - end)))
        out.append((offset, length))
    return out


@settings(max_examples=200, deadline=None)
@given(ranges=ranges_in(SIZE).map(with_neighbours), as_bytearray=st.booleans())
def test_read_ranges_equals_slicing_the_file(data_file, ranges, as_bytearray):
    file = LocalFile(data_file, FileIdentity.of_path(data_file))
    if as_bytearray:
        buffers = [bytearray(length) for _, length in ranges]
    else:
        buffers = [np.empty(length, np.uint8) for _, length in ranges]
    file.read_ranges(ranges, buffers)
    for (offset, length), buf in zip(ranges, buffers, strict=True):
        assert bytes(buf) == CONTENT[offset : offset + length]
    file.close()


def test_many_adjacent_ranges_and_typed_buffers(data_file):
    file = LocalFile(data_file)
    ranges = [(k * 8, 8) for k in range(SIZE // 8)]  # more adjacent ranges than one preadv takes
    buffers = [np.empty(2, np.float32) for _ in ranges]
    file.read_ranges(ranges, buffers)
    assert b"".join(b.tobytes() for b in buffers) == CONTENT
    assert file.size() == SIZE and file.name == data_file


@pytest.mark.parametrize(("offset", "length"), [(SIZE - 3, 4), (SIZE, 1), (SIZE + 100, 8)])
def test_a_range_past_the_end_names_file_range_and_size(data_file, offset, length):
    file = LocalFile(data_file)
    with pytest.raises(FileChangedError, match=rf"f\.bin' ends before byte {offset + length}") as e:
        file.read_ranges([(0, 4), (offset, length)], [bytearray(4), bytearray(length)])
    assert f"it has {SIZE} bytes" in str(e.value) and e.value.path == data_file
    assert f"[{offset}, {offset + length})" in str(e.value)


def test_buffers_must_fit_their_ranges(data_file):
    file = LocalFile(data_file)
    with pytest.raises(ValueError, match="needs a buffer of 4 bytes, got 3 bytes"):
        file.read_ranges([(0, 4)], [bytearray(3)])
    with pytest.raises(ValueError, match="writable and C-contiguous"):
        file.read_ranges([(0, 4)], [memoryview(b"1234")])
    readonly = np.empty(4, np.uint8)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="writable and C-contiguous"):
        file.read_ranges([(0, 4)], [readonly])
    with pytest.raises(ValueError, match="writable and C-contiguous"):
        file.read_ranges([(0, 4)], [np.empty(8, np.uint8)[::2]])
    with pytest.raises(ValueError, match="offset=-1"):
        file.read_ranges([(-1, 4)], [bytearray(4)])
    with pytest.raises(ValueError, match="2 ranges but 1 buffers"):
        file.read_ranges([(0, 4), (4, 4)], [bytearray(4)])


def test_a_file_truncated_under_us_reads_short_never_other_bytes(tmp_path):
    path = tmp_path / "t.bin"
    path.write_bytes(CONTENT)
    file = LocalFile(str(path), FileIdentity.of_path(str(path)))
    head = bytearray(16)
    file.read_ranges([(0, 16)], [head])  # the descriptor is open now
    os.truncate(path, 100)
    with pytest.raises(FileChangedError, match=r"t\.bin' ends before byte 200 \(it has 100 bytes"):
        file.read_ranges([(100, 100)], [bytearray(100)])
    fresh = LocalFile(str(path), file.identity)
    with pytest.raises(FileChangedError, match=r"changed after the dataset was built \(size"):
        fresh.read_ranges([(0, 16)], [bytearray(16)])  # opened after the change: refused


def test_a_replaced_file_is_refused_when_opened(tmp_path):
    path = tmp_path / "r.bin"
    path.write_bytes(CONTENT)
    file = LocalFile(str(path), FileIdentity.of_path(str(path)))
    clone = pickle.loads(pickle.dumps(file))  # no descriptor travels: opened on first read
    assert clone._fd.peek() is None
    other = tmp_path / "other.bin"
    other.write_bytes(CONTENT[::-1])
    os.replace(other, path)
    with pytest.raises(FileChangedError, match="it was replaced by another file"):
        clone.read_ranges([(0, 4)], [bytearray(4)])


def test_a_growing_file_may_grow(tmp_path):
    path = tmp_path / "g.bin"
    path.write_bytes(CONTENT)
    file = LocalFile(str(path), FileIdentity.of_path(str(path)), growing=True)
    with open(path, "ab") as fh:
        fh.write(b"more")
    tail = bytearray(4)
    file.read_ranges([(SIZE, 4)], [tail])
    assert tail == b"more"


def test_descriptor_is_per_process(data_file):
    file = LocalFile(data_file)
    file.read_ranges([(0, 1)], [bytearray(1)])
    old = file._fd.peek()
    as_if_forked()
    assert file._fd.inherited
    file.read_ranges([(0, 1)], [bytearray(1)])
    assert file._fd.peek() is not old
    file.close()
    assert file._fd.peek() is None


def test_capabilities_are_types(data_file):
    file = LocalFile(data_file)
    assert isinstance(file, ByteSource) and isinstance(file, Mappable)
    mapped = file.map()
    mapped.check(SIZE)
    assert mapped.data.tobytes() == CONTENT
