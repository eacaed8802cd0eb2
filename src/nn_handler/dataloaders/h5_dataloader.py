"""H5LazyDataset: samples read lazily from one HDF5 file, per sample or a whole batch at a time.

The file is opened in whichever process reads (a DataLoader worker, the main process, a DDP rank)
and never shared between processes. Batches go through one ``RowReader`` call per key, so a
batch of 256 random samples costs one gather from a memory map (contiguous or unfiltered chunked
data) or one read per needed chunk (compressed data), not 256 h5py calls.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

import numpy as np
import torch

from .._io import (
    BYTES,
    FileOptions,
    H5Source,
    LockingMode,
    Reader,
    RowReader,
    check_encoding,
    close_inherited_sources,
    current_length,
    decode_strings,
    in_rows,
    open_reader,
    reader_at,
    row_reader,
)
from .._validate import check_callable, check_key, numpy_dtype
from ._core import RowReaderDataset
from ._tensors.columns import ENCODING_ARG, Column, label_map_from
from ._tensors.split import restack, split_samples

__all__ = ["H5LazyDataset", "h5_worker_init_fn"]

Sample = torch.Tensor | tuple[Any, Any]


class H5LazyDataset(RowReaderDataset[Sample]):
    """A map-style dataset over one HDF5 file, opened lazily in each process.

    ``dataset[i]`` returns ``x`` or ``(x, y)`` as tensors: rows are cast to ``x_dtype`` /
    ``y_dtype`` first, then passed to ``transform`` / ``target_transform``. A sequence, array or
    slice of indices returns the whole batch stacked (``x`` of shape ``(n, ...)``), and
    ``__getitems__`` lets ``DataLoader`` fetch a batch with one read per key.

    Keys are dataset paths, or ``"<dataset>:<field>"`` for one field (column) of a compound
    dataset such as a pandas / PyTables table (``"df/table:values_block_0"``); a fixed-size
    array field adds its shape to each sample. String datasets (fixed or variable length)
    return ``str`` (a list of ``str`` for a batch), or class indices (``int64``) with
    ``classes=`` / ``label_map=``. Variable-length numeric rows (an encoded JPEG/PNG per row,
    stored as vlen ``uint8``) return one 1-d tensor per sample; decode them in ``transform``
    (``nn_handler.dataloaders.transforms.decode_image``). A batch of values that differ in
    shape (or are not tensors) is returned as a list instead of a stacked tensor.

    Args:
        path: Path of the HDF5 file (or a picklable, seekable binary file object).
        x_key: Dataset holding the inputs, samples along axis 0; nested paths like
            ``"train/images"`` work.
        y_key: Dataset holding the targets (same length as ``x_key``), or None for x-only samples.
        x_dtype: NumPy dtype to cast inputs to, or None to keep the stored dtype.
        y_dtype: NumPy dtype to cast targets to, or None to keep the stored dtype.
        transform: Callable applied to each input tensor after the cast.
        target_transform: Callable applied to each target tensor after the cast.
        file_options: How each file is opened, as one ``FileOptions`` (HDF5's chunk cache, SWMR,
            locking, external files, and for URLs the fsspec options and a node-local cache; every
            field is documented there). Its fields ``rdcc_nbytes``, ``rdcc_nslots``, ``rdcc_w0``,
            ``swmr``, ``locking``, ``allow_external_files``, ``storage_options``, ``cache_dir``,
            ``cache_limit``, ``decoded_budget`` are also keywords of their own here, as the seeds
            name them; a keyword set to other than its default must agree with ``file_options`` when
            both are given.
        classes: For string targets: the class names in index order (``["cat", "dog"]``), or
            ``"auto"`` for every stored label, sorted (read once, at construction). Targets
            are then ``int64`` class indices, ready for ``CrossEntropyLoss``.
        label_map: For string targets: ``{label: class index}`` (instead of ``classes``).
        label_encoding: How string datasets (x or y) are decoded: ``"utf-8"`` (what HDF5 and
            h5py write), any Python text codec (``"latin-1"`` decodes every byte string), or
            ``"bytes"`` for the stored bytes (not with ``classes`` / ``label_map``). A string
            the encoding cannot decode raises ``DataFileError`` naming the file, the row and
            the bytes.

    Attributes:
        label_map: ``{label: class index}`` used for string targets, or None.
        classes: Class names in index order (None without a label map).

    Raises:
        FileNotFoundError: the file does not exist.
        OSError: the file is not HDF5.
        KeyError: a key is missing; the message lists the datasets in the file.
        ValueError: x and y differ in length, or a key names a scalar dataset.
        TypeError: a dataset's dtype cannot become samples (the message says what cast or
            key would work), or ``classes`` / ``label_map`` are given for numeric targets.
        RuntimeError: a dataset is compressed with a filter that cannot be decoded here (the
            message names the filter and the package that provides it).
        DataFileError: ``classes="auto"`` reads a label that ``label_encoding`` cannot decode
            (reads raise it too, for the rows they read).

    Example:
        >>> ds = H5LazyDataset("data.h5", "images", "labels", x_dtype=np.float32)
        >>> loader = DataLoader(ds, batch_size=256, shuffle=True, num_workers=4)
    """

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
        allow_external_files: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        decoded_budget: int | str | None = None,
        file_options: FileOptions | None = None,
        classes: Sequence[str] | str | None = None,
        label_map: Mapping[str, int] | None = None,
        label_encoding: str = "utf-8",
    ) -> None:
        check_key("x_key", x_key, optional=False)
        check_key("y_key", y_key, optional=True)
        check_callable("transform", transform)
        check_callable("target_transform", target_transform)
        self.x_dtype = numpy_dtype("x_dtype", x_dtype)
        self.y_dtype = numpy_dtype("y_dtype", y_dtype)
        self.transform = transform
        self.target_transform = target_transform
        self.label_encoding = check_encoding(ENCODING_ARG, label_encoding)
        options = self._file_options(H5LazyDataset.__init__, locals())
        self._source = H5Source(path, options)
        try:
            self._build_readers(x_key, y_key, classes, label_map)
        finally:
            # Hold no handle until a process reads: forked workers then inherit nothing, and a
            # plain h5py.File on the same path in this process does not clash with our SWMR open.
            self._source.close()

    def _build_readers(
        self,
        x_key: str,
        y_key: str | None,
        classes: Sequence[str] | str | None,
        label_map: Mapping[str, int] | None,
    ) -> None:
        self._x = open_reader(self._source, x_key, arg="x_key")
        self._x_col = self._column(self._x, "x", self.x_dtype, None)
        self._y: Reader | None = None
        self._y_col: Column | None = None
        if y_key is None:
            if classes is not None or label_map is not None:
                raise TypeError("classes= / label_map= map string targets: pass a y_key")
            self.label_map = None
            return
        self._y = open_reader(self._source, y_key, arg="y_key")
        if self._y.length != self._x.length:
            raise ValueError(
                f"x_key={x_key!r} has {self._x.length} samples but y_key={y_key!r} has "
                f"{self._y.length}; both need the same length along axis 0"
            )
        y = self._y
        if self.label_encoding == BYTES and (classes is not None or label_map is not None):
            raise TypeError(
                f"{ENCODING_ARG}='bytes' returns the stored bytes, but classes= / label_map= "
                "map str labels; pass the labels' encoding (e.g. 'latin-1') instead"
            )
        self.label_map = label_map_from(classes, label_map, lambda: self._every_label(y))
        self._y_col = self._column(y, "y", self.y_dtype, self.label_map)

    def _every_label(self, y: Reader) -> list[str]:
        where = in_rows(f"y_key={y.key!r}", ENCODING_ARG, y.source.path, np.arange(y.length))
        labels = decode_strings(y.read_range(0, y.length), self.label_encoding, where)
        return labels.tolist()  # type: ignore[no-any-return]

    def _column(
        self, reader: Reader, which: str, cast: Any, label_map: Mapping[str, int] | None
    ) -> Column:
        return Column(
            f"{which}_key",
            reader.key,
            reader.dtype,
            reader.row_shape,
            cast,
            f"{which}_dtype",
            label_map,
            encoding=self.label_encoding,
            origin=(reader.source.path, reader.length),
        )

    @property
    def classes(self) -> list[str] | None:
        """Class names in index order (for string targets with a label map), or None."""
        if self.label_map is None:
            return None
        return sorted(self.label_map, key=self.label_map.__getitem__)

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

    def prefetch(self, indices: Any) -> None:
        """The old name of ``read_ahead`` (``prefetch`` now means copying to the device)."""
        warnings.warn(
            "H5LazyDataset.prefetch() is now read_ahead(); prefetch will be removed in a "
            "future release",
            DeprecationWarning,
            stacklevel=2,
        )
        self.read_ahead(indices)

    def _sources(self) -> list[H5Source]:
        return [self._source]

    def _row_readers(self) -> list[RowReader]:
        """The reader of every key's chunks: windows, readahead and caches are theirs."""
        return [row_reader(reader) for reader in (self._x, self._y) if reader is not None]

    def _transforms(self) -> list[Callable[[Any], Any] | None]:
        return [self.transform, self.target_transform]

    def __len__(self) -> int:
        return self._x.length

    def _follow_growth(self) -> None:
        """Serve every row that both keys hold now (readers rebuilt for the grown extent)."""
        readers = [r for r in (self._x, self._y) if r is not None]
        length = min(current_length(r) for r in readers)
        if length == self._x.length:
            return
        self._x = reader_at(self._x, length)
        self._x_col = self._column(self._x, "x", self.x_dtype, None)
        if self._y is not None:
            self._y = reader_at(self._y, length)
            self._y_col = self._column(self._y, "y", self.y_dtype, self.label_map)

    def __getitems__(self, indices: Sequence[int]) -> list[Sample]:
        """Return the samples at ``indices`` as a list, reading the batch at once."""
        return self._past_the_end_refreshes(self._samples, indices)

    def _samples(self, indices: Sequence[int]) -> list[Sample]:
        # torch's collate stacks the samples again: the batch stays in this process's memory
        x, y = self._read_batch(indices, leaves=False)
        return split_samples(x, y, self.transform, self.target_transform)

    def _sample(self, index: Any) -> Any:
        x = self._x_col.read_one(self._x, index)
        x = x if self.transform is None else self.transform(x)
        if self._y is None or self._y_col is None:
            return x
        y = self._y_col.read_one(self._y, index)
        return x, y if self.target_transform is None else self.target_transform(y)

    def _batch(self, indices: Any) -> Any:
        x, y = self._read_batch(indices, leaves=True)
        x = x if self.transform is None else restack(self.transform, x)
        if y is None:
            return x
        return x, y if self.target_transform is None else restack(self.target_transform, y)

    def _read_batch(self, indices: Any, *, leaves: bool) -> tuple[Any, Any | None]:
        """The batch at ``indices``, one value per key (``y`` None without one), untransformed.

        The one read of a batch, for ``__getitems__`` (``leaves=False``: it is split into samples
        next) and for a stacked batch (``batched_loader``, ``dataset[indices]``): a key's rows
        the batch keeps as they are read go straight into the buffer that leaves a worker
        process (``_read_rows``).
        """
        x = self._column_batch(self._x, self._x_col, indices, leaves and self.transform is None)
        if self._y is None or self._y_col is None:
            return x, None
        keep = leaves and self.target_transform is None
        return x, self._column_batch(self._y, self._y_col, indices, keep)

    def _column_batch(self, reader: Reader, column: Column, indices: Any, leaves: bool) -> Any:
        if column.kind.kind == "numeric":  # numbers: read (and cast) in place
            return self._read_rows(reader, indices, column.cast, leaves=leaves)
        return column.batch(reader.read(indices), indices)

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


def _describe(reader: Reader, cast: np.dtype[Any] | None) -> str:
    shape = (reader.length, *reader.row_shape)
    dtype = str(reader.dtype) + (f"->{cast}" if cast is not None else "")
    return f"{shape} {dtype} [{reader.strategy}]"
