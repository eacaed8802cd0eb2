"""HDF5 filters (codecs): their names, who provides them, and a check before the first read.

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

from ..errors import MissingFilterError
from .source import H5Source, load_plugins

__all__ = ["FILTER_NAMES", "FilterInfo", "check_filters", "check_filters_at", "filters_of"]

_HDF5PLUGIN = "pip install hdf5plugin (then `import hdf5plugin`; nn_handler imports it for you)"
_BUILTIN = "built into HDF5 / h5py"

#: id -> (name, where to get it); ids from the HDF Group's registered-filter list.
_FILTERS: dict[int, tuple[str, str]] = {
    1: ("gzip", _BUILTIN),
    2: ("shuffle", _BUILTIN),
    3: ("fletcher32", _BUILTIN),
    4: ("szip", "an h5py / HDF5 build with szip (libaec); h5py's wheels include it"),
    5: ("nbit", _BUILTIN),
    6: ("scaleoffset", _BUILTIN),
    305: (
        "lzo",
        "an HDF5 LZO plugin on HDF5_PLUGIN_PATH (hdf5plugin has none); or rewrite the file "
        "with PyTables: ptrepack --complib=blosc:zstd in.h5 out.h5",
    ),
    307: ("bzip2", _HDF5PLUGIN),
    32000: ("lzf", _BUILTIN),
    32001: ("blosc", _HDF5PLUGIN),
    32004: ("lz4", _HDF5PLUGIN),
    32008: ("bitshuffle", _HDF5PLUGIN),
    32013: ("zfp", _HDF5PLUGIN),
    32015: ("zstd", _HDF5PLUGIN),
    32017: ("sz", _HDF5PLUGIN),
    32018: ("fcidecomp", _HDF5PLUGIN),
    32024: ("sz3", _HDF5PLUGIN),
    32026: ("blosc2", _HDF5PLUGIN),
    32028: ("sperr", _HDF5PLUGIN),
    32033: ("htj2k", _HDF5PLUGIN),
}
_UNKNOWN = "a plugin for it on HDF5_PLUGIN_PATH (see the HDF Group's list of registered filters)"

#: Filter id -> short name, for reports.
FILTER_NAMES: dict[int, str] = {code: name for code, (name, _) in _FILTERS.items()}


@dataclass(frozen=True)
class FilterInfo:
    """One filter of a dataset's pipeline."""

    code: int
    name: str
    values: tuple[int, ...]
    available: bool

    @property
    def label(self) -> str:
        """Short name, with the level for gzip (``"gzip(level=4)"``)."""
        if self.code == 1 and self.values:
            return f"{self.name}(level={self.values[0]})"
        return self.name


def filters_of(dset: h5py.Dataset) -> list[FilterInfo]:
    """Return the filter pipeline of ``dset``, each marked available or not in this process."""
    load_plugins()
    plist = dset.id.get_create_plist()
    found = []
    for i in range(plist.get_nfilters()):
        code, _flags, values, raw_name = plist.get_filter(i)
        name = _FILTERS.get(code, (_stored_name(raw_name, code), ""))[0]
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
    parts = [
        f"filter {f.code} ({f.name}): {_FILTERS.get(f.code, ('', _UNKNOWN))[1]}" for f in missing
    ]
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


def _stored_name(raw: Any, code: int) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw or "")
    return text.strip() or f"filter-{code}"


def check_filters_at(source: H5Source, path: str, *, arg: str, key: str) -> None:
    """``check_filters`` for the dataset at ``path`` in ``source``, given as ``arg=key``."""
    check_filters(source.file[path], f"{arg}={key!r} in {source.path!r}", source.path)
