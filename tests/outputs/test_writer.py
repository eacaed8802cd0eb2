"""H5OutputWriter: rows by sample index, in any order and split, into one file of fixed bytes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from nn_handler.outputs import H5OutputWriter

from helpers.predict import WritingDataset

N = 1001
CHUNK = 64


def _rows(n: int = N, dtype: str = "float32", shape: tuple[int, ...] = (5, 3)) -> np.ndarray:
    values = np.random.default_rng(0).normal(size=(n, *shape)) * 100
    return values.astype(dtype)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write(path, rows, batches, **kwargs):
    writer = H5OutputWriter(path, len(rows), chunk_rows=CHUNK, attrs={"model": "M"}, **kwargs)
    for indices in batches:
        writer.write(indices, torch.from_numpy(rows[indices]))
    return writer.finish()


def _contiguous(n, size=100):
    return [np.arange(lo, min(lo + size, n)) for lo in range(0, n, size)]


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16"])
def test_any_order_and_split_gives_the_same_file_with_the_rows(tmp_path, dtype):
    rows = _rows(dtype=dtype)
    first = _write(tmp_path / "a.h5", rows, _contiguous(N))
    strided = [np.arange(r, N, 3) for r in range(3)]  # DistributedSampler's deal: no whole chunk
    shuffled = np.array_split(np.random.default_rng(1).permutation(N), 7)
    second = _write(tmp_path / "b.h5", rows, strided, buffer_bytes=CHUNK * 60)  # raw, bounded
    third = _write(tmp_path / "c.h5", rows, shuffled)
    assert _digest(first) == _digest(second) == _digest(third)
    with h5py.File(first, "r") as f:
        data = f["predictions"]
        assert data.chunks == (CHUNK, 5, 3) and data.compression == "gzip"
        assert data.compression_opts == 1 and data.shuffle
        np.testing.assert_array_equal(data[:], rows)
        assert dict(f.attrs) == {"model": "M"}
    assert not (tmp_path / "a.h5.parts").exists()


def test_default_chunks_are_about_one_mib_of_the_widest_output(tmp_path):
    writer = H5OutputWriter(tmp_path / "p.h5", 100_000)
    writer.write([0], np.zeros((1, 1000), np.float32))
    assert writer.layout.chunk_rows == (1 << 20) // 4000
    writer.close()


def test_several_outputs_make_one_dataset_each(tmp_path):
    ids, scores = np.arange(N), _rows()
    for outputs, names in (
        (lambda i: (scores[i], ids[i]), ("p/0", "p/1")),
        (lambda i: {"scores": scores[i], "ids": ids[i]}, ("p/scores", "p/ids")),
    ):
        path = tmp_path / f"{names[0].replace('/', '_')}.h5"
        writer = H5OutputWriter(path, N, key="p")
        for batch in _contiguous(N, 333):
            writer.write(batch, outputs(batch))
        writer.finish()
        with h5py.File(path, "r") as f:
            np.testing.assert_array_equal(f[names[0]][:], scores)
            np.testing.assert_array_equal(f[names[1]][:], ids)


def test_a_repeat_with_the_same_bytes_is_fine_other_bytes_raise(tmp_path):
    rows = _rows()
    padded = [np.arange(0, 500), np.arange(500, N), np.array([0, 1, 2])]  # sampler padding
    assert _digest(_write(tmp_path / "a.h5", rows, padded)) == _digest(
        _write(tmp_path / "b.h5", rows, _contiguous(N))
    )
    writer = H5OutputWriter(tmp_path / "c.h5", N)
    writer.write([3, 4], rows[3:5])
    with pytest.raises(ValueError, match=r"sample\(s\) 4 were written twice with different values"):
        writer.write([4], rows[5:6])
    with pytest.raises(ValueError, match=r"sample\(s\) 7 were written twice"):
        writer.write([7, 7], rows[7:9])
    writer.close()


def test_repeats_across_writers_are_compared_at_the_end(tmp_path):
    rows, path = _rows(), tmp_path / "p.h5"
    one, two = H5OutputWriter(path, N, chunk_rows=CHUNK), H5OutputWriter(path, N, chunk_rows=CHUNK)
    one.write(np.arange(N), rows)  # every chunk whole: stored encoded
    changed = rows[:3].copy()
    changed[2] += 1
    two.write([0, 1, 2], changed)  # raw rows of chunk 0, one of them other bytes
    one.close()
    two.close()
    with pytest.raises(ValueError, match=r"sample\(s\) 2 were written twice with different"):
        one.finish()
    assert not path.exists()


def test_missing_rows_are_counted_and_named_and_the_parts_kept(tmp_path):
    rows, path = _rows(), tmp_path / "p.h5"
    writer = H5OutputWriter(path, N, chunk_rows=CHUNK, attrs={"model": "M"})
    writer.write(np.arange(10, N - 1), rows[10:-1])
    with pytest.raises(ValueError, match=r"11 of 1001 rows of 'predictions' were never written "):
        writer.finish()
    assert not path.exists() and (tmp_path / "p.h5.parts").is_dir()
    rest = H5OutputWriter(path, N, chunk_rows=CHUNK, attrs={"model": "M"})
    stored = rest.stored()
    assert stored.sum() == N - 11 and not stored[:10].any() and not stored[-1]
    rest.write([*range(10), N - 1], rows[[*range(10), N - 1]])
    rest.finish()
    assert _digest(path) == _digest(_write(tmp_path / "b.h5", rows, _contiguous(N)))


def test_a_record_cut_short_by_a_kill_is_left_out(tmp_path):
    rows, path = _rows(), tmp_path / "p.h5"
    writer = H5OutputWriter(path, N, chunk_rows=CHUNK, attrs={"model": "M"})
    writer.write(np.arange(256), rows[:256])  # 4 whole chunks, each a record
    part = writer._local.get().part.path  # still .open: its writer "was killed" now
    size = part.stat().st_size
    with open(part, "r+b") as file:
        file.truncate(size - 100)  # the last record loses its end
    rest = H5OutputWriter(path, N, chunk_rows=CHUNK, attrs={"model": "M"})
    assert rest.stored().sum() == 3 * CHUNK
    rest.write(np.arange(3 * CHUNK, N), rows[3 * CHUNK :])
    assert _digest(rest.finish()) == _digest(_write(tmp_path / "b.h5", rows, _contiguous(N)))


def test_parts_of_another_output_are_refused(tmp_path):
    path = tmp_path / "p.h5"
    writer = H5OutputWriter(path, N, attrs={"model": "A"})
    writer.write([0], np.zeros((1, 3), np.float32))
    writer.close()
    for kwargs, field in (
        ({"n_rows": N + 1, "attrs": {"model": "A"}}, "n_rows"),
        ({"n_rows": N, "attrs": {"model": "B"}}, "attrs"),
        ({"n_rows": N, "attrs": {"model": "A"}, "key": "other"}, "key"),
    ):
        with pytest.raises(ValueError, match=f"holds the parts of another output .{field}: "):
            H5OutputWriter(path, **kwargs).stored()
    other_shape = H5OutputWriter(path, N, attrs={"model": "A"})
    with pytest.raises(ValueError, match=r"differ from the file's datasets predictions \[3\]"):
        other_shape.write([1], np.zeros((1, 4), np.float32))


def test_bad_arguments_name_the_argument_and_what_is_valid(tmp_path):
    path = tmp_path / "p.h5"
    with pytest.raises(ValueError, match="n_rows must be >= 1, got 0"):
        H5OutputWriter(path, 0)
    with pytest.raises(ValueError, match="key must be a non-empty dataset name"):
        H5OutputWriter(path, 5, key="")
    with pytest.raises(ValueError, match="chunk_rows must be >= 1, got -1"):
        H5OutputWriter(path, 5, chunk_rows=-1)
    with pytest.raises(TypeError, match=r"attrs\['when'\] must be a string, a number"):
        H5OutputWriter(path, 5, attrs={"when": {"a": 1}})
    with pytest.raises(FileNotFoundError, match="does not exist; create it"):
        H5OutputWriter(tmp_path / "nowhere" / "p.h5", 5)
    writer = H5OutputWriter(path, 5)
    with pytest.raises(IndexError, match=r"indices 5, -1 are outside \[0, n_rows=5\)"):
        writer.write([5, -1], np.zeros((2, 2)))
    with pytest.raises(TypeError, match="indices must be a 1-D sequence of integers"):
        writer.write([0.5], np.zeros((1, 2)))
    with pytest.raises(ValueError, match="output 'predictions' has 1 rows for 2 indices"):
        writer.write([0, 1], np.zeros((1, 2)))
    with pytest.raises(TypeError, match="outputs must be tensors or NumPy arrays"):
        writer.write([0], [[1.0, 2.0]])
    with pytest.raises(ValueError, match="nothing was written"):
        writer.finish()


@pytest.mark.slow
def test_dataloader_workers_each_write_their_part(tmp_path):
    rows, path = _rows(), tmp_path / "p.h5"
    writer = H5OutputWriter(path, N, chunk_rows=CHUNK, attrs={"model": "M"})
    writer.declare(rows[:1])  # the layout travels to the workers with the writer
    loader = DataLoader(
        WritingDataset(writer, rows),
        batch_size=50,
        num_workers=2,
        multiprocessing_context="spawn",
        timeout=120,
    )
    seen = [int(i) for batch in loader for i in batch]
    assert sorted(seen) == list(range(N))
    assert len(list((tmp_path / "p.h5.parts").glob("part-*.done"))) == 2  # one per worker
    writer.finish()
    assert _digest(path) == _digest(_write(tmp_path / "b.h5", rows, _contiguous(N)))


def test_other_chunk_rows_are_refused(tmp_path):
    path = tmp_path / "p.h5"
    writer = H5OutputWriter(path, N, chunk_rows=CHUNK)
    writer.write([0], np.zeros((1, 3), np.float32))
    writer.close()
    with pytest.raises(ValueError, match="holds parts of 64-row chunks, this writer asks for"):
        H5OutputWriter(path, N, chunk_rows=32).stored()


def test_a_damaged_part_is_set_aside_and_named(tmp_path):
    rows, path = _rows(), tmp_path / "p.h5"
    writer = H5OutputWriter(path, N, chunk_rows=CHUNK)
    writer.write(np.arange(N), rows)
    writer.close()
    (part,) = (tmp_path / "p.h5.parts").glob("part-*.done")
    with open(part, "r+b") as file:  # a bit flips inside the first record's payload
        file.seek(100)
        byte = file.read(1)
        file.seek(100)
        file.write(bytes([byte[0] ^ 1]))
    with pytest.raises(OSError, match=r"is damaged at offset 40 \(its checksum does not match"):
        H5OutputWriter(path, N, chunk_rows=CHUNK).finish()
    assert not path.exists() and part.with_suffix(".bad").exists()
    assert not H5OutputWriter(path, N, chunk_rows=CHUNK).stored().any()  # a rerun starts over


def test_outputs_that_are_not_numbers_are_refused(tmp_path):
    writer = H5OutputWriter(tmp_path / "p.h5", 2)
    with pytest.raises(TypeError, match="output 'predictions' has dtype <U1; outputs must be"):
        writer.write([0, 1], np.array(["a", "b"]))
    with pytest.raises(TypeError, match="output names must be non-empty strings without '/'"):
        writer.write([0, 1], {"a/b": np.zeros(2)})
