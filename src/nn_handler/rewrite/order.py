"""The row order of a rewrite with ``shuffle_rows``: which rows are shuffled, and how.

Output row ``i`` holds input row ``row_order[i]``; ``row_order`` is a seeded permutation
(``np.random.default_rng(seed).permutation(n)``), a pure function of the seed and the row count,
stored in the file at ``ROW_ORDER_KEY`` (``ANNDATA_ROW_ORDER_KEY`` in an AnnData file: there it
shows up as ``adata.uns["_nn_handler"]["row_order"]``) with attributes that say so. To find
input row ``j`` in the output: ``np.argsort(row_order)[j]``.

"The rows" are the length most datasets share along axis 0 (a sparse matrix's row count when the
file has one: the cells of an AnnData or 10x file). Every dataset with that many rows along axis
0 is permuted the same way, so x, y and per-sample fields stay aligned, except lookup tables that
only happen to have that length: AnnData's ``var`` side (``var``, ``varm``, ``varp``, ``uns``)
and the ``categories`` of a categorical column.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ["ANNDATA_ROW_ORDER_KEY", "ROW_ORDER_KEY", "choose_rows", "is_lookup_table", "row_order"]

#: Where a shuffled rewrite stores its row order (int64, one entry per row).
ROW_ORDER_KEY = "_nn_handler/row_order"
#: Where it stores it in an AnnData file (anndata reads every top-level group as a field).
ANNDATA_ROW_ORDER_KEY = "uns/_nn_handler/row_order"
_ANNDATA_SIDE = ("var", "varm", "varp", "uns", "raw/var", "raw/varm")


def row_order(n_rows: int, seed: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    """The permutation of a shuffled rewrite: output row ``i`` is input row ``order[i]``."""
    return np.random.default_rng(seed).permutation(n_rows).astype(np.int64)


def choose_rows(lengths: Iterable[int], sparse_rows: Iterable[int]) -> int | None:
    """The row count that is shuffled: a sparse matrix's, else the most shared length.

    Ties go to the larger length. None when there is nothing to shuffle.
    """
    sparse = sorted(set(sparse_rows), reverse=True)
    if sparse:
        return sparse[0]
    counts = Counter(n for n in lengths if n > 1)
    if not counts:
        return None
    return max(counts, key=lambda n: (counts[n], n))


def is_lookup_table(path: str, categories: frozenset[str], anndata: bool) -> bool:
    """True for datasets that are not rows even when their length matches (see module doc).

    ``categories``: the ``categories`` datasets of the file's categorical columns.
    """
    if path in categories:
        return True
    return anndata and any(path == p or path.startswith(p + "/") for p in _ANNDATA_SIDE)
