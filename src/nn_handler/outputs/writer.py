"""H5OutputWriter: rows keyed by sample index, from any number of processes, into one HDF5 file.

Each process (rank, DataLoader worker) that writes appends checksummed records to a part of its
own in the work folder ``PATH + ".parts"``; ``finish()`` then makes the file, in one process, by
the one assembly (``assemble.py``), and removes the folder. So the file's bytes depend only on
the rows, whatever the number of writers; ``PATH`` appears only whole; and rows stored before a
crash or kill are kept, for a rerun to skip (``stored()``).
"""

from __future__ import annotations

import json
import logging
import multiprocessing.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from .._io import PerProcess
from .._validate import check_positive_int
from ..distributed import barrier
from .assemble import assemble
from .buffers import ChunkBuffers, Filled
from .codec import encode_chunk
from .layout import OutputLayout, choose_chunk_rows
from .manifest import check_same, folder_for, read_manifest, settle_manifest
from .parts import CHUNK, ROWS, PartFile, Record, scan_folder
from .rows import flatten_outputs, specs_of
from .sources import stored_rows

__all__ = ["H5OutputWriter"]

_log = logging.getLogger("nn_handler.outputs")
_SHOWN = 5
#: rows of incomplete chunks one process holds before it stores the oldest raw
BUFFER_BYTES = 256 << 20


