"""How a dataset's rows will be read: decided here, once, from its checked layout.

``inspect_layout`` (``file/layout.py``) first checks what the file says against the file (filters
installed, byte ranges inside the file, chunk sizes that fit their filters, data in other files
only inside the data file's directory). Then the first way that applies, best first:

1. ``MappedRows`` (``memmap``): contiguous and unfiltered data, or chunked unfiltered data whose
   chunks hold whole rows, in a local file HDF5 reads with its default driver.
2. ``ChunkedRows`` over the chunk engine, for other chunked data of fixed-size rows, with the
   engine's ``BlockFiller``, best first:

   * ``TableChunks`` (``decode``): every filter one the codec pipeline decodes, chunks of whole
     rows, all written, in a file on disk or in a store: ``pread`` at the chunk table's offsets;
   * ``DirectChunks`` (``decode``): the same filters, read with ``read_direct_chunk``;
   * ``H5pyBlocks`` (``chunks``): h5py decodes (lzf, scale-offset, or unfiltered chunks that
     split rows).
3. ``RangedRows`` (``ranges``): contiguous data of a file in an object store.
4. ``SlabRows`` (``slabs``): everything else, through h5py.

The byte-level ways (memory map, raw chunks, byte ranges) serve only data whose bytes are in this
file and whose stored bytes are their values (``Layout.fast_paths_allowed``), and each is checked
against h5py once (``file/verify.py``: the first and last row, or the chunk furthest into the
file) before it is trusted; on any disagreement the next way serves, with h5py's errors.
"""

from __future__ import annotations

import math

import h5py
import numpy as np

from ..chunks.block_fillers import BlockFiller, DirectChunks, Geometry, H5pyBlocks, TableChunks
from ..chunks.codecs import pipeline_for
from ..chunks.decoded import decoded_budget
from ..chunks.engine import ChunkEngine
from ..chunks.h5py_rows import H5pyDataset
from ..chunks.table import ChunkTable
from ..file.chunk_walk import WrittenChunks, read_chunk_index
from ..file.layout import Layout, inspect_layout
from ..file.source import H5Source
from ..file.verify import agrees_with_hdf5, probe_rows, raw_chunk_agrees
from ..storage.byte_source import Mappable
from ..storage.chunk_index import ChunkIndex
from .chunked import ChunkedRows
from .mapped import MappedRows
from .ranged import RangedRows
from .slabs import SlabRows
from .strategy import DatasetRows, RowStrategy

__all__ = ["block_filler", "choose_rows"]


def choose_rows(dset: h5py.Dataset, source: H5Source, rows: DatasetRows) -> RowStrategy:
    """The way to read ``dset``'s rows (see the module docstring).

    Raises:
        MissingFilterError: a filter the dataset needs is not installed.
        ExternalDataError: its data reaches outside the data file's directory.
        CorruptFileError: a byte range of it lies outside the file, or a chunk's size cannot be.
    """
    layout = inspect_layout(dset, source, rows.key)
    mapped = _mapped(dset, source, rows, layout)
    if mapped is not None:
        return mapped
    h5py_rows = H5pyDataset(source, rows.key)
    decode = layout.fast_paths_allowed
    blocks = block_filler(dset, source, h5py_rows, decode=decode, index=layout.chunks)
    if blocks is not None:
        return ChunkedRows(rows, source, ChunkEngine(source, blocks, h5py_rows))
    ranged = _ranged(dset, source, rows, layout)
    if ranged is not None:
        return ranged
    return SlabRows(rows, source)


def block_filler(
    dset: h5py.Dataset,
    source: H5Source,
    h5py_rows: H5pyDataset,
    *,
    decode: bool,
    index: ChunkIndex | None = None,
) -> BlockFiller | None:
    """The best source of whole blocks for chunked ``dset``, or None (no rows to serve).

    ``h5py_rows``: the dataset as h5py reads it in each process (what the sources ask of h5py).

    ``decode``: whether raw chunks may be decoded by us at all (``Layout.fast_paths_allowed``);
    then every filter must also be one the pipeline decodes. ``index``: the chunk index the
    layout check walked (else it is walked again).
    """
    if dset.chunks is None or dset.is_virtual or dset.dtype.hasobject:
        return None
    shape = tuple(int(s) for s in dset.shape)
    chunks = tuple(int(c) for c in dset.chunks)
    if shape[0] == 0 or dset.dtype.itemsize * math.prod(shape[1:]) == 0:
        return None
    plist = dset.id.get_create_plist()
    stages = (plist.get_filter(i) for i in range(plist.get_nfilters()))
    filters = tuple((int(f[0]), tuple(int(v) for v in f[2])) for f in stages)
    geometry = Geometry(source.path, dset.name, shape[0], shape[1:], dset.dtype, chunks[0], filters)
    pipeline = pipeline_for(dset) if decode else None
    if pipeline is None:
        return H5pyBlocks(geometry, h5py_rows)
    if index is None:
        index = read_chunk_index(dset, f"dataset {dset.name!r} of {source.path!r}")
    table = _chunk_table(dset, source, index)
    if table is not None:
        return TableChunks(geometry, table, pipeline, h5py_rows)
    written = WrittenChunks(index, may_grow=source.may_grow or source.swmr_mode)
    return DirectChunks(geometry, chunks, pipeline, written, h5py_rows)


