"""HDF5 files where they live: object stores and HTTP servers, read by byte ranges."""
