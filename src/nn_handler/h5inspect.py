"""inspect_file: what an HDF5 file holds and how this library will read it, with advice.

The report is plain data (dataclasses with ``to_dict()``) so the CLI can print it as a tree or
as JSON without logic of its own. It never gives up on a file it can open: a dataset it cannot
describe is listed with the reason, and the rest of the tree is shown. Structures written by
other software (pandas tables, PyTables indexes, AnnData / 10x sparse matrices, netCDF
dimensions) are recognised and named, with the keys to pass.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import h5py

from nn_handler._io import FileOptions, H5Source, is_url

from ._inspect.dataset import DatasetReport, FieldReport, dataset_report, unreadable_report
from ._inspect.structures import Structure, detect
from ._inspect.values import read_attrs

__all__ = [
    "DatasetReport",
    "FieldReport",
    "FileReport",
    "GroupReport",
    "StructureReport",
    "inspect_file",
    "similar_runs",
]

#: Something recognised in the file (a pandas table, a sparse matrix, …) and how to load it.
StructureReport = Structure

_LOADABLE = ("numeric", "string", "encoded", "ragged", "compound")
_NOT_SAMPLES = ("pytables-index", "sparse-matrix", "pandas-pickled", "pandas-labels")


@dataclass(frozen=True)
class GroupReport:
    """A group: its path and attributes (as JSON values)."""

    path: str
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FileReport:
    """A whole file: size, format versions, groups, datasets, structures and advice.

    ``errors`` lists objects that could not be opened at all (each with the reason).
    """

    path: str
    file_bytes: int
    superblock_version: int
    swmr_mode_capable: bool
    groups: list[GroupReport]
    datasets: list[DatasetReport]
    advice: list[str]
    omitted_datasets: int = 0
    structures: list[StructureReport] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-serializable plain data (attributes as JSON values)."""
        return asdict(self)


def inspect_file(
    path: str | os.PathLike[str],
    *,
    max_attr_chars: int = 80,
    max_datasets: int = 200,
    storage_options: Mapping[str, Any] | None = None,
) -> FileReport:
    """Describe the groups and datasets in ``path`` and advise how to load them.

    Args:
        path: The HDF5 file, or a URL (``s3://``, ``gs://``, ``az://``, ``http(s)://``, any
            fsspec URL: only the metadata is read, by byte ranges).
        max_attr_chars: String attribute values longer than this are cut (with "…").
        max_datasets: Datasets described in full; the rest are only counted (files with one
            dataset per sample can hold hundreds of thousands).
        storage_options: For a URL: the fsspec filesystem's options (credentials, endpoint,
            …); None: credentials from the environment.

    Raises:
        FileNotFoundError / OSError: the file is missing, not HDF5, or cannot be opened.
        RemoteAccessError / RemoteReadError / ImportError: a URL's credentials are missing or
            refused, its store keeps failing, or its filesystem package is not installed.
        ValueError: ``storage_options`` given for a local path.
    """
    if storage_options is not None and not is_url(path):
        raise ValueError(
            f"storage_options (keys {sorted(storage_options)}) applies to URLs only (s3://, "
            f"gs://, az://, http(s)://, …), but path={os.fspath(path)!r} is a local file; "
            "leave it out"
        )
    source = H5Source(path, FileOptions(swmr=False, storage_options=storage_options))
    try:
        handle = source.file
        group_names, dataset_names, errors = _walk(handle)
        groups = [GroupReport("/", read_attrs(handle, max_attr_chars))]
        groups += [_group_report(handle, g, max_attr_chars, errors) for g in group_names]
        structures = _structures(handle, source.path, group_names, dataset_names, errors)
        roles = {m: s.member_roles.get(m, s.kind) for s in structures for m in s.members}
        datasets = [
            _safe_dataset_report(source, handle, name, max_attr_chars, roles.get(name))
            for name in dataset_names[:max_datasets]
        ]
        superblock = _superblock(handle)
    finally:
        source.close()
    remote = source.byte_source() if source.is_remote else None
    return FileReport(
        path=source.path,
        file_bytes=remote.size() if remote is not None else os.path.getsize(source.path),
        superblock_version=superblock,
        swmr_mode_capable=superblock >= 3,
        groups=[g for g in groups if g is not None],
        datasets=datasets,
        advice=_file_advice(datasets, structures),
        omitted_datasets=max(0, len(dataset_names) - max_datasets),
        structures=structures,
        errors=errors,
    )


