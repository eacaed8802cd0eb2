"""Write one dense dataset: read slabs of rows from the input, append them to a row sink.

Slabs are whole output chunks, at most a quarter of ``memory`` (``SEQUENTIAL_BYTES`` when read
in order, so reading and compressing overlap). Without a shuffle they are read in order
(``RowReader.read_range``: the input's chunks decoded in parallel, each once; small chunks read
in runs of the file and decoded many per task); with one, output slab ``[a, b)`` is input rows
``order[a:b]``, read in one batch (``RowReader.read``: sorted, grouped by chunk, each needed
chunk decoded once per slab), so the input is read about ``dataset bytes / slab bytes`` times.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

import h5py
import numpy as np

from nn_handler._io import H5Source, RowReader

from .chunking import SEQUENTIAL_BYTES
from .plan import DatasetPlan
from .stream import ChunkStream, H5pyRows, RowSink, create_dataset

__all__ = ["slab_rows", "write_dense"]


Order = np.ndarray[Any, np.dtype[np.int64]]


def slab_rows(chunk_rows: int, row_bytes: int, budget: int, n_rows: int) -> int:
    """Rows read at once: whole chunks, at most ``budget`` bytes (at least one chunk)."""
    chunks = max(1, budget // max(chunk_rows * row_bytes, 1))
    return max(1, min(chunks * chunk_rows, max(n_rows, 1)))


def write_dense(
    source: H5Source,
    dst: h5py.File,
    plan: DatasetPlan,
    order: Order | None,
    pool: Executor,
    budget: int,
    progress: Callable[[int], None],
) -> None:
    """Write the dataset ``plan`` describes into ``dst`` (rows in ``order`` when permuted)."""
    assert plan.shape is not None
    assert plan.chunks is not None
    assert plan.pipeline is not None
    src = source.dataset(plan.path)
    # a new dtype is numeric (its name round-trips); otherwise the input's, exactly
    same = src.dtype.hasobject or plan.dtype == str(src.dtype)
    out_dtype = src.dtype if same else np.dtype(plan.dtype)
    parent, _, name = plan.path.rpartition("/")
    dset = create_dataset(
        dst[parent or "/"], name, plan.shape, _type_of(src, out_dtype), plan.chunks,
        plan.pipeline, _fill(src, out_dtype),
    )  # fmt: skip
    sink: RowSink
    if plan.action == "chunks":
        sink = ChunkStream(dset, plan.pipeline, pool, budget)
    else:
        sink = H5pyRows(dset)
    # in order, small slabs let the pool compress one while the next is read (but at least an
    # input chunk: whole chunks decode straight into the slab); shuffled, big slabs mean fewer
    # passes over the input
    in_chunk = int(src.chunks[0]) * plan.row_bytes if src.chunks else 0
    slab = budget if order is not None else min(budget, max(SEQUENTIAL_BYTES, in_chunk))
    step = slab_rows(plan.chunks[0], plan.row_bytes, slab, plan.shape[0])
    reader = RowReader(source, plan.path)
    try:
        for start in range(0, plan.shape[0], step):
            stop = min(start + step, plan.shape[0])
            if order is None:
                rows = reader.read_range(start, stop)
            else:
                rows = reader.read(order[start:stop])
            sink.append(rows.astype(out_dtype, copy=False))
            progress(stop - start)
        sink.close()
    except BaseException:
        if isinstance(sink, ChunkStream):
            sink.abandon()
        raise
    finally:
        reader.clear_cache()


def _type_of(src: h5py.Dataset, out_dtype: np.dtype[Any]) -> h5py.h5t.TypeID:
    if out_dtype == src.dtype:
        return src.id.get_type()  # the input's exact HDF5 type (string padding, enums, order)
    return h5py.h5t.py_create(out_dtype, logical=True)


def _fill(src: h5py.Dataset, out_dtype: np.dtype[Any]) -> np.ndarray[Any, Any] | None:
    if src.dtype.hasobject:
        return None
    fill = np.zeros((1,), dtype=src.dtype)
    src.id.get_create_plist().get_fill_value(fill)
    return fill.astype(out_dtype)
