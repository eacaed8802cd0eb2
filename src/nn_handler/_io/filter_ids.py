"""HDF5's filters, each defined once: its id, its name, and where a user gets it.

Ids are the HDF Group's registered-filter list. Every part of the package that names a filter
takes it from here: the decoders (``chunks/decoders.py``, ``chunks/plugins.py``: which of these
we undo ourselves), the checks and reports (``file/filters.py``: "dataset x needs filter 32015
(zstd): pip install hdf5plugin"), and ``nn-handler rewrite`` (``rewrite/codecs.py``: which
filter a codec writes). ``tests/io/test_filter_registry.py`` fails when a filter is registered
in one of them but not the others.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BITSHUFFLE",
    "BLOSC",
    "BLOSC2",
    "DEFLATE",
    "FILTERS",
    "FLETCHER32",
    "LZ4",
    "SHUFFLE",
    "ZSTD",
    "FilterFacts",
    "name_of",
    "where_to_get",
]

_HDF5PLUGIN = "pip install hdf5plugin (then `import hdf5plugin`; nn_handler imports it for you)"
_BUILTIN = "built into HDF5 / h5py"
_UNKNOWN = "a plugin for it on HDF5_PLUGIN_PATH (see the HDF Group's list of registered filters)"


@dataclass(frozen=True)
class FilterFacts:
    """What the package knows of one HDF5 filter.

    Attributes:
        code: The registered filter id.
        name: The short name reports use (``gzip``, ``zstd``).
        source: Where a user gets it when HDF5 here cannot decode it.
    """

    code: int
    name: str
    source: str


DEFLATE, SHUFFLE, FLETCHER32 = 1, 2, 3
BLOSC, LZ4, BITSHUFFLE, ZSTD, BLOSC2 = 32001, 32004, 32008, 32015, 32026

#: id -> facts, for every filter a report or an error may name.
FILTERS: dict[int, FilterFacts] = {
    f.code: f
    for f in (
        FilterFacts(DEFLATE, "gzip", _BUILTIN),
        FilterFacts(SHUFFLE, "shuffle", _BUILTIN),
        FilterFacts(FLETCHER32, "fletcher32", _BUILTIN),
        FilterFacts(4, "szip", "an h5py / HDF5 build with szip (libaec); h5py's wheels include it"),
        FilterFacts(5, "nbit", _BUILTIN),
        FilterFacts(6, "scaleoffset", _BUILTIN),
        FilterFacts(
            305,
            "lzo",
            "an HDF5 LZO plugin on HDF5_PLUGIN_PATH (hdf5plugin has none); or rewrite the file "
            "with PyTables: ptrepack --complib=blosc:zstd in.h5 out.h5",
        ),
        FilterFacts(307, "bzip2", _HDF5PLUGIN),
        FilterFacts(32000, "lzf", _BUILTIN),
        FilterFacts(BLOSC, "blosc", _HDF5PLUGIN),
        FilterFacts(LZ4, "lz4", _HDF5PLUGIN),
        FilterFacts(BITSHUFFLE, "bitshuffle", _HDF5PLUGIN),
        FilterFacts(32013, "zfp", _HDF5PLUGIN),
        FilterFacts(ZSTD, "zstd", _HDF5PLUGIN),
        FilterFacts(32017, "sz", _HDF5PLUGIN),
        FilterFacts(32018, "fcidecomp", _HDF5PLUGIN),
        FilterFacts(32024, "sz3", _HDF5PLUGIN),
        FilterFacts(BLOSC2, "blosc2", _HDF5PLUGIN),
        FilterFacts(32028, "sperr", _HDF5PLUGIN),
        FilterFacts(32033, "htj2k", _HDF5PLUGIN),
    )
}


def name_of(code: int, stored: str = "") -> str:
    """The filter's short name; for an unknown id, the name the file stores (or ``filter-N``)."""
    facts = FILTERS.get(code)
    return facts.name if facts is not None else (stored.strip() or f"filter-{code}")


def where_to_get(code: int) -> str:
    """How a user gets the filter (a pip command, a plugin path)."""
    facts = FILTERS.get(code)
    return facts.source if facts is not None else _UNKNOWN