def similar_runs(datasets: list[DatasetReport], keep: int = 2) -> list[tuple[DatasetReport, int]]:
    """Collapse runs of datasets alike in parent group, shape, dtype and storage.

    Returns ``(dataset, hidden)`` pairs: each shown dataset with the number of datasets like it
    that follow and are not shown (0 for most). The first ``keep`` of a run are shown.
    """
    out: list[tuple[DatasetReport, int]] = []
    run: list[DatasetReport] = []
    for d in [*datasets, None]:
        if d is not None and run and _signature(d) == _signature(run[0]):
            run.append(d)
            continue
        if run:
            shown = run if len(run) <= keep + 1 else run[:keep]
            out.extend((r, 0) for r in shown[:-1])
            out.append((shown[-1], len(run) - len(shown)))
        run = [] if d is None else [d]
    return out


def _signature(d: DatasetReport) -> tuple[Any, ...] | None:
    if d.error is not None:
        return (d.path,)  # never collapse unreadable datasets
    parent = d.path.rsplit("/", 1)[0] if "/" in d.path else ""
    return (parent, d.shape, d.dtype, d.layout, d.chunks, tuple(d.filters), d.kind, d.role)


def _walk(handle: h5py.File) -> tuple[list[str], list[str], list[str]]:
    names: list[str] = []
    errors: list[str] = []
    try:
        handle.visit(names.append)  # object names only: nothing is opened while walking
    except Exception as exc:  # a damaged part of the tree: report it, describe the rest
        errors.append(f"walking the tree stopped after {len(names)} objects: {_reason(exc)}")
    groups, datasets = [], []
    for name in names:
        try:
            obj = handle[name]
        except Exception as exc:
            errors.append(f"{name}: cannot be opened: {_reason(exc)}")
            continue
        if isinstance(obj, h5py.Group):
            groups.append(name)
        elif isinstance(obj, h5py.Dataset):
            datasets.append(name)
    return groups, datasets, errors


def _group_report(handle: h5py.File, name: str, limit: int, errors: list[str]) -> GroupReport:
    try:
        return GroupReport(name, read_attrs(handle[name], limit))
    except Exception as exc:
        errors.append(f"{name}: attributes unreadable: {_reason(exc)}")
        return GroupReport(name)


def _structures(
    handle: h5py.File, path: str, groups: list[str], datasets: list[str], errors: list[str]
) -> list[Structure]:
    try:
        return detect(handle, path, groups, datasets)
    except Exception as exc:  # recognising structures is a bonus: never lose the tree over it
        errors.append(f"recognising structures failed: {_reason(exc)}")
        return []


def _safe_dataset_report(
    source: H5Source, handle: h5py.File, name: str, limit: int, role: str | None
) -> DatasetReport:
    try:
        return dataset_report(source, name, handle[name], limit, role)
    except Exception as exc:  # one unreadable dataset must not hide the rest of the file
        return unreadable_report(name, exc, role)


def _superblock(handle: h5py.File) -> int:
    try:
        return int(handle.id.get_create_plist().get_version()[0])
    except Exception:  # pragma: no cover - only on damaged files
        return -1


def _file_advice(datasets: list[DatasetReport], structures: list[Structure]) -> list[str]:
    advice = [f"{s.kind} at {s.path!r}: {s.usage}" for s in structures if s.usage]
    by_len: dict[int, list[str]] = {}
    for d in datasets:
        if _candidate(d) and d.shape:
            by_len.setdefault(d.shape[0], []).append(d.path)
    for length, keys in sorted(by_len.items(), key=lambda kv: -len(kv[1])):
        if len(keys) >= 2:
            shown = ", ".join(repr(k) for k in sorted(keys)[:6])
            more = f", … {len(keys) - 6} more" if len(keys) > 6 else ""
            advice.append(
                f"{len(keys)} datasets share {length} rows along axis 0 ({shown}{more}): "
                "candidates for H5LazyDataset(path, x_key=..., y_key=...)"
            )
    return advice


def _candidate(d: DatasetReport) -> bool:
    """True for datasets that can be x or y: loadable kind, not a structure's internals."""
    loadable = d.kind in _LOADABLE and d.role not in _NOT_SAMPLES
    return (
        loadable
        and d.shape is not None
        and len(d.shape) > 0
        and d.shape[0] > 1
        and (d.read_strategy is not None)
    )


def _reason(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
