"""Bytes and rows from HDF5: the only place that talks to h5py, and free of torch.

* ``file/``: the file: ``H5Source`` (opened lazily per process), its identity, the byte-range
  seam every raw read goes through (``ByteSource``), and the layout checked once against the file.
* ``chunks/``: the one chunk engine: the chunk table, the codec pipeline, the window of decoded
  chunks and the decode pool.
* ``rows/``: ``RowReader`` (rows for a batch of indices) and its ``RowSource``, the cheapest
  correct way of reading them, picked once in ``rows/choice.py``; keys, kinds and the ``WindowPlan``
  a loader hands down.
* ``formats/``: whole datasets as samples, attributes, groups, and sparse matrices.
* ``errors``, ``process`` (``PerProcess``, the one new-process guard) and ``indices`` serve all.
"""
