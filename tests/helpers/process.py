"""Make the test process look like a freshly forked child to every ``PerProcess`` slot."""

from __future__ import annotations

from nn_handler._io import process


def as_if_forked() -> None:
    """Run what ``os.fork`` runs in a child: every per-process value made so far is inherited."""
    process._after_fork_in_child()
