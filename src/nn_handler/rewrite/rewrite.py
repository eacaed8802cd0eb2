"""rewrite_file: an HDF5 file in the layout that trains fastest, checked, kept atomically.

See ``docs/cli.md#nn-handler-rewrite`` for what is written and why; the modules of this package
each hold one step: ``plan`` (what), ``dense`` / ``sparse`` (rows, streamed), ``tree`` (groups,
attributes, copies, dimension scales), ``verify`` and ``atomic``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, cast

import h5py
import numpy as np

from nn_handler._io import FileOptions, H5Source, SparseLayout, load_plugins, sparse_layouts

from ..h5inspect import inspect_file
from .atomic import atomic_output, check_output
from .dense import write_dense
from .options import RewriteOptions, parse_size
from .order import row_order
from .plan import DatasetPlan, RewritePlan, make_plan
from .report import RewriteReport
from .sparse import write_csr
from .tree import attach_scales, copy_as_stored, copy_attrs, make_groups
from .verify import VerifyResult, verify_csr, verify_dense

__all__ = ["rewrite_file"]

_ALL_DATASETS = 2**62
_PARTS = ("data", "indices", "indptr")
_ANNDATA_DICT = {"encoding-type": "dict", "encoding-version": "0.1.0"}
_ANNDATA_ARRAY = {"encoding-type": "array", "encoding-version": "0.2.0"}


def rewrite_file(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    keys: Sequence[str] | None = None,
    chunk_bytes: int | str = 1 << 20,
    sparse_chunk_bytes: int | str = 16 << 10,
    codec: str | None = None,
    level: int | None = None,
    dtypes: Mapping[str, Any] | None = None,
    shuffle_rows: int | None = None,
    memory: int | str = 2 << 30,
    verify: bool = True,
    verify_rows: int | None = None,
    dry_run: bool = False,
    force: bool = False,
    workers: int | None = None,
    progress: bool | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> RewriteReport:
    """Write ``src`` again as ``dst`` in a layout that trains fast, and check the result.

    Every dataset is chunked along axis 0 only, in whole rows of about ``chunk_bytes`` per
    chunk, compressed in parallel; sparse matrices (AnnData CSR, 10x) get ``data`` / ``indices``
    chunks of whole entries and ``indptr`` recomputed. Groups, attributes and dimension scales
    are carried over; what cannot be rewritten (scalars, missing filters, CSC matrices, virtual
    datasets, types NumPy lacks) is copied as stored and listed in the report.

    Args:
        src: The input file, or a URL (``s3://``, ``https://``, any fsspec URL).
        dst: The output file (local). Written under a temporary name in its folder and renamed
            when complete and verified; never the input.
        keys: Datasets or groups to write (a group with everything under it); None: all.
        chunk_bytes: Target decoded bytes per chunk (an int, or ``"1MiB"``).
        sparse_chunk_bytes: The same for a sparse matrix's ``data`` (default 16 KiB: the sparse
            reader gathers each row from the chunks around it, so small chunks read fastest).
        codec: ``"zstd"``, ``"lz4"`` (both need hdf5plugin to be read), ``"gzip"`` or
            ``"none"``; None: zstd (gzip without hdf5plugin), and none for data that a sample
            chunk shows does not compress.
        level: Compression level (zstd 1-22, default 3; gzip 1-9, default 4).
        dtypes: New numeric dtypes per dataset path, e.g. ``{"x": "float32"}``.
        shuffle_rows: Write the rows in the seeded order ``default_rng(seed).permutation(n)``
            and store it at ``/_nn_handler/row_order`` (output row i is input row
            ``row_order[i]``); every dataset with that many rows is permuted alike.
        memory: Bytes the rewrite may hold (an int or ``"2GiB"``): a quarter each for the input's
            decoded-chunk cache, a slab of rows, the compression queue and the rest.
        verify: Compare the output with the input through h5py before keeping it.
        verify_rows: Compare a seeded sample of this many rows per dataset; None: every row.
        dry_run: Only plan: nothing is written (the report's ``plan`` says what would be).
        force: Replace an existing ``dst``.
        workers: Compression threads; None: every core.
        progress: Show a tqdm bar (rows/s, ETA); None: when stderr is a terminal.
        storage_options: For a URL ``src``: fsspec options (credentials, endpoint).

    Returns:
        What was planned, written, copied as stored, left out and verified.

    Raises:
        FileNotFoundError: ``src`` (or ``dst``'s folder) does not exist.
        FileExistsError: ``dst`` exists and ``force`` is False.
        ValueError / TypeError: a bad argument (the message names it), or ``dst`` is ``src``.
        KeyError: a key of ``keys`` or ``dtypes`` is not in the file.
        VerifyError: the output differs from the input (it is not kept).
    """
    options = RewriteOptions(
        keys=cast(Any, keys), chunk_bytes=parse_size("chunk_bytes", chunk_bytes),
        sparse_chunk_bytes=parse_size("sparse_chunk_bytes", sparse_chunk_bytes),
        codec=codec, level=level, dtypes=dtypes or {}, shuffle_rows=shuffle_rows,
        memory=parse_size("memory", memory),
        verify=verify, verify_rows=verify_rows, workers=workers or 0,
    )  # fmt: skip
    src_path, dst_path = os.fspath(src), os.fspath(dst)
    check_output(src_path, dst_path, force=force or dry_run)
    load_plugins()
    file_options = FileOptions(swmr=False, rdcc_nbytes=options.share,
                               storage_options=storage_options)  # fmt: skip
    source = H5Source(src_path, file_options)
    try:
        found = inspect_file(src_path, max_datasets=_ALL_DATASETS, storage_options=storage_options)
        plan = make_plan(source, found, options)
        if dry_run:
            return RewriteReport(source.path, None, plan, found.file_bytes)
        return _rewrite(source, dst_path, plan, found.file_bytes, file_options, progress)
    finally:
        source.close()


def _rewrite(
    source: H5Source,
    dst: str,
    plan: RewritePlan,
    input_bytes: int,
    file_options: FileOptions,
    progress: bool | None,
) -> RewriteReport:
    skipped: list[str] = []
    verified: list[VerifyResult] = []
    unverified: list[str] = []
    with atomic_output(dst) as temp:
        start = time.perf_counter()
        with h5py.File(temp, "w") as out:
            written = _write(source, out, plan, skipped, progress)
        seconds = time.perf_counter() - start
        start = time.perf_counter()
        if plan.options.verify:
            _verify(H5Source(source.path, file_options), temp, plan, verified, unverified)
        verify_seconds = time.perf_counter() - start
    copied = [f"{d.path}: {d.note}" for d in plan.datasets if d.action == "copy"]
    return RewriteReport(
        source.path, dst, plan, input_bytes, os.path.getsize(dst), seconds, verify_seconds,
        written, copied, skipped, verified, unverified,
    )  # fmt: skip


def _write(
    source: H5Source, out: h5py.File, plan: RewritePlan, skipped: list[str], progress: bool | None
) -> int:
    handle = source.file
    order = row_order(plan.rows, plan.options.shuffle_rows or 0) if plan.rows is not None else None
    make_groups(handle, out, plan.groups, skipped)
    layouts = {lay.group: lay for lay in sparse_layouts(handle)}
    paths: list[str] = []
    total = sum(d.rows() for d in plan.datasets if d.action != "copy")
    with ThreadPoolExecutor(plan.options.workers) as pool, _bar(total, progress) as step:
        for d in plan.datasets:
            perm = order if d.permuted else None
            budget = plan.options.share
            if d.action == "csr":
                write_csr(source, out, d, layouts[d.path], perm, pool, budget, step)
            elif d.action != "copy":
                write_dense(source, out, d, perm, pool, budget, step)
            written = _member_paths(d, layouts)
            for path in written:
                if d.action == "copy":
                    copy_as_stored(handle, out, path)
                else:
                    copy_attrs(handle[path], out[path], path, skipped)
            paths.extend(written)
    if order is not None:
        _store_order(out, order, plan, paths)
    attach_scales(handle, out, paths, skipped)
    return total


def _member_paths(d: DatasetPlan, layouts: dict[str, SparseLayout]) -> list[str]:
    if d.path in layouts:
        return [f"{d.path}/{p}" for p in _PARTS]
    return [d.path]


def _store_order(out: h5py.File, order: np.ndarray[Any, Any], plan: RewritePlan,
                 paths: list[str]) -> None:  # fmt: skip
    key = plan.row_order_key
    previous = key in out  # the input was shuffled before: compose with its order
    if previous and key not in {p for p, _ in _permuted(plan)}:
        composed = out[key][...][order]  # (under uns/ in AnnData: kept apart from rows)
        del out[key]
        out.create_dataset(key, data=composed, chunks=True, compression="gzip")
    elif not previous:
        out.create_dataset(key, data=order, chunks=True, compression="gzip")
    dset = out[key]
    # anndata reads the groups of uns by their encoding: say what these are in its terms
    for group in (dset.parent, dset.parent.parent):
        if group.name != "/" and "encoding-type" not in group.attrs:
            group.attrs.update(_ANNDATA_DICT)
    dset.attrs.update(_ANNDATA_ARRAY)
    dset.attrs["description"] = (
        "output row i holds input row row_order[i] of every dataset listed in 'datasets'; "
        "input row j is at output row argsort(row_order)[j]"
        + ("; composed with the input's own row_order (rows of the original file)" * previous)
    )
    dset.attrs["seed"] = int(plan.options.shuffle_rows or 0)
    dset.attrs["generator"] = "numpy.random.default_rng(seed).permutation(rows)"
    dset.attrs["source"] = os.path.basename(plan.source)
    dset.attrs["datasets"] = [p for p, d in _permuted(plan) if p != key]


def _permuted(plan: RewritePlan) -> Iterator[tuple[str, DatasetPlan]]:
    for d in plan.datasets:
        if d.permuted:
            yield (d.path, d)


def _verify(
    source: H5Source, temp: str, plan: RewritePlan, done: list[VerifyResult], failed: list[str]
) -> None:
    order = row_order(plan.rows, plan.options.shuffle_rows or 0) if plan.rows is not None else None
    opts = plan.options
    try:
        with h5py.File(temp, "r") as out:
            for d in plan.datasets:
                perm = order if d.permuted else None
                if d.action == "csr":
                    src_group = source.file[d.path]
                    done.append(verify_csr(src_group, out[d.path], d, perm, opts.verify_rows,
                                           opts.share))  # fmt: skip
                    continue
                for path in _verified_paths(d, source.file):
                    try:
                        done.append(verify_dense(source.dataset(path), out[path], d, perm,
                                                 opts.verify_rows, opts.share))  # fmt: skip
                    except (OSError, TypeError) as exc:
                        if d.action != "copy":
                            raise
                        failed.append(f"{path}: {str(exc).splitlines()[0]}")
    finally:
        source.close()


def _verified_paths(d: DatasetPlan, handle: h5py.File) -> list[str]:
    if isinstance(handle.get(d.path), h5py.Group):
        return [f"{d.path}/{p}" for p in _PARTS]
    return [d.path]


@contextmanager
def _bar(total: int, progress: bool | None) -> Iterator[Callable[[int], None]]:
    show = sys.stderr.isatty() if progress is None else bool(progress)
    if not show:
        yield lambda n: None
        return
    from tqdm import tqdm

    with tqdm(total=total, unit="rows", unit_scale=True, desc="rewrite", dynamic_ncols=True) as bar:
        yield bar.update
