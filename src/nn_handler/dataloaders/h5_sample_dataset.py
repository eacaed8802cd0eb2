"""H5SampleDataset: files where every sample is its own HDF5 dataset, labels in its attributes.

The common layout ``trajectory_0, trajectory_1, …`` (in the root group or any group, over one or
more files) read safely in DataLoader workers: files open lazily in each process (never an h5py
object pickled or shared across ``fork``), the sample index is NumPy arrays (not a Python dict
copied into every worker), and it can be kept in a sidecar next to each file so the next run
starts without listing 100k members again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from .._io import (
    DataFileError,
    FileOptions,
    H5Source,
    LabelReader,
    LockingMode,
    SampleReader,
    check_paths,
    open_dataset_id,
)
from .._validate import check_callable, check_int, format_names, numpy_dtype
from ._core import FileDataset
from ._per_sample.collate import pad_collate
from ._per_sample.files import index_files
from ._per_sample.index import NamePattern, SampleIndex
from ._tensors.tensors import to_tensor

__all__ = ["H5SampleDataset", "pad_collate"]

Sample = dict[str, Any]
_SHOWN_FILES = 3


class H5SampleDataset(FileDataset[Sample]):
    """A map-style dataset where each sample is one HDF5 dataset; its attributes are the labels.

    ``dataset[i]`` returns ``{"data": tensor, "labels": dict}``. Samples are ordered by file (in
    the order given), then by name in natural order (``trajectory_2`` before ``trajectory_10``).

    Args:
        paths: One HDF5 file path, or a sequence of them (no duplicates).
        group: Group holding the sample datasets in every file (``"/"``, ``"train"``,
            ``"a/b"``).
        pattern: Select samples by name: a glob such as ``"trajectory_*"`` (``fnmatch``,
            case-sensitive), or a regular expression given as ``"re:<regex>"`` or as a compiled
            ``re.Pattern``. The whole name must match. None selects every dataset.
        limit: ``-1`` for all samples, otherwise at most the first ``limit`` (>= 1) samples.
        attrs: ``True`` for every attribute as a label, ``False`` for none (``labels`` is
            ``{}``), or a list of attribute names to read (a sample missing one raises
            ``KeyError`` naming the sample and the attributes it has).
        dtype: NumPy dtype to cast the data to, or None to keep the stored dtype.
        transform: Callable applied to the data tensor (after the cast).
        sidecar: Keep the index of each file in ``<file>.nnh-index.npz`` next to it and reuse
            it while the file's size and mtime and ``group`` / ``pattern`` are unchanged. A
            directory that cannot be written just means no sidecar (one log line); a URL has
            none.
        file_options: How each file is opened, as one ``FileOptions`` (HDF5's chunk cache, SWMR,
            locking, external files, and for URLs the fsspec options and a node-local cache; every
            field is documented there). Its fields ``swmr``, ``locking``, ``allow_external_files``,
            ``storage_options``, ``cache_dir``, ``cache_limit`` are also keywords of their own here,
            as the seeds name them; a keyword set to other than its default must agree with
            ``file_options`` when both are given.

    Members of ``group`` that are not datasets (sub-groups, named types, dangling links) are
    skipped; ``skipped`` counts them and a warning is logged with their names.

    Attributes:
        dtype: The data cast (a NumPy dtype) or None.
        transform: The data transform or None.
        index_origins: Per file, where its index came from: ``"built"``, ``"sidecar"`` or
            ``"unused"`` (past ``limit``, never opened).
        skipped: Members that matched but are not datasets, over all indexed files.

    Raises:
        ValueError: empty or duplicate ``paths``, a bad ``limit``, or no dataset matches.
        FileNotFoundError: a file does not exist. ``OSError``: a file is not HDF5.
        KeyError: ``group`` is missing in a file (the message lists the groups it has).
        TypeError: an argument has the wrong type, or an unknown keyword was passed.

    Example:
        >>> ds = H5SampleDataset(["a.h5", "b.h5"], pattern="trajectory_*", attrs=["label"])
        >>> loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=4,
        ...                     collate_fn=pad_collate)
    """

    def __init__(
        self,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        group: str = "/",
        pattern: str | Any | None = None,
        limit: int = -1,
        attrs: bool | Sequence[str] = True,
        dtype: Any = None,
        transform: Callable[[torch.Tensor], Any] | None = None,
        *,
        sidecar: bool = True,
        swmr: bool = True,
        locking: LockingMode = "best-effort",
        allow_external_files: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        file_options: FileOptions | None = None,
    ) -> None:
        self._paths = tuple(check_paths(paths))
        self._group = _check_group(group)
        self._pattern = NamePattern.parse(pattern)
        self._limit = _check_limit(limit)
        self._labels = LabelReader(_check_attrs(attrs)) if attrs is not False else None
        self.dtype = numpy_dtype("dtype", dtype)
        _check_cast(self.dtype)
        check_callable("transform", transform)
        self.transform = transform
        if not isinstance(sidecar, bool):
            raise TypeError(f"sidecar must be True or False, got {sidecar!r}")
        options = self._file_options(H5SampleDataset.__init__, locals())
        self._files = [H5Source(p, options) for p in self._paths]
        try:
            result = index_files(self._files, self._group, self._pattern, self._limit, sidecar)
        finally:  # hold no handle until a process reads (forked workers inherit none)
            for source in self._files:
                source.close()
        self._index = SampleIndex(result.files, self._limit)
        #: per file: "built" (listed now), "sidecar" (index loaded) or "unused" (past limit)
        self.index_origins: tuple[str, ...] = result.origins
        #: members of ``group`` that matched but are not datasets, over all indexed files
        self.skipped: int = result.skipped
        self._reader = SampleReader(self._files)
        self._prefix = self._group.rstrip("/").encode("utf-8") + b"/"

    @property
    def paths(self) -> tuple[str, ...]:
        """The files, in sample order."""
        return self._paths

    @property
    def group(self) -> str:
        """The group holding the samples (absolute path)."""
        return self._group

    @property
    def pattern(self) -> str | None:
        """The name pattern as text (``"re:..."`` for regular expressions), or None."""
        return None if self._pattern is None else self._pattern.describe()

    def locate(self, index: int) -> tuple[str, str]:
        """Return ``(file path, dataset path in the file)`` of sample ``index``."""
        i = self._position(index)
        name = self._index.name(i).decode("utf-8", "surrogateescape")
        return self._paths[int(self._index.file_no[i])], f"{self._group.rstrip('/')}/{name}"

    def __len__(self) -> int:
        return len(self._index)

    def __getitem__(self, index: int) -> Sample:
        """Return sample ``index`` as ``{"data": tensor, "labels": dict}``."""
        i = self._position(index)
        file_no = int(self._index.file_no[i])
        name = self._index.name(i)

        def where() -> str:
            path, key = self.locate(i)
            return f"{i} ({key!r} in {path!r})"

        dsid = self._open(file_no, name, where)
        data = to_tensor(self._reader.read(file_no, dsid, where, i), self.dtype)
        labels = self._labels.read(dsid, where) if self._labels is not None else {}
        if self.transform is not None:
            data = self.transform(data)
        return {"data": data, "labels": labels}

    def _sources(self) -> list[H5Source]:
        return self._files

    def _close_files(self) -> None:
        super()._close_files()
        self._reader.close()  # its memory maps
        if self._labels is not None:
            self._labels.clear()

    def _position(self, index: Any) -> int:
        try:
            i = check_int("index", index)
        except TypeError as exc:
            raise TypeError(f"{exc}; H5SampleDataset reads one sample per index") from None
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {index!r} is out of range for {n} samples")
        return i + n if i < 0 else i

    def _open(self, file_no: int, name: bytes, where: Callable[[], str]) -> Any:
        try:
            return open_dataset_id(self._files[file_no], self._prefix + name)
        except DataFileError:
            raise  # the file is damaged or changed: its own error says which
        except (KeyError, OSError, RuntimeError) as exc:
            raise KeyError(
                f"sample {where()} cannot be opened as a dataset ({exc}); the file changed "
                "after the index was built? Build the dataset again"
            ) from exc

    def __repr__(self) -> str:
        shown = [repr(p) for p in self._paths[:_SHOWN_FILES]]
        if len(self._paths) > _SHOWN_FILES:
            shown.append(f"… ({len(self._paths) - _SHOWN_FILES} more)")
        parts = [f"files=[{', '.join(shown)}]", f"group={self._group!r}"]
        if self._pattern is not None:
            parts.append(f"pattern={self.pattern!r}")
        parts.append(f"len={len(self)}")
        if self.skipped:
            parts.append(f"skipped={self.skipped}")
        parts.append("open" if self.is_open else "closed")
        return f"H5SampleDataset({', '.join(parts)})"


def _check_group(group: Any) -> str:
    if not isinstance(group, str) or not group:
        raise TypeError(f"group must be a non-empty str such as '/' or 'train', got {group!r}")
    return "/" + group.strip("/") if group.strip("/") else "/"


def _check_limit(limit: Any) -> int | None:
    value = check_int("limit", limit)
    if value == -1:
        return None
    if value < 1:
        raise ValueError(f"limit must be -1 (all samples) or >= 1, got {limit!r}")
    return value


def _check_attrs(attrs: Any) -> list[bytes] | None:
    if isinstance(attrs, bool):
        return None
    if isinstance(attrs, str) or not isinstance(attrs, Sequence):
        raise TypeError(f"attrs must be True, False or a list of attribute names, got {attrs!r}")
    bad = [a for a in attrs if not isinstance(a, str) or not a]
    if bad:
        raise TypeError(f"attrs must hold non-empty str names; got {format_names(map(repr, bad))}")
    return [a.encode("utf-8", "surrogateescape") for a in dict.fromkeys(attrs)]


def _check_cast(dtype: Any) -> None:
    if dtype is not None and (dtype.kind not in "biufc" or dtype.fields is not None):
        raise TypeError(f"dtype must be a numeric or bool NumPy dtype or None, got {dtype!r}")
