"""How the loaders we build start worker processes in a process that runs other threads.

``fork`` copies one thread. A lock that another thread held at that moment (in CUDA's driver,
NCCL, a framework's helper) stays locked in the child for ever, and Python 3.12+ warns about
every such fork. Our own threads (decode pool, collection watcher) are not the
question: they are stopped before every fork (``os.register_at_fork`` in ``_io``). Other
threads we cannot stop, so when they run, our loaders start their workers with ``forkserver``:
a clean single-threaded server forks them, and the dataset reaches them pickled.

``forkserver`` re-imports the main script in the server and in every worker, as spawn does. A
script that starts its loader from unguarded top-level code (no ``if __name__ ==
"__main__":``) would then run its training again in each of them, so there we keep ``fork``
and say why. The server preloads ``nn_handler.dataloaders`` (torch, h5py, NumPy), so a worker
starts in a fraction of a second instead of importing them afresh (2.9 s per epoch measured on
2 cores without, 0.18 s with).
"""

from __future__ import annotations

import ast
import functools
import logging
import multiprocessing
import sys
import threading
from multiprocessing import forkserver
from multiprocessing.context import BaseContext
from multiprocessing.reduction import ForkingPickler
from types import FrameType
from typing import Any, TypeVar

import torch
import torch.distributed
from torch.utils.data import DataLoader

from .._contracts.protocols import is_fork_only
from .worker_iter import worker_iterator

__all__ = ["SafeStartDataLoader", "other_threads", "worker_context"]

T_co = TypeVar("T_co", covariant=True)

_LOG = logging.getLogger("nn_handler.dataloaders")
_OURS = "nn_handler-"  # the name prefix of every thread this package starts
_PRELOAD = "nn_handler.dataloaders"
_said: set[str] = set()


class SafeStartDataLoader(DataLoader[T_co]):
    """A ``DataLoader`` that picks its workers' start method when they start.

    Generic like ``DataLoader``: ``SafeStartDataLoader[torch.Tensor]`` is a loader of tensors.

    With no ``multiprocessing_context`` given, each start of the workers (every epoch, or once
    with ``persistent_workers``) asks ``worker_context``: torch's default, or forkserver while
    other threads run. A context the user gave is kept. Its worker-process iterator is
    ``worker_iterator``'s (torch's, with less work per batch in this process). Everything else
    is ``DataLoader``'s, so Lightning and accelerate rebuild it like any ``DataLoader``.
    """

    _context_chosen = False  # set when the context in use is ours, to be chosen afresh

    def _get_iterator(self) -> Any:
        if self.num_workers == 0:
            return super()._get_iterator()
        if self.multiprocessing_context is None or self._context_chosen:
            context = worker_context(None, self.dataset, (self.collate_fn, self.worker_init_fn))
            self.multiprocessing_context = context
            self._context_chosen = context is not None
        self.check_worker_number_rationality()
        return worker_iterator(self)


def other_threads() -> list[str]:
    """What runs threads in this process besides the calling thread and ours.

    Ours stop before every fork. Counted: CUDA (its driver starts threads when it initialises),
    ``torch.distributed`` (NCCL's and gloo's threads) and every other Python thread alive.
    torch's own intra-op pool is not counted: torch resets it in a forked child.
    """
    found = []
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        found.append("CUDA")
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        found.append(f"torch.distributed ({torch.distributed.get_backend()})")
    me = threading.current_thread()
    found += [
        f"thread {t.name!r}"
        for t in threading.enumerate()
        if t is not me and not t.name.startswith(_OURS) and t.is_alive()
    ]
    return found


def worker_context(
    requested: object, dataset: Any = None, sent: tuple[Any, ...] = ()
) -> BaseContext | None:
    """The start method for a loader's workers about to start: None keeps torch's default.

    Args:
        requested: The ``multiprocessing_context`` the user gave (None when none): kept.
        dataset: The loader's dataset: one that only a fork shares (``ForkOnly``) keeps fork.
        sent: What else a worker receives (collate_fn, worker_init_fn, ...): forkserver is
            chosen only when it and the dataset pickle (a lambda transform does not).
    """
    if requested is not None or multiprocessing.get_start_method() != "fork":
        return None
    threads = other_threads()
    if not threads:
        return None
    if is_fork_only(dataset):
        _say_once(
            f"this process runs threads ({', '.join(threads)}), but the dataset lives in this "
            "process's private memory (e.g. RankMemCachedH5Dataset(share_memory=False)), "
            "which forkserver workers would receive copied into /dev/shm: DataLoader workers "
            "start with fork; pass share_memory=True for forkserver workers"
        )
        return None
    if "forkserver" not in multiprocessing.get_all_start_methods():  # pragma: no cover - not Linux
        return None
    unpicklable = _pickle_error((dataset, *sent))
    if unpicklable:
        _say_once(
            f"this process runs threads ({', '.join(threads)}), but what the workers receive "
            f"does not pickle ({unpicklable}): DataLoader workers start with fork; define "
            "transforms and functions at module level for forkserver workers"
        )
        return None
    if not _main_reimport_is_safe():
        _say_once(
            f"this process runs threads ({', '.join(threads)}), but the main script starts "
            "the loader from top-level code that forkserver workers would run again: "
            "DataLoader workers start with fork; put the script's code under "
            '`if __name__ == "__main__":` (or pass multiprocessing_context) for a start method '
            "that cannot inherit a held lock"
        )
        return None
    _say_once(
        f"this process runs threads besides ours ({', '.join(threads)}), so "
        "DataLoader workers start with forkserver, not fork: a fork would copy any lock those "
        "threads hold (pass multiprocessing_context to choose)",
        logging.INFO,
    )
    _preload()
    return multiprocessing.get_context("forkserver")


def _pickle_error(payload: Any) -> str:
    """Why ``payload`` does not pickle as a worker would receive it; empty when it does."""
    try:
        ForkingPickler.dumps(payload)
    except Exception as exc:  # any failure means: do not send it pickled
        return f"{type(exc).__name__}: {exc}"
    return ""


def _preload() -> None:
    # the server starts on first use; before that its preload list can still be extended
    modules = list(getattr(forkserver._forkserver, "_preload_modules", ["__main__"]))
    if _PRELOAD not in modules:
        forkserver.set_forkserver_preload([*modules, _PRELOAD])


def _main_reimport_is_safe() -> bool:
    """Whether importing ``__main__`` again (as a spawn / forkserver child does) runs nothing.

    Unsafe only while the main script's own top-level code is running outside an ``if
    __name__ == "__main__":`` block. A main without a file (a notebook, ``python -c``) is not
    re-imported; a main imported rather than run (``__mp_main__`` in a spawned rank) was
    already re-imported once to start this very process.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None:
        return True
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is vars(main):
            return frame.f_lineno in _guarded_lines(frame.f_code.co_filename)
        frame = frame.f_back
    return True


@functools.lru_cache(maxsize=8)
def _guarded_lines(path: str) -> frozenset[int]:
    """Line numbers of ``path`` inside ``if __name__ == "__main__":`` blocks."""
    try:
        with open(path, encoding="utf-8") as source:
            tree = ast.parse(source.read(), path)
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return frozenset(lines)


def _is_main_test(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    values = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return isinstance(test.ops[0], ast.Eq) and len(names) == 1 and len(values) == 1


def _say_once(message: str, level: int = logging.WARNING) -> None:
    if message not in _said:
        _said.add(message)
        _LOG.log(level, "nn_handler: %s", message)
