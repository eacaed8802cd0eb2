"""Find a sparse matrix in an HDF5 file: AnnData ``csr_matrix`` / ``csc_matrix`` or 10x Genomics.

Layouts recognised (rows are always what a model trains on: cells):

* AnnData (``.h5ad``): a group (``X``, ``layers/<name>``, ``raw/X``) whose attribute
  ``encoding-type`` is ``csr_matrix`` or ``csc_matrix``, with datasets ``data``, ``indices``,
  ``indptr`` and an attribute ``shape = (n_obs, n_vars)``. Column names are the ``var`` index
  (``var/_index``, or the dataset that ``var.attrs["_index"]`` names; ``raw/var`` for ``raw/X``);
  row labels come from ``obs`` columns.
* 10x Genomics ``.h5``: a group (``matrix`` in Cell Ranger 3+, one group per genome before) with
  datasets ``data``, ``indices``, ``indptr`` and ``shape = [n_genes, n_cells]``. Cells are the
  columns of that matrix and ``indptr`` runs over cells, so cells are read exactly like CSR rows.
  Column (gene) names: ``features/name`` (3+) or ``gene_names``.

Also the helpers that ``nn-handler inspect`` calls to print the constructor of a sparse group.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from ..._validate import format_names
from ..file.strings import BYTES, decode_strings, in_rows

__all__ = [
    "ANNDATA_ENCODINGS",
    "SparseLayout",
    "check_indptr",
    "constructor_call",
    "describe_layout",
    "detect_layout",
    "names_key",
    "read_names",
    "sparse_layouts",
]

ANNDATA_ENCODINGS = ("csr_matrix", "csc_matrix")
_PARTS = ("data", "indices", "indptr")
_AUTO_GROUPS = ("X", "matrix")


@dataclass(frozen=True)
class SparseLayout:
    """Where one sparse matrix lives in a file, and how its rows (cells) are laid out.

    Attributes:
        group: Path of the group holding ``data`` / ``indices`` / ``indptr``.
        encoding: ``"csr_matrix"`` or ``"csc_matrix"`` (AnnData), or ``"10x"``.
        n_rows: Rows served (cells).
        n_cols: Columns served (genes / features).
        var_key: Dataset with one name per column, or None.
        obs_key: AnnData ``obs`` group (row annotations), or None.
    """

    group: str
    encoding: str
    n_rows: int
    n_cols: int
    var_key: str | None
    obs_key: str | None

    @property
    def data_key(self) -> str:
        """Path of the ``data`` dataset."""
        return f"{self.group}/data"

    @property
    def indices_key(self) -> str:
        """Path of the ``indices`` dataset."""
        return f"{self.group}/indices"

    @property
    def indptr_key(self) -> str:
        """Path of the ``indptr`` dataset."""
        return f"{self.group}/indptr"

    @property
    def rows_compressed(self) -> bool:
        """True when ``indptr`` runs over rows (CSR and 10x): a row is one run of entries."""
        return self.encoding != "csc_matrix"

    @property
    def compressed_len(self) -> int:
        """Entries ``indptr`` should have minus one (rows, or columns for CSC)."""
        return self.n_rows if self.rows_compressed else self.n_cols


def detect_layout(f: h5py.File, group: str | None, path: str) -> SparseLayout:
    """Return the layout of ``group`` in ``f`` (found automatically when None).

    Raises:
        KeyError: no such group, or no sparse group found; the message says what the file has.
        ValueError: the group is not a sparse matrix we can read (dense, other encoding,
            inconsistent shape).
    """
    if group is None:
        found = sparse_layouts(f)
        for candidate in _AUTO_GROUPS:
            for layout in found:
                if layout.group == candidate:
                    return layout
        if found:
            return found[0]
        raise KeyError(_nothing_found(f, path))
    obj = f.get(group)
    if obj is None:
        raise KeyError(
            f"group={group!r} not found in {path!r}; sparse groups in the file: "
            f"{format_names(lay.group for lay in sparse_layouts(f))}"
        )
    return _layout_of(f, group, obj, path)


def sparse_layouts(f: h5py.File) -> list[SparseLayout]:
    """Every sparse matrix of ``f`` we can read (AnnData groups and 10x groups), in file order."""
    found: list[SparseLayout] = []

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Group) and _looks_sparse(obj):
            # a group we cannot read as rows: inspect shows it as plain datasets
            with contextlib.suppress(KeyError, ValueError):
                found.append(_layout_of(f, name, obj, f.filename))

    f.visititems(visit)
    return found


def _looks_sparse(obj: h5py.Group) -> bool:
    encoding = _attr_str(obj, "encoding-type")
    if encoding in ANNDATA_ENCODINGS:
        return True
    return encoding is None and all(isinstance(obj.get(p), h5py.Dataset) for p in _PARTS)


def _layout_of(f: h5py.File, group: str, obj: Any, path: str) -> SparseLayout:
    if isinstance(obj, h5py.Dataset):
        raise ValueError(
            f"group={group!r} in {path!r} is a dense dataset of shape {obj.shape}, not a sparse "
            f"matrix; read it with H5LazyDataset({path!r}, {group!r})"
        )
    encoding = _attr_str(obj, "encoding-type")
    if encoding is not None and encoding not in ANNDATA_ENCODINGS:
        raise ValueError(
            f"group={group!r} in {path!r} has encoding-type {encoding!r}; H5SparseDataset reads "
            f"{' or '.join(ANNDATA_ENCODINGS)} (AnnData) or the 10x layout"
        )
    missing = [p for p in _PARTS if not isinstance(obj.get(p), h5py.Dataset)]
    if missing:
        raise ValueError(
            f"group={group!r} in {path!r} is not a sparse matrix: it lacks the dataset(s) "
            f"{', '.join(missing)} (a sparse group holds data, indices and indptr)"
        )
    if encoding is None:
        return _tenx_layout(obj, group, path)
    return _anndata_layout(f, obj, group, encoding, path)


def _anndata_layout(
    f: h5py.File, obj: h5py.Group, group: str, encoding: str, path: str
) -> SparseLayout:
    shape = _shape(obj.attrs.get("shape"), f"group={group!r} in {path!r}: attribute 'shape'")
    root = "raw/" if group.startswith("raw/") else ""
    n_rows, n_cols = shape
    return SparseLayout(
        group=group,
        encoding=encoding,
        n_rows=n_rows,
        n_cols=n_cols,
        var_key=_index_key(f, f"{root}var", n_cols),
        obs_key="obs" if _index_key(f, "obs", n_rows) is not None else None,
    )


def _tenx_layout(obj: h5py.Group, group: str, path: str) -> SparseLayout:
    shape_obj = obj.get("shape")
    if not isinstance(shape_obj, h5py.Dataset):
        raise ValueError(
            f"group={group!r} in {path!r} has data, indices and indptr but neither an AnnData "
            "encoding-type attribute nor a 10x 'shape' dataset; cannot tell rows from columns"
        )
    genes, cells = _shape(shape_obj[()], f"group={group!r} in {path!r}: dataset 'shape'")
    names = None
    for key in ("features/name", "gene_names", "features/id", "genes"):
        candidate = obj.get(key)
        if isinstance(candidate, h5py.Dataset) and candidate.shape == (genes,):
            names = f"{group}/{key}"
            break
    return SparseLayout(group, "10x", n_rows=cells, n_cols=genes, var_key=names, obs_key=None)


def _shape(value: Any, what: str) -> tuple[int, int]:
    try:
        dims = [int(v) for v in value]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be two non-negative integers, got {value!r}") from exc
    if len(dims) != 2 or min(dims) < 0:
        raise ValueError(f"{what} must be two non-negative integers, got {value!r}")
    return dims[0], dims[1]


_NULLABLE_STRINGS = "nullable-string-array"


def _index_key(f: h5py.File, frame: str, length: int) -> str | None:
    """The index dataset of an AnnData dataframe group, when it has ``length`` entries."""
    group = f.get(frame)
    if not isinstance(group, h5py.Group):
        return None
    name = _attr_str(group, "_index") or "_index"
    dset = group.get(name)
    if isinstance(dset, h5py.Group) and _attr_str(dset, "encoding-type") == _NULLABLE_STRINGS:
        # anndata >= 0.13 with pandas 3 writes string indexes as {values, mask}
        name, dset = f"{name}/values", dset.get("values")
    if isinstance(dset, h5py.Dataset) and dset.shape == (length,):
        return f"{frame}/{name}"
    return None


def _attr_str(obj: Any, name: str) -> str | None:
    value = obj.attrs.get(name)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def _nothing_found(f: h5py.File, path: str) -> str:
    x = f.get("X")
    if isinstance(x, h5py.Dataset):
        return (
            f"{path!r} holds X as a dense dataset of shape {x.shape}, not a sparse matrix; "
            f"read it with H5LazyDataset({path!r}, 'X')"
        )
    groups = [name for name, obj in f.items() if isinstance(obj, h5py.Group)]
    return (
        f"no sparse matrix found in {path!r} (looked for an AnnData group with encoding-type "
        f"csr_matrix/csc_matrix and for a 10x group with data, indices, indptr and shape); "
        f"top-level groups: {format_names(groups)}; pass group=<path of the matrix>"
    )


def constructor_call(path: str, layout: SparseLayout, label: str | None = None) -> str:
    """The ``H5SparseDataset(...)`` call that reads ``layout`` (what ``inspect`` prints)."""
    args = [repr(path)]
    if layout.group not in _AUTO_GROUPS:
        args.append(f"group={layout.group!r}")
    if label is not None:
        args.append(f"label={label!r}")
    return f"H5SparseDataset({', '.join(args)})"


def describe_layout(f: h5py.File, layout: SparseLayout, path: str) -> tuple[str, str]:
    """What ``nn-handler inspect`` says of ``layout``: its stored values, and the call to use.

    A categorical ``obs`` column, when there is one, is offered as ``label``; a CSC matrix says
    that it is served through a CSR copy next to the file.
    """
    data = f[layout.data_key]
    nnz = data.shape[0] if data.shape else 0
    note = "" if layout.rows_compressed else " (served through a CSR copy next to the file)"
    return f"{nnz} stored values{note}", constructor_call(
        path, layout, _first_categorical(f, layout)
    )


def _first_categorical(f: h5py.File, layout: SparseLayout) -> str | None:
    if layout.obs_key is None:
        return None
    obs = f[layout.obs_key]
    for name, obj in obs.items():
        if isinstance(obj, h5py.Group) and _attr_str(obj, "encoding-type") == "categorical":
            return str(name)
    return None


def check_indptr(
    indptr: np.ndarray[Any, Any], n: int, nnz: int, where: str
) -> np.ndarray[Any, Any]:
    """Return a validated ``indptr`` (its own integer dtype kept: int32 halves the memory)."""
    if indptr.ndim != 1 or indptr.dtype.kind not in "iu":
        raise ValueError(f"{where}: indptr must be a 1-d integer dataset, got {indptr.dtype}")
    if indptr.shape[0] != n + 1:
        raise ValueError(
            f"{where}: indptr has {indptr.shape[0]} entries, expected {n + 1} "
            f"(one more than the {n} rows of the matrix's shape)"
        )
    if indptr[0] != 0 or indptr[-1] != nnz:
        raise ValueError(
            f"{where}: indptr must run from 0 to the {nnz} stored entries, "
            f"got {int(indptr[0])} … {int(indptr[-1])}"
        )
    if n and np.any(indptr[1:] < indptr[:-1]):
        first = int(np.flatnonzero(indptr[1:] < indptr[:-1])[0])
        raise ValueError(f"{where}: indptr decreases after row {first}; the file is corrupt")
    return indptr


def read_names(
    f: h5py.File, key: str | None, path: str, strings: tuple[str, str]
) -> np.ndarray[Any, Any] | None:
    """Return the column names stored at ``key`` as an array of str (None when no key).

    Stored strings are decoded with ``encoding`` (UTF-8 when it is ``"bytes"``: names are
    matched against ``columns=`` and shown as ``str``).

    Args:
        f: The open file.
        key: The names' dataset, or None.
        path: The file's path, for messages.
        strings: ``(encoding, argument)``: how stored strings are decoded, and the argument
            that chose it.

    Raises:
        DataFileError: a name is not valid in the encoding.
    """
    if key is None:
        return None
    dset = f[key]
    values = np.asarray(dset[()])
    if dset.dtype.kind not in "OS":
        return values.astype(str)
    encoding, arg = strings
    where = in_rows(f"column name {key!r}", arg, path, np.arange(values.size))
    return decode_strings(values, "utf-8" if encoding == BYTES else encoding, where)


def names_key(f: h5py.File, layout: SparseLayout, var_key: str | None, path: str) -> str | None:
    if var_key is None:
        return layout.var_key
    dset = f.get(var_key)
    if not isinstance(dset, h5py.Dataset) or dset.shape != (layout.n_cols,):
        found = "missing" if dset is None else f"shape {getattr(dset, 'shape', '(a group)')}"
        raise ValueError(
            f"var_key={var_key!r} in {path!r} must be a dataset of {layout.n_cols} column names "
            f"(one per column of {layout.group!r}); it is {found}"
        )
    return var_key
