"""The peers and limits: importing this package registers each of them once (``registry``).

One line per peer. Their order is the order of their rows in every suite, so it is kept by
hand, not sorted.
"""

# ruff: noqa: F401, I001
from . import scdataset
from . import h5torch
from . import in_ram_limit
from . import decoder_limit
from . import process_limit
from . import annbatch
from . import write_limit
