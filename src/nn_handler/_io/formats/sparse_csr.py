"""CSC matrices served as rows: a CSR copy (sidecar) next to the file, built once, out of core.

In a ``csc_matrix`` the entries of one row are spread over every column, so a batch of rows would
have to read the whole matrix (``dataloaders/_sparse/csc_direct.py`` does that, for small files; the
costs of both are in docs/sparse.md). Instead the matrix is converted once into
``<file>.nnh-csr-<group>.h5``: ``data`` / ``indices`` / ``indptr`` of the same matrix in CSR,
chunked like the source's ``data`` and compressed like it (gzip level 1 with byte-shuffle when the
source is compressed), so rows are then read exactly like an AnnData ``csr_matrix``.

Validation (else the sidecar is rebuilt): the sidecar records the source file's size and
modification time (ns) of its ``FileIdentity``, taken before the build (the header's keys are
unchanged since version 1, so existing sidecars stay valid), and a content fingerprint (blake2b
of the group's shape, encoding, dtypes and chunking, the whole ``indptr`` and the raw bytes of
the first and last chunk of ``data`` and ``indices``); its own datasets must have the recorded
lengths.

The build reads the source through ``RowReader`` (parallel inflate), in slabs: pass 1 counts the
entries of every row; then, per band of rows holding at most ``band_entries`` entries, one pass
places each entry at its row's next free slot (columns come in increasing order, so rows come
out sorted). Memory stays near ``band_entries`` entries whatever the file's size. Writes are
atomic (temporary file, then ``os.replace``) and serialised by a lock file, so DDP ranks that
start together build it once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
from collections.abc import Iterator
from typing import Any

import h5py
import numpy as np

from ..file.chunk_walk import ASK_HDF5, read_direct_chunk
from ..file.source import H5Source
from ..indices import IndexArray
from ..platform import FLOCK, off
from ..rows.reader import RowReader
from ..storage.identity import FileIdentity
from .sparse_layout import SparseLayout, check_indptr

if FLOCK:  # serialise concurrent builds (elsewhere the atomic replace keeps readers safe)
    import fcntl

__all__ = ["BAND_ENTRIES", "SIDECAR_TAG", "ensure_csr_sidecar", "sidecar_path"]

SIDECAR_TAG = ".nnh-csr-"
BAND_ENTRIES = 64 * 1024**2  # entries placed per pass: ~0.8 GB of float32 + int32 + indexes
_VERSION = 1
_HEADER = "nnh-csr"
_SLAB_ENTRIES = 4 * 1024**2
_log = logging.getLogger(__name__)


def sidecar_path(path: str, group: str, sidecar_dir: str | None) -> str:
    """Where the CSR copy of ``group`` in ``path`` lives."""
    folder = sidecar_dir if sidecar_dir is not None else os.path.dirname(os.path.abspath(path))
    slug = group.strip("/").replace("/", "-")
    return os.path.join(folder, f"{os.path.basename(path)}{SIDECAR_TAG}{slug}.h5")


def ensure_csr_sidecar(
    source: H5Source,
    layout: SparseLayout,
    sidecar_dir: str | None,
    band_entries: int = BAND_ENTRIES,
) -> tuple[str, str]:
    """Return ``(sidecar path, "sidecar" | "built")``: a valid CSR copy, built when needed.

    Raises:
        OSError: the sidecar cannot be written; the message names the folder and the options.
        ValueError: the source matrix is invalid (the message names file and group).
    """
    target = sidecar_path(source.path, layout.group, sidecar_dir)
    header = source_header(source, layout)
    if _is_valid(target, header):
        return target, "sidecar"
    try:
        with _build_lock(target):
            if _is_valid(target, header):  # another process built it while we waited
                return target, "sidecar"
            _log.info("building the CSR copy %r of the CSC group %r", target, layout.group)
            _build(source, layout, target, header, band_entries)
    except OSError as exc:
        raise OSError(
            exc.errno,
            f"cannot write the CSR copy {target!r} of the csc_matrix {layout.group!r} in "
            f"{source.path!r} ({exc.strerror or exc}); pass sidecar_dir=<a writable folder>, "
            "or csc='direct' (reads every column for every batch: only for small files)",
        ) from exc
    return target, "built"


def source_header(source: H5Source, layout: SparseLayout) -> dict[str, Any]:
    """What a sidecar must record to be valid for ``layout`` in ``source`` now."""
    identity = FileIdentity.of_path(source.path)
    return {
        "version": _VERSION,
        "group": layout.group,
        "n_rows": layout.n_rows,
        "n_cols": layout.n_cols,
        "size": identity.size,
        "mtime_ns": identity.mtime_ns,
        "fingerprint": _fingerprint(source, layout),
    }


def _fingerprint(source: H5Source, layout: SparseLayout) -> str:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(
        json.dumps([layout.group, layout.encoding, layout.n_rows, layout.n_cols]).encode()
    )
    for key in (layout.data_key, layout.indices_key, layout.indptr_key):
        dset = source.dataset(key, arg="group")
        digest.update(f"{key}:{dset.shape}:{dset.dtype.str}:{dset.chunks}".encode())
        digest.update(dset.id.get_create_plist().get_nfilters().to_bytes(2, "little"))
        digest.update(dset[()].tobytes() if key == layout.indptr_key else _edge_bytes(dset))
    return digest.hexdigest()


def _edge_bytes(dset: h5py.Dataset) -> bytes:
    """Raw bytes of the first and last chunk (or the first and last 64 KiB when contiguous)."""
    n = int(dset.shape[0])
    if n == 0:
        return b""
    if dset.chunks is None:
        k = max(1, 65536 // max(1, dset.dtype.itemsize))
        return bytes(dset[:k].tobytes() + dset[max(0, n - k) :].tobytes())
    rows = int(dset.chunks[0])
    parts = []
    for first in sorted({0, (n - 1) // rows * rows}):
        found = read_direct_chunk(dset.id, (first,), ASK_HDF5)
        # an unwritten chunk: hash what HDF5 serves
        parts.append(dset[first : first + rows].tobytes() if found is None else found[1])
    return b"".join(parts)


def _is_valid(target: str, header: dict[str, Any]) -> bool:
    if not os.path.exists(target):
        return False
    try:
        with h5py.File(target, "r", locking=False) as f:
            found = json.loads(f.attrs[_HEADER])
            nnz = int(found["nnz"])
            shapes = {k: f[k].shape for k in ("data", "indices", "indptr")}
    except (OSError, KeyError, ValueError, TypeError) as exc:
        _log.info("CSR copy %r is unreadable (%s); building it again", target, exc)
        return False
    stale = {k: (found.get(k), v) for k, v in header.items() if found.get(k) != v}
    expected = {"data": (nnz,), "indices": (nnz,), "indptr": (header["n_rows"] + 1,)}
    if stale or shapes != expected:
        _log.info("CSR copy %r is stale (%s); building it again", target, stale or shapes)
        return False
    return True


@contextlib.contextmanager
def _build_lock(target: str) -> Iterator[None]:
    if not FLOCK:
        off("flock", "processes that build one CSR copy at once each build it")
        yield
        return
    lock = f"{target}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        # a process that locks the removed file may build once more: the atomic replace
        # keeps that correct, and no stray lock file is left next to the data
        with contextlib.suppress(OSError):
            os.remove(lock)
        os.close(fd)


def _build(
    source: H5Source, layout: SparseLayout, target: str, header: dict[str, Any], band: int
) -> None:
    where = f"{source.path!r}, group {layout.group!r}"
    data = RowReader(source, layout.data_key, arg="group")
    indices = RowReader(source, layout.indices_key, arg="group")
    col_ptr = check_indptr(
        np.asarray(source.dataset(layout.indptr_key, arg="group")[()]),
        layout.n_cols,
        data.length,
        where,
    )
    row_ptr = _row_pointers(indices, layout.n_rows, where)
    tmp = f"{target}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        with h5py.File(tmp, "w") as out:
            _create(out, source.dataset(layout.data_key, arg="group"), data.length, layout)
            for r0, r1 in _bands(row_ptr, band):
                vals, cols = _place_band(data, indices, col_ptr, row_ptr, r0, r1)
                out["data"][row_ptr[r0] : row_ptr[r1]] = vals
                out["indices"][row_ptr[r0] : row_ptr[r1]] = cols
            out["indptr"][:] = row_ptr
            out.attrs[_HEADER] = json.dumps({**header, "nnz": data.length}, sort_keys=True)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)


def _create(out: h5py.File, src_data: h5py.Dataset, nnz: int, layout: SparseLayout) -> None:
    chunk = int(src_data.chunks[0]) if src_data.chunks else 65536
    kw: dict[str, Any] = {"chunks": (max(1, min(chunk, nnz)),)} if nnz else {}
    if nnz and src_data.compression is not None:
        kw.update(compression="gzip", compression_opts=1, shuffle=True)
    index_dtype = np.int32 if layout.n_cols <= np.iinfo(np.int32).max else np.int64
    out.create_dataset("data", shape=(nnz,), dtype=src_data.dtype, **kw)
    out.create_dataset("indices", shape=(nnz,), dtype=index_dtype, **kw)
    out.create_dataset("indptr", shape=(layout.n_rows + 1,), dtype=np.int64)


def _slabs(n: int, reader: RowReader) -> Iterator[tuple[int, int]]:
    step = (
        _SLAB_ENTRIES
        if reader.chunk_rows is None
        else max(reader.chunk_rows, _SLAB_ENTRIES // reader.chunk_rows * reader.chunk_rows)
    )
    for a in range(0, n, step):
        yield a, min(n, a + step)


def _row_pointers(indices: RowReader, n_rows: int, where: str) -> IndexArray:
    counts = np.zeros(n_rows, dtype=np.int64)
    for a, b in _slabs(indices.length, indices):
        rows = indices.read_range(a, b)
        if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= n_rows):
            bad = rows[(rows < 0) | (rows >= n_rows)][0]
            raise ValueError(
                f"{where}: stores row index {int(bad)}, outside [0, {n_rows}); the file is "
                "corrupt or its shape attribute is wrong"
            )
        counts += np.bincount(rows, minlength=n_rows)
    row_ptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(counts, out=row_ptr[1:])
    return row_ptr


def _bands(row_ptr: IndexArray, band: int) -> Iterator[tuple[int, int]]:
    """Consecutive row ranges holding at most ``band`` entries each (a longer row: alone)."""
    n_rows, r0 = row_ptr.size - 1, 0
    while r0 < n_rows:
        r1 = int(np.searchsorted(row_ptr, row_ptr[r0] + band, side="right")) - 1
        r1 = min(n_rows, max(r1, r0 + 1))
        yield r0, r1
        r0 = r1


def _place_band(
    data: RowReader,
    indices: RowReader,
    col_ptr: np.ndarray[Any, Any],
    row_ptr: IndexArray,
    r0: int,
    r1: int,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    base = row_ptr[r0]
    fill = row_ptr[r0:r1] - base  # next free slot of each row of the band
    vals = np.empty(int(row_ptr[r1] - base), dtype=data.dtype)
    cols = np.empty(vals.size, dtype=np.int64)
    for a, b in _slabs(indices.length, indices):
        rows = indices.read_range(a, b)
        hit = np.flatnonzero((rows >= r0) & (rows < r1))
        if hit.size == 0:
            continue
        order = np.argsort(rows[hit], kind="stable")  # by row; columns stay increasing
        hit = hit[order]
        local = rows[hit].astype(np.int64) - r0
        starts = np.flatnonzero(np.concatenate(([True], local[1:] != local[:-1])))
        counts = np.diff(np.append(starts, local.size))
        dest = fill[local] + np.arange(local.size) - np.repeat(starts, counts)
        vals[dest] = data.read_range(a, b)[hit]
        cols[dest] = np.searchsorted(col_ptr, a + hit, side="right") - 1
        fill[local[starts]] += counts
    return vals, cols
