"""Every raw read of file bytes goes through ``_io/storage/byte_source.py`` (the byte-range seam).

HDF5 metadata stays with h5py; the data's own bytes (memory maps, ``pread`` of contiguous data
or of chunks) are read only by a ``ByteSource``, so that a remote store can take the local
file's place in one module.
"""

import ast
from pathlib import Path

import nn_handler

SRC = Path(nn_handler.__file__).parent
SEAM = SRC / "_io" / "storage" / "byte_source.py"
FACTS = SRC / "_io" / "platform.py"  # imports mmap to ask which constants it has; reads nothing
RAW_READS = {"pread", "preadv", "readv", "mmap"}


def raw_reads(path, imports=True):
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in RAW_READS:
            found.append(f"{path.relative_to(SRC)}:{node.lineno} .{node.attr}")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            if "mmap" in names and imports:
                found.append(f"{path.relative_to(SRC)}:{node.lineno} import mmap")
    return found


def test_only_the_byte_source_reads_raw_bytes():
    offenders = [
        hit
        for p in sorted(SRC.rglob("*.py"))
        if p != SEAM
        for hit in raw_reads(p, imports=p != FACTS)
    ]
    assert offenders == []
    assert [hit.split(" ", 1)[1] for hit in raw_reads(FACTS)] == ["import mmap"]  # nothing else
    assert raw_reads(SEAM)  # the guard looks for what the seam really uses