def _mapped(
    dset: h5py.Dataset, source: H5Source, rows: DatasetRows, layout: Layout
) -> MappedRows | None:
    """A memory map of unfiltered rows that h5py agrees with, or None."""
    if not (
        layout.fast_paths_allowed
        and dset.file.driver == "sec2"
        and not dset.is_virtual
        and not dset.dtype.hasobject
        and rows.row_nbytes > 0
        and rows.length > 0
    ):
        return None
    if layout.contiguous_offset is not None:
        per, offsets = rows.length, np.array([layout.contiguous_offset], dtype=np.int64)
    elif layout.chunks is not None and dset.id.get_create_plist().get_nfilters() == 0:
        # the layout check made every unfiltered chunk exactly one chunk of bytes in the file
        blocks = layout.chunks.row_blocks(tuple(dset.shape), tuple(dset.chunks))
        if blocks is None:
            return None
        per, offsets = blocks.rows, blocks.offsets
    else:
        return None
    file = source.byte_source()  # (made only for data a map can serve)
    if not isinstance(file, Mappable):
        return None
    span = int(offsets.max()) + min(per, rows.length) * rows.row_nbytes - int(offsets.min())
    fits = span <= decoded_budget(source.options.decoded_budget_bytes)
    mapped = MappedRows(rows, file, per, offsets, whole_fits=fits)
    probe = probe_rows(rows.length)
    agrees, _ = agrees_with_hdf5(dset, lambda _rows: mapped.gather(probe, False), probe)
    return mapped if agrees else None


def _ranged(
    dset: h5py.Dataset, source: H5Source, rows: DatasetRows, layout: Layout
) -> RangedRows | None:
    """Byte-range reads of contiguous data of a file in an object store that h5py agrees with."""
    file = source.byte_source() if source.is_remote else None
    if file is None or layout.contiguous_offset is None or not layout.fast_paths_allowed:
        return None
    if dset.dtype.hasobject or dset.is_virtual or rows.length == 0:
        return None
    ranged = RangedRows(rows, file, layout.contiguous_offset)
    probe = probe_rows(rows.length)
    out = rows.empty(probe.size)
    agrees, _ = agrees_with_hdf5(dset, lambda _rows: ranged.read(probe, out, False), probe)
    return ranged if agrees else None


def _chunk_table(dset: h5py.Dataset, source: H5Source, index: ChunkIndex) -> ChunkTable | None:
    """The chunk table: chunks of whole rows, all written, in a file on disk or in a store."""
    remote = source.byte_source() if source.is_remote else None
    if remote is None and (not source.is_path or dset.file.driver != "sec2"):
        return None
    table = ChunkTable.build(dset, remote if remote is not None else source.path, index)
    if table is None or not _hdf5_agrees(dset, table, index):
        return None
    return table


def _hdf5_agrees(dset: h5py.Dataset, table: ChunkTable, index: ChunkIndex) -> bool:
    """True when HDF5 serves the chunk furthest into the file with the raw bytes we would read.

    ``pread`` reads whatever the table says; HDF5 also checks addresses against the end of the
    file its superblock records, so a damaged superblock makes HDF5 refuse chunks that we would
    happily serve. On any disagreement h5py's reads (with its errors) take over.
    """
    block = int(np.argmax(table.offsets + table.sizes))
    coords = (block * int(dset.chunks[0]), *(0 for _ in dset.shape[1:]))
    try:
        return raw_chunk_agrees(dset, coords, lambda: table.read(block), WrittenChunks(index))
    finally:
        table.close()  # construction leaves no descriptor open: the reading process opens one
