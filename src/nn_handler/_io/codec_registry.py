"""HDF5's filters (codecs), each ONE record: what the package reads and writes comes from here.

A record (``FilterCodec``) is all the package knows of one filter: its registered id (the HDF
Group's list), the short name reports and ``nn-handler rewrite --codec`` use, where a user gets
it, how the chunk pipeline undoes it into a destination buffer (``decoder``; the code is in
``chunks/decoders.py`` and ``chunks/plugins.py``) and how a rewrite writes it (``encoder``: one
chunk's stored bytes, the filter's ``cd_values``, the levels it accepts). Everything else
derives from ``RECORDS``: which filters the pipeline decodes (``chunks/codecs.py``), the checks
and their messages (``file/filters.py``: "dataset x needs filter 32015 (zstd): pip install
hdf5plugin"), the rewrite's codecs, levels and default (``rewrite/codecs.py``, and through it
the CLI). A record with neither decoder nor encoder is a filter HDF5 may decode with its plugin:
reports name it and say where to get it.

Adding a codec that is read and written is one record line below (and a module with its decode
and encode, when they are more than a library call). ``tests/io/test_codec_registry.py`` fails
when a record is half there, and round-trips every codec a rewrite writes.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .chunks import encoders
from .chunks.decoders import CHECKSUM, INFLATE, UNSHUFFLE, Decoder, Step
from .chunks.plugins import (
    BITSHUFFLE_DECODER,
    BLOSC2_DECODER,
    BLOSC_DECODER,
    LZ4_DECODER,
    ZSTD_DECODER,
)

__all__ = [
    "CODECS",
    "DEFLATE",
    "FLETCHER32",
    "RECORDS",
    "SHUFFLE",
    "Encode",
    "Encoder",
    "FilterCodec",
    "Levels",
    "decoder_of",
    "name_of",
    "where_to_get",
    "written",
]

#: HDF5's built-in filters the chunk pipeline and the layout checks name in their logic.
DEFLATE, SHUFFLE, FLETCHER32 = 1, 2, 3

_HDF5PLUGIN = "pip install hdf5plugin (then `import hdf5plugin`; nn_handler imports it for you)"
_BUILTIN = "built into HDF5 / h5py"
_UNKNOWN = "a plugin for it on HDF5_PLUGIN_PATH (see the HDF Group's list of registered filters)"

#: (one chunk's bytes, level) -> the bytes the filter stores.
Encode = Callable[[Any, int | None], bytes]


def _level_or_zero(level: int | None) -> tuple[int, ...]:
    return (level,) if level is not None else (0,)


@dataclass(frozen=True)
class Levels:
    """The compression levels a codec accepts, and the one it writes by default."""

    low: int
    high: int
    default: int

    def __str__(self) -> str:
        return f"{self.low}-{self.high} ({self.default})"


@dataclass(frozen=True)
class Encoder:
    """How ``nn-handler rewrite`` writes a filter (the encode half of its record).

    Attributes:
        encode: One chunk's bytes (shuffled first where the dataset shuffles) -> stored bytes.
        levels: The levels it accepts; None: it takes none.
        values: Level -> the filter's ``cd_values`` on a dataset-creation property list (what
            HDF5 runs when h5py writes the rows itself).
    """

    encode: Encode
    levels: Levels | None = None
    values: Callable[[int | None], tuple[int, ...]] = field(default=_level_or_zero)


@dataclass(frozen=True)
class FilterCodec:
    """One HDF5 filter: its facts, how we decode it, and how we write it.

    Attributes:
        code: The registered filter id.
        name: The short name reports and ``--codec`` use (``gzip``, ``zstd``).
        source: Where a user gets it when HDF5 here cannot decode it.
        decoder: How the chunk pipeline undoes it; None: h5py decodes it (with its plugin).
        encoder: How a rewrite writes it; None: a rewrite does not write it.
    """

    code: int
    name: str
    source: str
    decoder: Decoder | None = None
    encoder: Encoder | None = None

    def readable_here(self) -> bool:
        """True when plain h5py here reads what this filter writes (built in, or hdf5plugin)."""
        return self.source != _HDF5PLUGIN or importlib.util.find_spec("hdf5plugin") is not None


#: Every filter a report may name. The ones a rewrite writes come first, in the order the CLI
#: lists them; the first of them that h5py reads here is a rewrite's default.
RECORDS: tuple[FilterCodec, ...] = (
    FilterCodec(32015, "zstd", _HDF5PLUGIN, ZSTD_DECODER, Encoder(encoders.zstd, Levels(1, 22, 3))),
    FilterCodec(32004, "lz4", _HDF5PLUGIN, LZ4_DECODER, Encoder(encoders.lz4h5)),
    FilterCodec(DEFLATE, "gzip", _BUILTIN, INFLATE, Encoder(encoders.deflate, Levels(1, 9, 4))),
    FilterCodec(SHUFFLE, "shuffle", _BUILTIN, UNSHUFFLE),
    FilterCodec(FLETCHER32, "fletcher32", _BUILTIN, CHECKSUM),
    FilterCodec(4, "szip", "an h5py / HDF5 build with szip (libaec); h5py's wheels include it"),
    FilterCodec(5, "nbit", _BUILTIN),
    FilterCodec(6, "scaleoffset", _BUILTIN),
    FilterCodec(
        305,
        "lzo",
        "an HDF5 LZO plugin on HDF5_PLUGIN_PATH (hdf5plugin has none); or rewrite the file "
        "with PyTables: ptrepack --complib=blosc:zstd in.h5 out.h5",
    ),
    FilterCodec(307, "bzip2", _HDF5PLUGIN),
    FilterCodec(32000, "lzf", _BUILTIN),
    FilterCodec(32001, "blosc", _HDF5PLUGIN, BLOSC_DECODER),
    FilterCodec(32008, "bitshuffle", _HDF5PLUGIN, BITSHUFFLE_DECODER),
    FilterCodec(32013, "zfp", _HDF5PLUGIN),
    FilterCodec(32017, "sz", _HDF5PLUGIN),
    FilterCodec(32018, "fcidecomp", _HDF5PLUGIN),
    FilterCodec(32024, "sz3", _HDF5PLUGIN),
    FilterCodec(32026, "blosc2", _HDF5PLUGIN, BLOSC2_DECODER),
    FilterCodec(32028, "sperr", _HDF5PLUGIN),
    FilterCodec(32033, "htj2k", _HDF5PLUGIN),
)

#: id -> record.
CODECS: dict[int, FilterCodec] = {record.code: record for record in RECORDS}


def name_of(code: int, stored: str = "") -> str:
    """The filter's short name; for an unknown id, the name the file stores (or ``filter-N``)."""
    record = CODECS.get(code)
    return record.name if record is not None else (stored.strip() or f"filter-{code}")


def where_to_get(code: int) -> str:
    """How a user gets the filter (a pip command, a plugin path)."""
    record = CODECS.get(code)
    return record.source if record is not None else _UNKNOWN


def decoder_of(step: Step) -> Decoder | None:
    """How to undo ``step`` here; None when we do not (h5py decodes it, with its plugin).

    Asking imports the library the filter's decoder needs (``chunks/libraries.py``).
    """
    record = CODECS.get(step.code)
    if record is None or record.decoder is None or not record.decoder.available(step):
        return None
    return record.decoder


def written() -> tuple[FilterCodec, ...]:
    """The filters a rewrite writes, in the order the CLI lists them."""
    return tuple(record for record in RECORDS if record.encoder is not None)
