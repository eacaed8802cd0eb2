"""A dataset's HDF5 filters, named from ``codec_registry``, and a check before the first read.

Without this check a dataset compressed with a filter whose plugin is missing builds fine and
fails at the first read with HDF5's "can't open directory (/usr/local/lib/plugin)". HDF5 looks
for plugins on ``HDF5_PLUGIN_PATH`` when asked whether a filter is available, and ``hdf5plugin``
(imported by ``H5Source`` when installed) registers its filters on import, so
``h5py.h5z.filter_avail`` answers for every way a plugin can be installed.

``check_filters`` is the one check: every dataset class runs it (through the layout check,
``layout.py``, or before a reader is built) and raises ``MissingFilterError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import h5py

from ..codec_registry import DEFLATE, name_of, where_to_get
from ..errors import MissingFilterError
from .source import H5Source, load_plugins

__all__ = ["FilterInfo", "check_filters", "check_filters_at", "filters_of"]


@dataclass(frozen=True)
class FilterInfo:
    """One filter of a dataset's pipeline."""

    code: int
    name: str
    values: tuple[int, ...]
    available: bool

    @property
    def title(self) -> str:
        """Its id and name, as messages name a filter (``"32015 (zstd)"``)."""
        return f"{self.code} ({self.name})"

    @property
    def source(self) -> str:
        """Where a user gets it (``codec_registry``: a pip command, a plugin path)."""
        return where_to_get(self.code)

    @property
    def label(self) -> str:
        """Short name, with the level for gzip (``"gzip(level=4)"``)."""
        if self.code == DEFLATE and self.values:
            return f"{self.name}(level={self.values[0]})"
        return self.name


def filters_of(dset: h5py.Dataset) -> list[FilterInfo]:
    """Return the filter pipeline of ``dset``, each marked available or not in this process."""
    load_plugins()
    plist = dset.id.get_create_plist()
    found = []
    for i in range(plist.get_nfilters()):
        code, _flags, values, raw_name = plist.get_filter(i)
        name = name_of(int(code), _stored_text(raw_name))
        found.append(FilterInfo(int(code), name, tuple(values), _available(code)))
    return found


def check_filters(dset: h5py.Dataset, where: str, path: str | None = None) -> None:
    """Raise ``MissingFilterError`` naming each filter of ``dset`` that HDF5 cannot decode here.

    The message gives the filter's id and name and how to get it (``pip install hdf5plugin``,
    or a plugin directory on ``HDF5_PLUGIN_PATH``).

    Args:
        dset: The dataset.
        where: What the message calls it: the argument or dataset, and its file.
        path: The file, for the error's ``path``.
    """
    missing = [f for f in filters_of(dset) if not f.available]
    if not missing:
        return
    parts = [f"filter {f.title}: {f.source}" for f in missing]
    raise MissingFilterError(
        f"{where} is compressed with a filter HDF5 cannot decode in this environment: "
        f"{'; '.join(parts)}. Install the plugin, or point HDF5_PLUGIN_PATH at a directory "
        "that holds it, then retry",
        path,
    )


def _available(code: int) -> bool:
    try:
        return bool(h5py.h5z.filter_avail(code))
    except (OSError, ValueError):
        return False


def _stored_text(raw: Any) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw or "")


def check_filters_at(source: H5Source, path: str, *, arg: str, key: str) -> None:
    """``check_filters`` for the dataset at ``path`` in ``source``, given as ``arg=key``."""
    check_filters(source.file[path], f"{arg}={key!r} in {source.path!r}", source.path)
