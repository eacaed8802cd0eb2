"""CombinedHDF5Dataset's internals.

Field schema, filters, metadata index, file pool, sample cache, batch reads and the loader factory.
"""
