"""``nn-handler rewrite``: write an HDF5 file again in the layout that trains fastest.

``rewrite_file(src, dst)`` chunks every dataset along axis 0 in whole rows of about 1 MiB,
compresses the chunks on every core (zstd by default), carries groups, attributes, dimension
scales, tables, strings, encoded images and sparse matrices over, optionally writes the rows in
a seeded shuffled order (``shuffle_rows=``), checks every row against the input and renames the
result into place only then. See ``docs/cli.md``.
"""

from .options import RewriteOptions
from .order import ANNDATA_ROW_ORDER_KEY, ROW_ORDER_KEY
from .plan import DatasetPlan, RewritePlan
from .report import RewriteReport
from .rewrite import rewrite_file
from .verify import VerifyError, VerifyResult

__all__ = [
    "ANNDATA_ROW_ORDER_KEY",
    "DatasetPlan",
    "ROW_ORDER_KEY",
    "RewriteOptions",
    "RewritePlan",
    "RewriteReport",
    "VerifyError",
    "VerifyResult",
    "rewrite_file",
]
