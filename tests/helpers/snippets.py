"""Find the Python blocks of Markdown files and run them, in this process or on DDP ranks.

A block is a ```` ```python ```` fence (or Jekyll's ``{% highlight python %}``, which the blog
post among the seeds uses). An HTML comment on the line right before the fence tunes it::

    <!-- snippet: id=NAME, after=OTHER, ddp=2, slow -->

``Snippet.options`` holds those settings (flags map to ``""``). Code is compiled with the
Markdown file as its file name and its own line numbers, so a traceback points into the doc.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers.ddp import GLOO_SETTLE_S, gloo_threads

_FENCE = re.compile(
    r"^```python[ \t]*\n(?P<md>.*?)^```[ \t]*$"
    r"|^\{% highlight python %\}[ \t]*\n(?P<jekyll>.*?)^\{% endhighlight %\}",
    re.DOTALL | re.MULTILINE,
)
_OPTIONS = re.compile(r"<!--\s*snippet:(?P<body>.*?)-->\s*\n\Z")

# Warnings that depend on the machine, not on the snippet: more workers than this machine's
# cores (the docs ask for what a training machine has), and pin_memory=True without CUDA.
# pytest --start-method=M: the default start method of the run, for processes it starts too
START_METHOD_ENV = "NN_HANDLER_TEST_START_METHOD"

MACHINE_WARNINGS = (
    "This DataLoader will create",
    "'pin_memory' argument is set as true but no accelerator is found",
)


@dataclass(frozen=True)
class Snippet:
    """One Python block of a Markdown file."""

    source: Path
    index: int  # position among the Python blocks of its file
    line: int  # 1-based line of the opening fence
    code: str
    options: dict[str, str] = field(default_factory=dict)

    def compiled(self, code: str | None = None) -> Any:
        """The block (or ``code`` in its place) compiled with the doc's file name and lines."""
        return compile(
            "\n" * self.line + (self.code if code is None else code), str(self.source), "exec"
        )


def python_blocks(path: Path) -> list[Snippet]:
    """Every Python block of ``path``, in order, with the options of its snippet comment."""
    text = path.read_text(encoding="utf-8")
    blocks = []
    for index, match in enumerate(_FENCE.finditer(text)):
        code = match.group("md") if match.group("md") is not None else match.group("jekyll")
        before = text[: match.start()]
        comment = _OPTIONS.search(before[-300:])
        options = _parse_options(comment.group("body")) if comment else {}
        blocks.append(Snippet(path, index, before.count("\n") + 1, code, options))
    return blocks


def _parse_options(body: str) -> dict[str, str]:
    options = {}
    for item in filter(None, (part.strip() for part in body.split(","))):
        key, _, value = item.partition("=")
        options[key.strip()] = value.strip()
    return options


def ignore_machine_warnings() -> None:
    """Install filters that ignore ``MACHINE_WARNINGS`` (in a ``catch_warnings`` block)."""
    for message in MACHINE_WARNINGS:
        warnings.filterwarnings("ignore", message=re.escape(message))


def run_in_rank(
    codes: list[tuple[str, str, int]],
    folder: str,
    keep: tuple[str, ...],
    ignore: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Run ``(code, file name, first line)`` pieces in one namespace on a DDP rank.

    For ``helpers.ddp.run_ddp``: changes into ``folder``, records every warning (spawned ranks
    do not inherit pytest's warning filters, and a warning raised as an error on one rank only
    would leave the others waiting), and returns the namespace's ``keep`` names and the
    warnings' messages. ``ignore``: more machine warnings of this snippet (message starts).
    """
    os.chdir(folder)
    # Under torchrun every rank is a fresh interpreter with the platform's default start method
    # (fork on Linux before Python 3.14). run_ddp's ranks are spawn children, and those inherit
    # "spawn" as their default: each DataLoader worker would re-import torch (about 50 s for the
    # 8 workers of a 2-rank snippet on 2 cores). Back to the default, as under torchrun.
    # (--start-method forkserver sets the default of Python 3.14+ for them too)
    multiprocessing.set_start_method(os.environ.get(START_METHOD_ENV) or None, force=True)
    namespace: dict[str, Any] = {"__name__": "__snippet__"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ignore_machine_warnings()
        for message in ignore:
            warnings.filterwarnings("ignore", message=re.escape(message))
        for code, filename, line in codes:
            exec(compile("\n" * line + code, filename, "exec"), namespace)
    return {
        "values": {name: namespace[name] for name in keep if name in namespace},
        "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
        "gloo_threads": gloo_threads(GLOO_SETTLE_S),
    }
