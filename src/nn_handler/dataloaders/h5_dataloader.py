"""H5LazyDataset: samples read lazily from one HDF5 file, per sample or a whole batch at a time.

The file is opened in whichever process reads (a DataLoader worker, the main process, a DDP rank)
and never shared between processes. Batches go through one ``RowReader`` call per key, so a
batch of 256 random samples costs one gather from a memory map (contiguous or unfiltered chunked
data) or one read per needed chunk (compressed data), not 256 h5py calls.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import IO, Any

import numpy as np
import torch
from torch.utils.data import Dataset

from ._indices import is_scalar_index
from ._reader import RowReader
from ._source import FileOptions, H5Source, LockingMode, close_inherited_sources
from ._tensors import check_tensor_dtype, to_tensor
from ._validate import check_callable, check_key, numpy_dtype
from ._worker_batches import read_batch

__all__ = ["H5LazyDataset", "h5_worker_init_fn"]

Sample = torch.Tensor | tuple[Any, Any]


class H5LazyDataset(Dataset[Sample]):
    """A map-style dataset over one HDF5 file, opened lazily in each process.

    ``dataset[i]`` returns ``x`` or ``(x, y)`` as tensors: rows are cast to ``x_dtype`` /
    ``y_dtype`` first, then passed to ``transform`` / ``target_transform``. A sequence, array or
    slice of indices returns the whole batch stacked (``x`` of shape ``(n, ...)``), and
    ``__getitems__`` lets ``DataLoader`` fetch a batch with one read per key.

    Args:
        path: Path of the HDF5 file (or a picklable, seekable binary file object).
        x_key: Dataset holding the inputs, samples along axis 0; nested paths like
            ``"train/images"`` work.
        y_key: Dataset holding the targets (same length as ``x_key``), or None for x-only samples.
        x_dtype: NumPy dtype to cast inputs to, or None to keep the stored dtype.
        y_dtype: NumPy dtype to cast targets to, or None to keep the stored dtype.
        transform: Callable applied to each input tensor after the cast.
        target_transform: Callable applied to each target tensor after the cast.
        rdcc_nbytes: HDF5 chunk-cache size per dataset, in bytes.
        rdcc_nslots: Hash slots of the chunk cache.
        rdcc_w0: Chunk-cache preemption policy in ``[0, 1]``.
        swmr: Open in SWMR read mode where possible (falls back with one warning).
        locking: h5py file locking: ``"best-effort"`` (default; works on NFS/Lustre),
            ``True``, ``False`` or ``None`` (HDF5's default).

    Raises:
        FileNotFoundError: the file does not exist.
        OSError: the file is not HDF5.
        KeyError: a key is missing; the message lists the datasets in the file.
        ValueError: x and y differ in length, or a key names a scalar dataset.
        TypeError: a dataset's dtype cannot become a tensor.

    Example:
        >>> ds = H5LazyDataset("data.h5", "images", "labels", x_dtype=np.float32)
        >>> loader = DataLoader(ds, batch_size=256, shuffle=True, num_workers=4)
    """

    #: ``dataset[list_of_indices]`` returns a stacked batch (see ``batched_loader``).
    supports_batch_indexing = True

    def __init__(
        self,
        path: str | os.PathLike[str] | IO[bytes],
        x_key: str,
        y_key: str | None = None,
        x_dtype: Any = None,
        y_dtype: Any = None,
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[Any], Any] | None = None,
        rdcc_nbytes: int = 256 * 1024**2,
        rdcc_nslots: int = 1_000_003,
        rdcc_w0: float = 0.75,
        swmr: bool = True,
        *,
        locking: LockingMode = "best-effort",
    ) -> None:
        check_key("x_key", x_key, optional=False)
        check_key("y_key", y_key, optional=True)
        check_callable("transform", transform)
        check_callable("target_transform", target_transform)
        self.x_dtype = numpy_dtype("x_dtype", x_dtype)
        self.y_dtype = numpy_dtype("y_dtype", y_dtype)
        self.transform = transform
        self.target_transform = target_transform
        options = FileOptions(rdcc_nbytes, rdcc_nslots, rdcc_w0, swmr, locking)
        self._source = H5Source(path, options)
        self._x = RowReader(self._source, x_key, arg="x_key")
        check_tensor_dtype("x_key", x_key, self._x.dtype, self.x_dtype)
        self._y: RowReader | None = None
        if y_key is not None:
            self._y = RowReader(self._source, y_key, arg="y_key")
            check_tensor_dtype("y_key", y_key, self._y.dtype, self.y_dtype)
            if self._y.length != self._x.length:
                raise ValueError(
                    f"x_key={x_key!r} has {self._x.length} samples but y_key={y_key!r} has "
                    f"{self._y.length}; both need the same length along axis 0"
                )
        # Hold no handle until a process reads: forked workers then inherit nothing, and a
        # plain h5py.File on the same path in this process does not clash with our SWMR open.
        self._source.close()

    @property
    def path(self) -> str:
        """Path of the file."""
        return self._source.path

    @property
    def x_key(self) -> str:
        """Key of the inputs."""
        return self._x.key

    @property
    def y_key(self) -> str | None:
        """Key of the targets, or None."""
        return None if self._y is None else self._y.key

    @property
    def chunk_rows(self) -> int | None:
        """Rows per HDF5 chunk of the inputs along axis 0 (None when not chunked)."""
        return self._x.chunk_rows

    @property
    def is_open(self) -> bool:
        """True when this process holds an open file handle."""
        return self._source.is_open

    @property
    def reads_release_gil(self) -> bool:
        """True when batches are read outside the GIL.

        Every key is memory-mapped or decoded by our codecs, and there are no transforms:
        ``batched_loader(worker_mode="auto")`` then serves batches from threads.
        """
        no_transforms = self.transform is None and self.target_transform is None
        return no_transforms and all(r.releases_gil for r in self._readers())

    @property
    def chunk_cache_nbytes(self) -> int:
        """Chunk-cache budget per key, in bytes (``rdcc_nbytes``)."""
        return self._source.options.rdcc_nbytes

    def set_chunk_cache(
        self, nbytes: int, nslots: int | None = None, w0: float | None = None
    ) -> None:
        """Resize the chunk cache of every key: HDF5's and the decoded-chunk cache.

        Takes effect in this process at once (the file is reopened on the next read) and in
        DataLoader workers started afterwards. ``ChunkShuffleSampler`` calls this when its
        shuffle window would not fit.

        Args:
            nbytes: Bytes per key (``rdcc_nbytes``).
            nslots: Hash slots of HDF5's cache (unchanged when None).
            w0: HDF5's preemption policy in ``[0, 1]`` (unchanged when None).

        Raises:
            TypeError / ValueError: a value is not valid for ``rdcc_nbytes`` / ``rdcc_nslots`` /
                ``rdcc_w0``.
        """
        old = self._source.options
        new = dataclasses.replace(
            old,
            rdcc_nbytes=nbytes,
            rdcc_nslots=old.rdcc_nslots if nslots is None else nslots,
            rdcc_w0=old.rdcc_w0 if w0 is None else w0,
        )
        self._source.set_options(new)
        for reader in self._readers():
            reader.clear_cache()

    def window_cache_nbytes(self, block_rows: int, blocks: int) -> int:
        """Chunk-cache bytes per key that keep ``blocks`` row blocks of ``block_rows`` decoded.

        Used by ``ChunkShuffleSampler`` to size the cache for its shuffle window. Zero when no
        key needs a chunk cache (contiguous or memory-mapped data).
        """
        return max(reader.window_cache_nbytes(block_rows, blocks) for reader in self._readers())

    def plan_window(self, block_rows: int, blocks: int) -> None:
        """Size each key's decoded-chunk window for ``blocks`` row blocks read at a time.

        ``ChunkShuffleSampler`` calls this with its shuffle window, so a process keeps about
        two windows of decoded chunks instead of filling the whole ``rdcc_nbytes`` budget.
        """
        for reader in self._readers():
            reader.plan_window(block_rows, blocks)

    @property
    def readahead_rows(self) -> int:
        """Rows ``batched_loader`` announces ahead of reading them (see ``prefetch``)."""
        return max(reader.readahead_rows for reader in self._readers())

    def prefetch(self, indices: Any) -> None:
        """Start decoding, in the background, the chunks a coming batch ``indices`` needs.

        ``batched_loader`` calls this a window ahead when batches are read in this process
        (``num_workers=0`` or worker threads), so decoding overlaps serving earlier batches.
        """
        for reader in self._readers():
            reader.prefetch(indices)

    def _readers(self) -> list[RowReader]:
        return [self._x] if self._y is None else [self._x, self._y]

    def __len__(self) -> int:
        return self._x.length

    def __getitem__(self, index: Any) -> Any:
        """Return sample ``index``, or a stacked batch for a sequence / array / slice of them."""
        if is_scalar_index(index):
            return self._sample(index)
        return self._batch(index)

    def __getitems__(self, indices: Sequence[int]) -> list[Sample]:
        """Return the samples at ``indices`` as a list, reading the batch at once."""
        xs = self._split(self._x, indices, self.x_dtype, self.transform)
        if self._y is None:
            return xs
        ys = self._split(self._y, indices, self.y_dtype, self.target_transform)
        return list(zip(xs, ys, strict=True))

    def close(self) -> None:
        """Close this process's file handle (the next read reopens it)."""
        self._source.close()

    def __enter__(self) -> H5LazyDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sample(self, index: Any) -> Any:
        x = _convert(self._x.read_row(index), self.x_dtype, self.transform)
        if self._y is None:
            return x
        return x, _convert(self._y.read_row(index), self.y_dtype, self.target_transform)

    def _batch(self, indices: Any) -> Any:
        x = self._stack(self._x, indices, self.x_dtype, self.transform)
        if self._y is None:
            return x
        return x, self._stack(self._y, indices, self.y_dtype, self.target_transform)

    @staticmethod
    def _stack(
        reader: RowReader,
        indices: Any,
        dtype: np.dtype[Any] | None,
        fn: Callable[[Any], Any] | None,
    ) -> Any:
        batch = read_batch(reader, indices, dtype)  # in shared memory inside worker processes
        if fn is None:
            return batch
        return torch.stack([fn(row) for row in batch.unbind(0)])

    @staticmethod
    def _split(
        reader: RowReader,
        indices: Any,
        dtype: np.dtype[Any] | None,
        fn: Callable[[Any], Any] | None,
    ) -> list[Any]:
        rows = to_tensor(reader.read(indices), dtype).unbind(0)
        return list(rows) if fn is None else [fn(row) for row in rows]

    def __repr__(self) -> str:
        parts = [f"path={self.path!r}", f"x_key={self.x_key!r} {_describe(self._x, self.x_dtype)}"]
        if self._y is not None:
            parts.append(f"y_key={self._y.key!r} {_describe(self._y, self.y_dtype)}")
        parts.append(f"len={len(self)}")
        parts.append("open" if self.is_open else "closed")
        return f"H5LazyDataset({', '.join(parts)})"


def h5_worker_init_fn(_worker_id: int) -> None:
    """DataLoader ``worker_init_fn`` that closes HDF5 handles inherited from the parent.

    Datasets in this library already reopen their file when they notice a new process, so this
    is optional; it releases the inherited handles (and their file descriptors) right away.
    Chain it from your own ``worker_init_fn`` if you have one.
    """
    close_inherited_sources()


def _convert(row: np.ndarray[Any, Any], dtype: Any, fn: Callable[[Any], Any] | None) -> Any:
    tensor = to_tensor(row, dtype)
    return tensor if fn is None else fn(tensor)


def _describe(reader: RowReader, cast: np.dtype[Any] | None) -> str:
    shape = (reader.length, *reader.row_shape)
    dtype = str(reader.dtype) + (f"->{cast}" if cast is not None else "")
    return f"{shape} {dtype} [{reader.strategy}]"
