"""ChunkShuffleSampler: shuffle by HDF5 chunks, then within windows of chunks.

The sampler lives in ``samplers/chunks.py``; this module keeps the import path users know.
"""

from __future__ import annotations

from .samplers.chunks import ChunkShuffleSampler

__all__ = ["ChunkShuffleSampler"]