class H5OutputWriter:
    """Write rows by sample index into one chunked, gzip-compressed HDF5 file.

    Every process that writes (ranks, DataLoader workers; the writer pickles) calls ``write``
    with sample indices and the rows for them, in any order and split; each stores its rows in a
    part of its own in the work folder ``PATH + ".parts"``. ``finish()`` (on every rank, after
    every writer is done) checks that each row came exactly once (a repeat with the same bytes,
    such as ``DistributedSampler``'s padding, is fine), writes ``PATH`` in one process and
    removes the folder. The file's bytes do not depend on how many processes wrote it, ``PATH``
    never exists half written, and a run killed half way keeps its stored rows: a rerun with
    the same arguments can skip them (``stored()``) and ends with the same file.

    Outputs are a tensor or array per batch (the dataset ``key``), or a tuple / list / dict of
    them (datasets ``key/0``, ``key/1``, ... or ``key/<name>``), one row per index. The datasets
    share a chunk grid of about 1 MiB per chunk of the widest (``layout.py`` says why), gzip
    level 1 with HDF5's shuffle; ``bfloat16`` is stored as ``float32``.

    Args:
        path: The HDF5 file to make (replaced when it exists).
        n_rows: Rows of every dataset (the number of samples).
        key: Name of the dataset (or group of datasets, for several outputs).
        attrs: Attributes of the file (strings, numbers, lists of them), written in name order.
        chunk_rows: Rows per chunk (default: about 1 MiB of the widest dataset).
        buffer_bytes: Bytes of incomplete chunks one process holds before storing them raw.

    Raises:
        TypeError / ValueError: an argument has the wrong type or value.
        FileNotFoundError: the folder of ``path`` does not exist.

    Example:
        >>> with H5OutputWriter("preds.h5", n_rows=len(dataset)) as writer:
        ...     for indices, x in loader:
        ...         writer.write(indices, model(x))
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        n_rows: int,
        *,
        key: str = "predictions",
        attrs: Mapping[str, Any] | None = None,
        chunk_rows: int | None = None,
        buffer_bytes: int = BUFFER_BYTES,
    ) -> None:
        self.path = _check_path(path)
        self.folder = folder_for(self.path)
        self.n_rows = check_positive_int("n_rows", n_rows)
        self.key = _check_key(key)
        self.attrs = _check_attrs(attrs)
        self.chunk_rows = (
            None if chunk_rows is None else check_positive_int("chunk_rows", chunk_rows)
        )
        self.buffer_bytes = check_positive_int("buffer_bytes", buffer_bytes)
        self._layout: OutputLayout | None = None
        #: this process's part (a forked or spawned worker, or an unpickled copy, starts empty)
        self._local: PerProcess[_ProcessPart] = PerProcess()

    @property
    def layout(self) -> OutputLayout | None:
        """The file's datasets and chunk grid (None until the first write or ``declare``)."""
        if self._layout is None:
            self._layout = self._layout_in_folder()
        return self._layout

    def declare(self, outputs: Any) -> OutputLayout:
        """Fix the datasets from an example batch of outputs (not written); return the layout.

        Raises:
            ValueError: the outputs differ from the layout already fixed (or in the folder).
        """
        return self._settle(flatten_outputs(outputs, self.key))

    def write(self, indices: Any, outputs: Any) -> None:
        """Store the rows of ``outputs`` for samples ``indices`` (row k: sample ``indices[k]``).

        Args:
            indices: Sample indices: a 1-D tensor, array, list or range of integers.
            outputs: A tensor or array with one row per index, or a tuple / list / dict of them.

        Raises:
            IndexError: an index is outside ``[0, n_rows)``.
            TypeError / ValueError: outputs of another structure, shape, dtype or length than
                the indices or the first batch; a sample written again with other values.
        """
        samples = _check_indices(indices, self.n_rows)
        named = flatten_outputs(outputs, self.key)
        for name, rows in named:
            if rows.ndim == 0 or rows.shape[0] != samples.size:
                raise ValueError(
                    f"output {name!r} has {rows.shape[0] if rows.ndim else 'no'} rows for "
                    f"{samples.size} indices; write one row per index"
                )
        layout = self._settle(named)
        local = self._process_part(layout)
        for output, (_, rows) in enumerate(named):
            for filled in local.buffers.add(output, samples, rows):
                local.store(filled)
        for filled in local.buffers.overflow():
            local.store(filled)

    def stored(self) -> np.ndarray:
        """Per row, True when it is already in the work folder (from this run or a killed one).

        Raises:
            ValueError: the folder holds the parts of another output.
        """
        layout = self.layout
        if layout is None:
            return np.zeros(self.n_rows, dtype=bool)
        return stored_rows(layout, self._records())

    def close(self) -> None:
        """Store this process's rows still held and close its part; safe to call twice."""
        local = self._local.peek()
        self._local.pop()  # (a part inherited over fork is its parent's to close)
        if local is not None:
            local.close()

    def finish(self) -> Path:
        """Close, then make ``PATH`` from every part (rank 0 of a process group) and return it.

        Under ``torch.distributed`` every rank calls it (it waits for all of them); every
        writer of every process must be closed first (DataLoader workers close theirs when
        they exit).

        Raises:
            ValueError: rows are missing (how many, which first), repeated with other values,
                or nothing was written at all.
            OSError: a part is damaged (it is set aside; run again to recompute its rows).
            RuntimeError: on ranks other than 0, when rank 0 failed (its message is quoted).
        """
        self.close()
        group = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        if not group:
            return self._assemble()
        barrier()
        failure: list[Any] = [None]
        if dist.get_rank() == 0:
            try:
                self._assemble()
            except Exception as exc:
                failure[0] = f"{type(exc).__name__}: {exc}"
                dist.broadcast_object_list(failure, src=0)
                raise
        dist.broadcast_object_list(failure, src=0)
        if failure[0] is not None:
            raise RuntimeError(f"rank 0 could not make {str(self.path)!r}: {failure[0]}")
        return self.path

    def _assemble(self) -> Path:
        layout = self.layout
        if layout is None:
            raise ValueError(
                f"nothing was written for {str(self.path)!r}: call write(indices, outputs) first"
            )
        return assemble(self.folder, self.path, layout, self.attrs, self._records())

    def _records(self) -> list[Record]:
        """Every whole record of the work folder; what was left out is said in the log."""
        notes: list[str] = []
        records = scan_folder(self.folder, notes)
        for note in notes:
            _log.info("nn_handler: %s", note)
        return records

    def _manifest(self, layout: OutputLayout | None) -> dict[str, Any]:
        wanted: dict[str, Any] = {"key": self.key, "n_rows": self.n_rows, "attrs": self.attrs}
        if layout is not None:
            wanted["layout"] = layout.to_json()
        return wanted

    def _layout_in_folder(self) -> OutputLayout | None:
        found = read_manifest(self.folder)
        if found is None:
            return None
        check_same(self.folder, found, self._manifest(None))
        layout = OutputLayout.from_json(found["layout"])
        if self.chunk_rows is not None and min(self.chunk_rows, self.n_rows) != layout.chunk_rows:
            raise ValueError(
                f"the work folder {str(self.folder)!r} holds parts of {layout.chunk_rows}-row "
                f"chunks, this writer asks for chunk_rows={self.chunk_rows}; they are never "
                "mixed: pass the same chunk_rows, remove the folder, or write to another path"
            )
        return layout

    def _settle(self, named: list[tuple[str, np.ndarray]]) -> OutputLayout:
        specs = specs_of(named)
        layout = self.layout
        if layout is None:
            rows = self.chunk_rows or choose_chunk_rows(self.n_rows, specs)
            layout = OutputLayout(self.n_rows, min(rows, self.n_rows), specs)
            settle_manifest(self.folder, self._manifest(layout))
            self._layout = layout
        if specs != layout.specs:
            raise ValueError(
                f"outputs {_describe(specs)} differ from the file's datasets "
                f"{_describe(layout.specs)} (fixed by the first batch, or by the parts in "
                f"{str(self.folder)!r}); every batch must give the same outputs"
            )
        return layout

    def _process_part(self, layout: OutputLayout) -> _ProcessPart:
        local = self._local.peek()
        if local is None:
            # a new process (a forked or spawned worker) stores into a part of its own
            settle_manifest(self.folder, self._manifest(layout))
            local = self._local.set(_ProcessPart(self.folder, layout, self.buffer_bytes))
        return local

    def __enter__(self) -> H5OutputWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.finish()
        else:
            self.close()  # the rows stored so far stay for a rerun

    def __repr__(self) -> str:
        layout = self._layout
        datasets = "?" if layout is None else _describe(layout.specs)
        return (
            f"H5OutputWriter(path={str(self.path)!r}, n_rows={self.n_rows}, key={self.key!r}, "
            f"datasets={datasets}, open={self._local.peek() is not None})"
        )


