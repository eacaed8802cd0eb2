"""Which fields a set of files holds: name mapping, per-file scan, cross-file checks.

A *field* is a logical name (``"fhr_st"``, ``"guid"``, …) mapped to a dataset path inside each
file, or to one column of a compound dataset (``"df/table:values_block_0"``, see ``_keys``).
Every field a file holds must have the file's length ``N`` along axis 0. Fields that are loaded
must agree across files on the shape of one sample and on their kind (string or numeric),
so that batches always stack to the same shapes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._io import (
    FIELD_SEPARATOR,
    H5Source,
    check_filters_at,
    dataset_keys,
    describe_field,
    is_string_dtype,
)
from ..._validate import format_names

__all__ = [
    "DEFAULT_FIELDS",
    "VALID_MASK",
    "FieldInfo",
    "FileSchema",
    "OutputField",
    "check_filters_of",
    "check_present",
    "field_list",
    "output_fields",
    "resolve_field_names",
    "scan_file",
    "with_field_keys",
]

DEFAULT_FIELDS = ("fhr_st", "fhr_ph", "target", "weight", "guid", "cs_label", "bg_label", "epoch")
#: Name of the computed per-time-step validity field (``return_valid_mask=True``).
VALID_MASK = "valid_mask"


@dataclass(frozen=True)
class FieldInfo:
    """One field as stored in one file."""

    key: str
    length: int
    row_shape: tuple[int, ...]
    dtype: np.dtype[Any]
    path: str = ""  # the dataset's path in the file (differs from ``key`` for a compound field)

    @property
    def is_string(self) -> bool:
        """True for fixed- or variable-length strings (bytes or str)."""
        return is_string_dtype(self.dtype)

    @property
    def row_nbytes(self) -> int:
        """Bytes of one decoded row (pointer size for variable-length strings)."""
        return self.dtype.itemsize * int(np.prod(self.row_shape, dtype=np.int64))


@dataclass(frozen=True)
class FileSchema:
    """The fields one file holds and its length."""

    path: str
    length: int
    fields: dict[str, FieldInfo]


@dataclass(frozen=True)
class OutputField:
    """A field as every batch returns it: common stored dtype across files, one sample's shape."""

    name: str
    row_shape: tuple[int, ...]
    dtype: np.dtype[Any]  # object for strings (normalized to str)
    kind: str  # "float", "string" or "other" (ints, bools, complex keep their dtype)


def resolve_field_names(field_names: Mapping[str, str] | None) -> dict[str, str]:
    """Return ``{field: dataset path}``: the defaults, renamed or extended by ``field_names``.

    Raises:
        TypeError: ``field_names`` is not a mapping of non-empty strings.
        ValueError: it uses the reserved name ``"valid_mask"``.
    """
    keys = {name: name for name in DEFAULT_FIELDS}
    if field_names is None:
        return keys
    if not isinstance(field_names, Mapping):
        raise TypeError(
            "field_names must be a mapping {field: dataset path in the file}, e.g. "
            f"{{'guid': 'patient_id'}}; got {type(field_names).__name__} {field_names!r}"
        )
    for name, key in field_names.items():
        if not isinstance(name, str) or not name or not isinstance(key, str) or not key:
            raise TypeError(
                "field_names must map non-empty field names to non-empty dataset paths, "
                f"got {name!r}: {key!r}"
            )
        if name == VALID_MASK:
            raise ValueError(
                f"field_names may not define {VALID_MASK!r}: that name is the computed "
                "validity mask (return_valid_mask=True)"
            )
        keys[name] = key
    return keys


def scan_file(source: H5Source, keys: Mapping[str, str]) -> FileSchema:
    """Return the fields of ``keys`` that ``source`` holds, checking their lengths agree.

    Raises:
        ValueError: no field is present, a field is a scalar, or lengths differ.
        TypeError: a field's path names a group.
    """
    found: dict[str, FieldInfo] = {}
    for name, key in keys.items():
        info = _field_info(source, name, key)
        if info is not None:
            found[name] = info
    if not found:
        raise ValueError(
            f"{source.path!r} holds none of the fields {format_names(keys)} (looked up as "
            f"{format_names(keys.values())}); it has datasets: "
            f"{format_names(dataset_keys(source.file))}. Map your names with field_names="
        )
    lengths = {info.length for info in found.values()}
    if len(lengths) > 1:
        listed = ", ".join(f"{n!r}: {i.length}" for n, i in sorted(found.items()))
        raise ValueError(
            f"fields in {source.path!r} differ in length along axis 0 ({listed}); every "
            "per-sample field of a file needs the same number of samples"
        )
    return FileSchema(source.path, lengths.pop(), found)


def _field_info(source: H5Source, name: str, key: str) -> FieldInfo | None:
    layout = describe_field(source, key, arg=f"field {name!r}")
    if layout is None:
        return None
    return FieldInfo(key, layout.length, layout.row_shape, layout.dtype, layout.path)


