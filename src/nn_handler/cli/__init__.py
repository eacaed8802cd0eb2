"""The ``nn-handler`` command: ``inspect``, ``rewrite``, ``bench``, ``demo`` and ``regions``.

Exit codes: 0 success, 2 bad usage (argparse), 1 errors. Errors print one line without a
traceback unless ``--debug`` is given. Every subcommand is built from the public library API.
``inspect`` and ``bench`` take a URL wherever they take a file, with ``--storage-option``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from .. import __version__
from .._inspect.values import safe_text
from ._bench import add_bench, format_bench
from ._demo import add_demo
from ._inspect import add_inspect, format_report
from ._regions import add_regions
from ._rewrite import add_rewrite

__all__ = ["format_bench", "format_report", "main"]

# ImportError: a URL whose filesystem package is missing (the message names the package)
_EXPECTED_ERRORS = (OSError, KeyError, ValueError, TypeError, RuntimeError, ImportError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except BrokenPipeError:  # output piped into e.g. `head`, which stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except _EXPECTED_ERRORS as exc:
        if args.debug:
            raise
        message = safe_text(_one_line(exc))  # messages may quote names from a file
        print(f"nn-handler {args.command}: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"nn-handler {args.command}: interrupted", file=sys.stderr)
        return 130


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror  # our messages already name the path
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nn-handler",
        description="Inspect, benchmark and demo fast HDF5 loading for PyTorch.",
    )
    parser.add_argument("--version", action="version", version=f"nn-handler {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_inspect(sub, common)
    add_rewrite(sub, common)
    add_demo(sub, common)
    add_bench(sub, common)
    add_regions(sub, common)
    return parser
