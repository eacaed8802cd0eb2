"""H5SparseDataset's internals: rows of compressed sparse matrices (AnnData, 10x).

``rows`` keeps ``indptr`` in RAM and turns a batch of rows into runs of ``data`` / ``indices``;
``gather`` reads those runs chunk by chunk through the shared reader; ``columns`` and ``batch``
select genes and scatter entries into dense or CSR batches; ``files`` opens one file's matrix,
names and labels; ``csc_direct`` serves a CSC matrix by scanning its columns.
"""
