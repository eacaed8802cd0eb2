"""An atomic output file: written under a temporary name in the destination's folder, renamed.

The temporary file is flushed to disk (``fsync``) before the rename and the folder after it, so
the output either exists whole or not at all; on any error, ``KeyboardInterrupt`` included, the
temporary file is removed. The input is never the output (same path, or the same file through
another link), and an existing output is replaced only with ``force``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator

from nn_handler._io import is_url

__all__ = ["atomic_output", "check_output"]


def check_output(src: str, dst: str, *, force: bool) -> None:
    """Refuse to write ``dst`` over the input ``src``, or over a file without ``force``.

    Raises:
        ValueError: ``dst`` is the input, a URL, or a directory.
        FileExistsError: ``dst`` exists and ``force`` is False.
        FileNotFoundError: the folder of ``dst`` does not exist.
    """
    if is_url(dst):
        raise ValueError(f"dst={dst!r} is a URL; the rewrite writes a local file")
    if not is_url(src) and os.path.exists(dst) and _same_file(src, dst):
        raise ValueError(f"dst={dst!r} is the input file {src!r}; the rewrite never writes over "
                         "its input: pick another output path")  # fmt: skip
    if os.path.isdir(dst):
        raise ValueError(f"dst={dst!r} is a directory; pass the path of the output .h5 file")
    if os.path.exists(dst) and not force:
        raise FileExistsError(f"dst={dst!r} exists; pass force=True (--force) to replace it")
    folder = os.path.dirname(os.path.abspath(dst))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"the folder of dst={dst!r} does not exist: {folder!r}")


def _same_file(src: str, dst: str) -> bool:
    if os.path.realpath(src) == os.path.realpath(dst):
        return True
    try:
        return os.path.samefile(src, dst)  # hard links: same device and inode
    except OSError:
        return False


@contextlib.contextmanager
def atomic_output(dst: str) -> Iterator[str]:
    """Yield a temporary path next to ``dst``; on success it becomes ``dst`` (see module doc)."""
    folder = os.path.dirname(os.path.abspath(dst))
    temp = os.path.join(folder, f".{os.path.basename(dst)}.nnh-tmp-{secrets.token_hex(4)}")
    try:
        yield temp
        _fsync(temp)
        os.replace(temp, dst)
        _fsync(folder)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
