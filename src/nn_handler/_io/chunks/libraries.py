"""The decoders' libraries (``imagecodecs``), imported on first use, never at import.

Every spawn or forkserver DataLoader worker imports the package afresh: a codec library imported
at import time is paid for by each of them, whether or not its dataset is compressed. So a
decode function is looked up the first time something asks for it: when a dataset's codec
pipeline is built (``codecs.pipeline_for`` loads what the pipeline will call, in the process
that builds the dataset, so forked workers inherit it), or when a chunk first needs it. The
answer (the function, or None when the library or the function is missing) is then kept.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["IMAGECODECS", "Decode", "Library", "library"]

Decode = Callable[..., Any]  # a library's decode function


def library(module: str, function: str) -> Decode | None:
    """``module.function`` when the module imports and has it (older versions may not)."""
    try:
        found: Decode | None = getattr(importlib.import_module(module), function, None)
    except ImportError:
        return None
    return found


class Library:
    """One library's functions, as attributes looked up (and the library imported) on first use.

    ``IMAGECODECS.zstd_decode`` is ``imagecodecs.zstd_decode``, or None where it is missing.
    A test may set an attribute to None to run the fallback without the library.
    """

    def __init__(self, module: str) -> None:
        self._module = module

    def __getattr__(self, function: str) -> Decode | None:
        if function.startswith("__"):  # (copy, pickle and friends probe for dunders)
            raise AttributeError(function)
        found = library(self._module, function)
        setattr(self, function, found)  # kept: later lookups are plain attributes
        return found

    def load(self, *functions: str) -> bool:
        """Look ``functions`` up now; True when every one of them is there."""
        return all(getattr(self, name) is not None for name in functions)


#: ``imagecodecs``: libdeflate, zstd, lz4, c-blosc, bitshuffle and HDF5's Fletcher-32, each
#: releasing the GIL (``pip install nn-handler[fast]``).
IMAGECODECS = Library("imagecodecs")
