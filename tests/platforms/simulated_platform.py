"""Make this Linux interpreter look like Windows' or macOS' for the library (``.ci/portable``).

A profile takes away what the other platform's Python does not have, in the interpreter itself,
before anything imports the library: modules it lacks cannot be imported (``fcntl``,
``termios`` and ``resource`` on Windows raise ``ImportError``), functions and constants it lacks
are gone from ``os``, ``mmap`` and ``fcntl``, and ``multiprocessing`` offers the start methods
it offers, with its default. The library then finds what it finds on that platform, through the
same questions it asks there; nothing of the library is patched.

``sitecustomize.py`` beside this module installs the profile named by ``NN_HANDLER_SIMULATE``
in every Python process started with this folder on ``PYTHONPATH``, spawned workers and ranks
included. docs/development.md lists what a simulation cannot show (real Windows paths, file
locking, the cost of spawn, ...).
"""

from __future__ import annotations

import importlib.abc
import multiprocessing
import multiprocessing.context as mp_context
import os
import sys
from dataclasses import dataclass

__all__ = ["ENV", "PROFILES", "Profile", "install"]

ENV = "NN_HANDLER_SIMULATE"
#: the library's folder of node-shared regions points here: a folder that does not exist
MISSING_SHM = "/nonexistent/nn_handler-simulated-shm"


@dataclass(frozen=True)
class Profile:
    """What one platform's Python lacks, compared with Linux's."""

    modules: tuple[str, ...] = ()  # cannot be imported
    os_names: tuple[str, ...] = ()  # missing from os
    mmap_names: tuple[str, ...] = ()  # missing from mmap
    fcntl_names: tuple[str, ...] = ()  # missing from fcntl
    start_methods: tuple[str, ...] = ("spawn", "fork", "forkserver")  # the first is the default
    dir_fd: bool = True  # os.open and friends take dir_fd


PROFILES = {
    "windows": Profile(
        modules=("fcntl", "termios", "resource"),
        os_names=(
            "fork", "forkpty", "register_at_fork", "pread", "preadv", "posix_fadvise",
            "posix_fallocate", "statvfs", "fstatvfs", "O_TMPFILE", "O_NOFOLLOW", "geteuid",
            "sched_getaffinity", "major", "minor", "memfd_create", "MFD_CLOEXEC",
        ),
        mmap_names=(
            "MAP_SHARED", "MAP_PRIVATE", "MAP_ANONYMOUS", "MAP_POPULATE", "PROT_READ",
            "PROT_WRITE", "MADV_WILLNEED", "MADV_RANDOM", "MADV_SEQUENTIAL", "MADV_DONTNEED",
        ),
        start_methods=("spawn",),
        dir_fd=False,
    ),
    "macos": Profile(
        os_names=(
            "posix_fadvise", "posix_fallocate", "O_TMPFILE", "sched_getaffinity", "memfd_create",
            "MFD_CLOEXEC",
        ),
        mmap_names=("MAP_POPULATE",),
        fcntl_names=("F_OFD_SETLK", "F_OFD_SETLKW", "F_OFD_GETLK", "F_GETPIPE_SZ", "F_SETPIPE_SZ"),
    ),
}  # fmt: skip


class _Refuse(importlib.abc.MetaPathFinder):
    """Refuses the modules the platform does not have, as its Python would."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = frozenset(names)

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def install(name: str) -> Profile:
    """Take from this interpreter what the platform ``name`` lacks (see the module docstring).

    Raises:
        ValueError: ``name`` is not one of ``PROFILES``.
    """
    profile = PROFILES.get(name)
    if profile is None:
        raise ValueError(f"{ENV}={name!r}: expected one of {sorted(PROFILES)}")
    if "register_at_fork" in profile.os_names:
        # torch registers an at-fork hook when imported (its Windows build does not): import
        # it while the hook can still be registered
        import torch  # noqa: F401
    _refuse_modules(profile.modules)
    _remove(os, profile.os_names)
    if "O_TMPFILE" in profile.os_names and "tempfile" in sys.modules:
        sys.modules["tempfile"]._O_TMPFILE_WORKS = False  # read when it was imported
    import mmap

    _remove(mmap, profile.mmap_names)
    if profile.fcntl_names:
        import fcntl

        _remove(fcntl, profile.fcntl_names)
    if not profile.dir_fd:
        os.supports_dir_fd.clear()
    _start_methods(profile.start_methods)
    # the library's own folder of shared regions is missing, as /dev/shm is there
    os.environ.setdefault("NN_HANDLER_SHM_DIR", MISSING_SHM)
    return profile


def _refuse_modules(names: tuple[str, ...]) -> None:
    if not names:
        return
    for module in names:  # imported already (by the interpreter's start): forgotten
        sys.modules.pop(module, None)
    sys.meta_path.insert(0, _Refuse(names))


def _remove(module: object, names: tuple[str, ...]) -> None:
    for attr in names:
        if hasattr(module, attr):
            delattr(module, attr)


def _start_methods(methods: tuple[str, ...]) -> None:
    """Offer only ``methods``, the first the default (multiprocessing reads these at run time)."""
    for method in list(mp_context._concrete_contexts):
        if method not in methods:
            del mp_context._concrete_contexts[method]
    default = mp_context._default_context
    default._default_context = mp_context._concrete_contexts[methods[0]]
    default._actual_context = None  # (not chosen yet: set_start_method may still choose)
    offered = list(methods)

    def get_all_start_methods(self: object = None) -> list[str]:
        return list(offered)

    mp_context.DefaultContext.get_all_start_methods = get_all_start_methods  # type: ignore[method-assign]
    # multiprocessing (and torch.multiprocessing, imported already on Windows) hold it bound
    for module in (multiprocessing, sys.modules.get("torch.multiprocessing")):
        if module is not None:
            module.get_all_start_methods = get_all_start_methods  # type: ignore[attr-defined]