class _ProcessPart:
    """What one process holds: its part, and the rows of chunks not yet complete."""

    def __init__(self, folder: Path, layout: OutputLayout, limit: int) -> None:
        self._here: PerProcess[bool] = PerProcess()  # (empty in a forked child)
        self._here.set(True)
        self.layout = layout
        self.buffers = ChunkBuffers(layout, limit)
        self.part = PartFile(folder)
        # a DataLoader worker ends without atexit: multiprocessing's exit hooks close it
        self._finalizer = multiprocessing.util.Finalize(self, self.close, exitpriority=10)

    def store(self, filled: Filled) -> None:
        if filled.complete:
            data = encode_chunk(filled.rows, self.layout.chunk_rows)
            self.part.append(CHUNK, filled.output, filled.chunk, len(filled.rows), [data])
            return
        picked = np.flatnonzero(filled.have)
        samples = (picked + filled.chunk * self.layout.chunk_rows).astype("<i8")
        rows = np.ascontiguousarray(filled.rows[picked])
        payload: list[bytes | memoryview] = [
            samples.tobytes(),
            rows.reshape(-1).view(np.uint8).data,
        ]
        self.part.append(ROWS, filled.output, -1, samples.size, payload)

    def close(self) -> None:
        if self._here.peek() is None:
            return  # a copy inherited over fork: the part is its parent's
        for filled in self.buffers.drain():
            self.store(filled)
        self.part.seal()
        self._finalizer.cancel()  # (the registry would keep this object to the process's end)


def _describe(specs: Any) -> str:
    return ", ".join(f"{s.name} {list(s.shape)} {np.dtype(s.dtype).name}" for s in specs)


def _check_path(path: Any) -> Path:
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__} {path!r}")
    resolved = Path(path).absolute()
    if not resolved.parent.is_dir():
        raise FileNotFoundError(
            f"path={str(path)!r}: its folder {str(resolved.parent)!r} does not exist; create it"
        )
    return resolved


def _check_key(key: Any) -> str:
    if not isinstance(key, str) or not key or key.startswith("/") or key.endswith("/"):
        raise ValueError(
            f"key must be a non-empty dataset name (e.g. 'predictions'), without a leading or "
            f"trailing '/', got {key!r}"
        )
    return key


def _check_attrs(attrs: Any) -> dict[str, Any]:
    if attrs is None:
        return {}
    if not isinstance(attrs, Mapping) or not all(isinstance(k, str) and k for k in attrs):
        raise TypeError(f"attrs must be a mapping of non-empty names to values, got {attrs!r}")
    try:  # what JSON keeps is what a rerun compares and what the file holds
        normal: dict[str, Any] = json.loads(json.dumps(dict(attrs), sort_keys=True))
    except TypeError as exc:
        raise TypeError(
            f"attrs must hold strings, numbers or lists of them, got {attrs!r}"
        ) from exc
    for name, value in normal.items():
        items = value if isinstance(value, list) else [value]
        if not items or any(isinstance(v, dict | list) or v is None for v in items):
            raise TypeError(
                f"attrs[{name!r}] must be a string, a number or a non-empty list of them, "
                f"got {value!r}"
            )
    return normal


def _check_indices(indices: Any, n_rows: int) -> np.ndarray:
    if isinstance(indices, torch.Tensor):
        indices = indices.detach().cpu().numpy()
    samples = np.asarray(indices)
    if samples.ndim != 1 or not (samples.dtype.kind in "iu" or samples.size == 0):
        raise TypeError(
            f"indices must be a 1-D sequence of integers (sample indices), got "
            f"{samples.dtype} of shape {samples.shape}"
        )
    samples = samples.astype(np.int64, copy=False)
    bad = samples[(samples < 0) | (samples >= n_rows)]
    if bad.size:
        shown = ", ".join(map(str, bad[:_SHOWN].tolist()))
        raise IndexError(
            f"indices {shown} are outside [0, n_rows={n_rows}) ({bad.size} in this batch)"
        )
    return samples
