"""Reading rows from HDF5: the only place that talks to h5py.

``source`` opens a file lazily per process; ``reader`` reads a batch of rows by the cheapest
correct strategy (memory map, parallel decode, chunk blocks, h5py slabs); ``blocks``, ``decode``
and ``threads`` are the chunk cache and the decoder behind it; ``indices`` and ``tensors`` turn
requests into sorted reads and results into tensors.
"""
