"""Where the children of an HDF5 version-1 B-tree node lie: a readahead hint, nothing more.

h5py walks a chunk index (``chunk_iter``) one B-tree node after another: each node is one
read, and the next address is only known once it arrives. On a file 20 ms away, the 280 nodes
of a 1M-row file cost 280 round trips (about 6 s). HDF5 reads a node whole, in one read of
exactly its size, so the file object can look at what it just served: when that is an
internal node of a raw-data-chunk B-tree (``TREE``, node type 1, level >= 1), the addresses
of all its children are in it, and fetching them together costs one round trip per internal
node instead of one per child.

This is a guess, never a source of data: a wrong guess only fetches bytes nobody asks for.
The node's layout (HDF5 file format, "Version 1 B-trees"): signature, type, level, entries
used (little-endian), left and right sibling addresses, then ``key 0, child 0, ..., key N``.
A raw-data key is the chunk's size (4 bytes), filter mask (4 bytes) and one 8-byte offset
per dimension plus one (0, the element dimension, in every key but the very last). The
dimensions are not in the node: every count that makes the read's length a whole node is
tried, and the guess is used only when exactly one count gives keys of that form and children
inside the file.
"""

from __future__ import annotations

import itertools
import struct
from typing import Any

import numpy as np

__all__ = ["btree_children"]

_SIGNATURE = b"TREE"
_CHUNK_NODE = 1
_ADDRESS = 8  # HDF5's default size of addresses (h5py never changes it)
_HEADER = 8 + 2 * _ADDRESS
_MAX_DIMS = 33  # HDF5's limit (32) plus the element dimension


def btree_children(node: bytes, file_size: int) -> list[int]:
    """Addresses of the children of an internal raw-data B-tree node; [] when not sure.

    Args:
        node: The bytes of one read, starting at the node's address (its whole length).
        file_size: Bytes in the file (children must lie inside it).
    """
    if len(node) < _HEADER or node[:4] != _SIGNATURE or node[4] != _CHUNK_NODE or node[5] == 0:
        return []
    (used,) = struct.unpack_from("<H", node, 6)
    found = [c for d in range(2, _MAX_DIMS + 1) if (c := _children(node, used, d, file_size))]
    return found[0] if len(found) == 1 else []


def _children(node: bytes, used: int, dims: int, file_size: int) -> list[int]:
    """The children if the node is a whole node with keys of ``dims`` offsets, else []."""
    key = 8 + 8 * dims
    body = len(node) - _HEADER - key  # = 2K * (key + address) for a node of 2K entries
    if used == 0 or body <= 0 or body % (key + _ADDRESS) or body // (key + _ADDRESS) < used:
        return []
    stride = key + _ADDRESS
    raw = np.frombuffer(node, np.uint8, (used + 1) * stride - _ADDRESS, _HEADER)
    rows = np.zeros(((used + 1) * stride,), np.uint8)
    rows[: raw.size] = raw
    entries = rows.reshape(used + 1, stride)
    offsets = entries[:, 8:key].copy().view("<u8")  # (used + 1, dims)
    children = entries[:used, key:].copy().view("<u8").ravel()
    # (the last key of the rightmost node bounds the data: its element offset is not 0)
    if np.any(offsets[:used, -1] != 0) or np.any(children == 0) or np.any(children >= file_size):
        return []
    if not _increasing(offsets[:used]):
        return []
    return [int(c) for c in children]


def _increasing(offsets: np.ndarray[Any, Any]) -> bool:
    """Keys of a B-tree node are in strictly increasing (row-major) order of their chunks."""
    rows = [tuple(int(v) for v in row) for row in offsets]
    return all(a < b for a, b in itertools.pairwise(rows))
