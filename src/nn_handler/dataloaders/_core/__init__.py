"""The dataset core: what every HDF5 dataset of this package shares, written once.

Three layers, each a base class generic in the sample type; a dataset subclasses the lowest
one it needs and writes only what makes it different:

* ``FileDataset`` (``files``): its files and how they are opened. The file options resolved
  from ``file_options=`` or the seeds' separate keywords (``_file_options``), ``is_open``,
  ``close()``, the context manager, and ``_output_buffer``: the one place a batch's array is
  taken from the worker transport (a slot of the worker's batch ring, or shared memory).
* ``ChunkedDataset`` (``chunks``): rows read in chunks through caches of decoded chunks. The
  chunk cache (``chunk_cache_nbytes``, ``set_chunk_cache``), the window (``window_cache_nbytes``,
  ``plan_window``), ``supports_batch_indexing`` and ``dataset[i]`` / ``dataset[indices]``
  dispatched to ``_sample`` / ``_batch``.
* ``RowReaderDataset`` (``readers``): a chunked dataset whose parts are ``RowReader`` s. Read-ahead
  (``readahead_rows``, ``read_ahead``), ``reads_release_gil``, ``adjacent_chunks``,
  ``wait_causes`` and ``_read_rows`` (a batch of rows read into its output buffer).

How to write a new dataset class (say, ragged rows with offsets): one module under
``dataloaders/``, one line in ``dataloaders/__init__.py`` to export it, and in the class:

1. Subclass ``RowReaderDataset[Sample]`` (rows read through ``RowReader`` s),
   ``ChunkedDataset[Sample]`` (chunked parts of your own, e.g. ``CompressedRows``) or
   ``FileDataset[Sample]`` (files, no chunk caches).
2. In ``__init__`` take the ``FileOptions`` keywords the seeds name and ``file_options=``, and
   open the files with ``options = self._file_options(YourDataset.__init__, locals())``;
   close the sources before returning, so forked workers inherit no handle.
3. Write the hooks: ``_sources()`` (every ``H5Source`` you read, the first one's options
   being ``chunk_cache_nbytes``); for ``ChunkedDataset`` also ``chunk_rows``, ``__len__``,
   ``_chunk_parts()``, ``_sample(index)`` and ``_batch(indices)``; for ``RowReaderDataset``
   ``_row_readers()`` instead of ``_chunk_parts()``. Optionally ``_close_files()`` (more to
   release than the sources), ``_block_rows()`` (parts that take None for their own blocks)
   and ``_transforms()`` (per-sample Python callables: reads then hold the GIL).
4. Add a factory for it to ``FACTORIES`` in ``tests/test_file_options.py``; that test fails
   for a ``FileDataset`` subclass without one.

The capabilities loaders and samplers ask for (``ChunkAware``, ``PlansWindow``, ``ReadsAhead``,
``AdjacentChunks``, ``ExplainsWaits``, ``BatchIndexable``) are named in
``_contracts/protocols.py``; the layers above give them, so a subclass satisfies them without
writing them out.
"""

from .chunks import ChunkedDataset, ChunkParts
from .files import FileDataset
from .readers import RowReaderDataset

__all__ = ["ChunkParts", "ChunkedDataset", "FileDataset", "RowReaderDataset"]