def with_field_keys(keys: Mapping[str, str], load_fields: Sequence[str] | None) -> dict[str, str]:
    """Add each ``load_fields`` entry that is a compound-field key (``"a/table:col"``) as a field.

    Such an entry needs no ``field_names`` mapping: it names its dataset and column itself.
    """
    result = dict(keys)
    for name in load_fields or ():
        if name not in result and FIELD_SEPARATOR in name.strip(FIELD_SEPARATOR):
            result[name] = name
    return result


def check_filters_of(schema: FileSchema, names: Iterable[str], source: H5Source) -> None:
    """Raise ``MissingFilterError`` if a field of ``names`` uses a filter not installed here."""
    for name in names:
        info = schema.fields.get(name)
        if info is not None:
            check_filters_at(source, info.path or info.key, arg=f"field {name!r}", key=info.key)


def check_present(
    schema: FileSchema, needed: Mapping[str, str], keys: Mapping[str, str], source: H5Source
) -> None:
    """Raise ``KeyError`` naming the file, the field and why it is needed, if one is missing.

    ``needed`` maps a field to the argument that needs it.
    """
    for name, reason in needed.items():
        if name not in schema.fields:
            raise KeyError(
                f"{schema.path!r} has no field {name!r} (dataset {keys[name]!r}), which "
                f"{reason} needs; the file has fields {format_names(schema.fields)} and "
                f"datasets {format_names(dataset_keys(source.file))}"
            )


def output_fields(schemas: Sequence[FileSchema], names: Iterable[str]) -> dict[str, OutputField]:
    """Return how each of ``names`` is returned, checking every file agrees on it.

    Raises:
        ValueError: one sample's shape differs between files, or a field is a string in one
            file and numeric in another.
        TypeError: a dtype cannot become a tensor (compound, opaque, …).
    """
    result: dict[str, OutputField] = {}
    for name in names:
        infos = [(s.path, s.fields[name]) for s in schemas if name in s.fields]
        first_path, first = infos[0]
        for path, info in infos[1:]:
            if info.row_shape != first.row_shape:
                raise ValueError(
                    f"field {name!r} has samples of shape {first.row_shape} in {first_path!r} "
                    f"but {info.row_shape} in {path!r}; loaded fields must agree across files"
                )
            if info.is_string != first.is_string:
                raise ValueError(
                    f"field {name!r} holds strings in one file and numbers in the other "
                    f"({first_path!r}: {first.dtype}, {path!r}: {info.dtype})"
                )
        _check_integers_stay_integers(name, infos)
        result[name] = _output_field(name, first.row_shape, [i for _, i in infos])
    return result


def _check_integers_stay_integers(name: str, infos: list[tuple[str, FieldInfo]]) -> None:
    """Refuse integer fields whose only common type is a float (int64 with uint64)."""
    dtypes = [info.dtype for _, info in infos]
    if any(d.kind not in "biu" for d in dtypes) or np.result_type(*dtypes).kind in "biu":
        return
    listed = ", ".join(f"{path!r}: {info.dtype}" for path, info in infos)
    raise TypeError(
        f"field {name!r} is stored as integers that no one integer type holds ({listed}); read "
        "as one they would become floats and large values would change. Store the field with "
        "one integer type in every file (or leave it out of load_fields)"
    )


def _output_field(name: str, row_shape: tuple[int, ...], infos: list[FieldInfo]) -> OutputField:
    if infos[0].is_string:
        return OutputField(name, row_shape, np.dtype(object), "string")
    for info in infos:
        if info.dtype.kind not in "biufc" or info.dtype.fields is not None:
            raise TypeError(
                f"field {name!r} ({info.key!r}) has dtype {info.dtype}, which torch cannot "
                f"represent; {_instead(info)}"
            )
    common = np.result_type(*(info.dtype for info in infos))
    kind = "float" if common.kind == "f" else "other"
    return OutputField(name, row_shape, common.newbyteorder("="), kind)


def _instead(info: FieldInfo) -> str:
    names = info.dtype.names
    if names:
        keys = ", ".join(repr(f"{info.key}:{n}") for n in names[:4])
        return f"it is a compound (table) dataset: load one column, e.g. load_fields=[{keys}]"
    return "leave it out of load_fields"


def field_list(load_fields: Any) -> list[str] | None:
    """Return ``load_fields`` as a list of names without repeats (None passes through)."""
    if load_fields is None:
        return None
    if isinstance(load_fields, str) or not isinstance(load_fields, Iterable):
        raise TypeError(f"load_fields must be a list of field names or None, got {load_fields!r}")
    names = list(dict.fromkeys(load_fields))  # order kept, repeats dropped
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise TypeError(f"load_fields must hold field names (str), got {bad[0]!r}")
    return names
