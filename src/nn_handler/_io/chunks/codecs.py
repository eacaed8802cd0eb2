"""Undo a dataset's whole filter pipeline outside HDF5: one raw chunk into its decoded bytes.

h5py runs every HDF5 call under one global lock, so threads cannot decompress in parallel
through it. The raw (still filtered) bytes of a chunk come out quickly (``pread`` or
``read_direct_chunk``); ``ChunkPipeline.decode_into(raw, filter_mask, out)`` then undoes the
filters (each filter's record in ``codec_registry.py``; the decoders in ``decoders.py`` and
``plugins.py``: libraries that release the GIL) straight into ``out``, a slot of the
decoded-chunk window or the caller's batch, so a thread pool decodes chunks in parallel.

``pipeline_for`` is the one guard: a pipeline only when every filter is one we decode here
(any order, any repetition; a per-chunk ``filter_mask`` skips filters) and the file's bytes are
the values; otherwise None, and h5py decodes. It also imports the libraries the pipeline will
call (``libraries.py``: nothing is imported before a dataset needs it). Every step checks
that it produced exactly the bytes expected and raises ``ChunkDecodeError`` otherwise: the
reader reports the chunk as corrupt (``CorruptFileError``) rather than hand it to HDF5, whose
filters may return uninitialised memory for a short stream. A stream nested in another
compressor is inflated into a bound a little above one chunk: a forged stream that would inflate
to gigabytes costs one chunk of memory. Only ``UnsupportedChunkError`` (a variant we do not
decode) falls back to h5py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import h5py
import numpy as np

from ..codec_registry import CODECS, DEFLATE, FLETCHER32, SHUFFLE, decoder_of
from ..file.layout import stored_as_values
from .decoders import (
    CHECKSUM_BYTES,
    Buffer,
    ChunkDecodeError,
    Decoder,
    Filter,
    Step,
    UnsupportedChunkError,
    inflate_head,
    inflate_many,
    scratch,
    strip_checksum,
    unshuffle_rows,
)
from .shuffle import unshuffle_head

__all__ = ["ChunkPipeline", "pipeline_for"]

_HEAD_SCRATCH = 5  # the scratch buffer ``decode_head`` decompresses a shuffled chunk into
_BATCHED = ((DEFLATE,), (SHUFFLE, DEFLATE))  # pipelines ``decode_many`` runs for all at once
# above this, libdeflate's faster inflate outweighs the ~4 us it takes to set up per call
_BATCHED_MAX_BYTES = 2 * 1024
_SIZE_KEEPING = frozenset({SHUFFLE, FLETCHER32})  # steps whose output size is fixed by the chunk
# filter id -> how to undo it, for every filter a record decodes (Fletcher-32 is stripped by
# ``strip_checksum``: a sum checks its input and fills no destination)
_UNDO: dict[int, Filter] = {
    code: record.decoder.undo for code, record in CODECS.items() if record.decoder is not None
}


@dataclass(frozen=True)
class ChunkPipeline:
    """How to undo one dataset's filters (see the module docstring).

    Attributes:
        steps: The filters in pipeline (write) order.
        chunk_shape: Shape of one chunk.
        dtype: The dataset's dtype (its in-memory bytes equal the file's).
    """

    steps: tuple[Step, ...]
    chunk_shape: tuple[int, ...]
    dtype: np.dtype[Any]
    _by_mask: dict[int, tuple[Step, ...]] = field(default_factory=dict, compare=False)

    @cached_property
    def chunk_nbytes(self) -> int:
        """Bytes of one decoded chunk."""
        return math.prod(self.chunk_shape) * self.dtype.itemsize

    def decode_into(self, raw: Buffer, filter_mask: int, out: Buffer) -> None:
        """Decode ``raw`` (uint8) into ``out`` (uint8, exactly ``chunk_nbytes``).

        Raises:
            ChunkDecodeError: the chunk does not decode to exactly ``chunk_nbytes`` bytes, a
                checksum does not match, or a stream is corrupt.
        """
        if out.nbytes != self.chunk_nbytes:
            raise ValueError(f"out holds {out.nbytes} bytes, a chunk {self.chunk_nbytes}")
        active = self._active(filter_mask)
        current, in_out = raw, False
        for k in reversed(range(len(active))):
            step = active[k]
            size = self._undone_nbytes(active[:k], step, current)
            if step.code == FLETCHER32:
                current, in_out = strip_checksum(current), False
                if size is not None and current.nbytes + CHECKSUM_BYTES != size:
                    raise ChunkDecodeError(
                        f"chunk holds {current.nbytes + CHECKSUM_BYTES} bytes, expected {size} "
                        "with its sum"
                    )
                continue
            dest = out if k == 0 else scratch(self._bound if size is None else size, k % 2)
            current, in_out = _UNDO[step.code](step, current, dest), dest is out
            if size is not None and current.nbytes != size:
                raise ChunkDecodeError(f"chunk decoded to {current.nbytes} bytes, expected {size}")
        if current.nbytes != out.nbytes:
            raise ChunkDecodeError(
                f"chunk decoded to {current.nbytes} bytes, expected {out.nbytes}"
            )
        if not in_out:  # no filter left to write into ``out`` (masks, checksum last)
            out[:] = current

    def decode_many(
        self, raw: Buffer, spans: Sequence[tuple[int, int]], masks: Sequence[int], out: Buffer
    ) -> None:
        """Decode the chunks ``raw[o:o + n]`` of ``spans`` into the rows of ``out``.

        ``out`` is uint8 of shape ``(len(spans), chunk_nbytes)``. Chunks of at most 2 KiB in
        plain deflate (after a byte shuffle or not), no filter skipped: all at once
        (``inflate_many``, ``unshuffle_rows``), with the same checks as ``decode_into``;
        otherwise one ``decode_into`` per chunk.

        Raises:
            ChunkDecodeError: as ``decode_into``, for any of the chunks (decode them one at a
                time to learn which).
        """
        if out.shape != (len(spans), self.chunk_nbytes):
            raise ValueError(
                f"out has shape {out.shape}, expected {(len(spans), self.chunk_nbytes)}"
            )
        codes = tuple(step.code for step in self.steps)
        if any(masks) or codes not in _BATCHED or self.chunk_nbytes > _BATCHED_MAX_BYTES:
            for k, (start, size) in enumerate(spans):
                self.decode_into(raw[start : start + size], masks[k], out[k])
            return
        if codes == (DEFLATE,):
            inflate_many(raw, spans, out)
            return
        shuffled = scratch(out.size, 0)[: out.size].reshape(out.shape)
        inflate_many(raw, spans, shuffled)
        shuffle = self.steps[0]
        unshuffle_rows(
            shuffled, out, int(shuffle.values[0]) if shuffle.values else shuffle.itemsize
        )

    def decode(self, raw: Any, filter_mask: int = 0) -> np.ndarray[Any, Any]:
        """Return one chunk (bytes-like ``raw``) as a new array of ``chunk_shape``.

        Raises:
            ChunkDecodeError: as ``decode_into``.
        """
        out = np.empty(self.chunk_shape, self.dtype)
        self.decode_into(_bytes_of(raw), filter_mask, out.reshape(-1).view(np.uint8))
        return out

    def decode_head(
        self, raw: Any, nbytes: int, filter_mask: int = 0
    ) -> np.ndarray[Any, Any] | None:
        """Return the first ``nbytes`` decoded bytes (uint8), decoding no more than it must.

        Plain deflate is inflated only that far. A byte-shuffle over one compressor (zstd,
        lz4, blosc, deflate, ...) is decompressed whole, but only the elements of the head are
        put back together: unshuffling a whole chunk costs about as much as decompressing it.
        None otherwise (checksums, filters skipped for this chunk): the caller decodes the
        chunk.

        Raises:
            ChunkDecodeError: the stream is corrupt or shorter than ``nbytes``.
        """
        if filter_mask or not self.decodes_head:
            return None
        if len(self.steps) == 1:
            return inflate_head(raw, nbytes)
        shuffle = self.steps[0]
        shuffled = scratch(self.chunk_nbytes, _HEAD_SCRATCH)
        self._compressed.decode_into(_bytes_of(raw), 0, shuffled)
        return unshuffle_head(
            shuffled, nbytes, int(shuffle.values[0]) if shuffle.values else shuffle.itemsize
        )

    @property
    def decodes_head(self) -> bool:
        """True when ``decode_head`` costs less than the whole chunk's decode.

        That is plain deflate (it stops early), or a byte-shuffle over one compressor.
        """
        codes = tuple(step.code for step in self.steps)
        if codes == (DEFLATE,):
            return True
        return len(codes) == 2 and codes[0] == SHUFFLE and codes[1] not in _SIZE_KEEPING

    @cached_property
    def _compressed(self) -> ChunkPipeline:
        """This pipeline without its first step (the shuffle ``decode_head`` undoes in part)."""
        return ChunkPipeline(self.steps[1:], self.chunk_shape, self.dtype)

    @cached_property
    def _bound(self) -> int:
        """Bytes a stream nested inside another compressor may inflate to.

        That is the chunk, its checksums, and the few bytes per block that a nested deflate
        stream adds.
        """
        sums = sum(step.code == FLETCHER32 for step in self.steps)
        slack = self.chunk_nbytes // 64 + 64 * len(self.steps)
        return self.chunk_nbytes + CHECKSUM_BYTES * sums + slack

    def _undone_nbytes(self, inner: tuple[Step, ...], step: Step, data: Buffer) -> int | None:
        """Bytes ``step`` must turn ``data`` into (Fletcher-32: the bytes it must be given).

        Below only size-keeping steps, that is one chunk plus the inner checksums; over
        compressed bytes (a pipeline that shuffles or sums after compressing) a shuffle keeps
        the stream's size, a sum checks whatever is there and an inflate is bounded (None).
        """
        if all(s.code in _SIZE_KEEPING for s in inner):
            sums = sum(s.code == FLETCHER32 for s in inner)
            return self.chunk_nbytes + CHECKSUM_BYTES * (sums + (step.code == FLETCHER32))
        if step.code in (FLETCHER32, DEFLATE):
            return None
        if step.code == SHUFFLE:
            return int(data.nbytes)
        raise UnsupportedChunkError("a chunk compressed twice: its inner size is not recorded")

    def _active(self, mask: int) -> tuple[Step, ...]:
        found = self._by_mask.get(mask)
        if found is None:
            found = tuple(s for i, s in enumerate(self.steps) if not mask >> i & 1)
            self._by_mask[mask] = found
        return found


def _bytes_of(raw: Any) -> Buffer:
    return raw if isinstance(raw, np.ndarray) else np.frombuffer(raw, dtype=np.uint8)


def pipeline_for(dset: h5py.Dataset) -> ChunkPipeline | None:
    """The pipeline for a chunked dataset whose every filter we decode, else None (h5py must).

    Requires a chunked, non-virtual dataset with at least one filter, each one decoded here,
    and a file datatype whose bytes equal h5py's in-memory type (so no HDF5 type conversion
    would change them).
    """
    if dset.chunks is None or dset.is_virtual or dset.dtype.hasobject:
        return None
    plist = dset.id.get_create_plist()
    itemsize = dset.dtype.itemsize
    steps = tuple(
        Step(int(code), tuple(int(v) for v in values), itemsize)
        for code, _, values, _ in (plist.get_filter(i) for i in range(plist.get_nfilters()))
    )
    decoders = _decoders(steps)
    if not decoders or itemsize == 0 or not stored_as_values(dset):
        return None
    for decoder in decoders:
        decoder.prepare()
    return ChunkPipeline(steps, tuple(int(c) for c in dset.chunks), dset.dtype)


def _decoders(steps: tuple[Step, ...]) -> list[Decoder]:
    """Each step's decoder, or [] when a step is not decoded here (its library not asked for)."""
    found = []
    for step in steps:
        decoder = decoder_of(step)
        if decoder is None:
            return []
        found.append(decoder)
    return found
