"""Short scripts run many times, each in a child forked from one interpreter that imported once.

A fresh interpreter per run spends most of a short script's time importing torch (seconds under
CPU burners). Here one interpreter runs ``preload`` and then forks a child per run: each child
starts where the script's own code begins, in a session of its own (its DataLoader workers die
with it), with its own bound, and with the exit a fresh interpreter has (``atexit`` runs).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# argv: preload code, script, bound in seconds, then one folder per run (the script's argv[1])
_FORKING_PARENT = r"""
import atexit, json, os, signal, sys, time, traceback

exec(sys.argv[1], {"__name__": "__preload__"})
script, bound = compile(sys.argv[2], "<script>", "exec"), float(sys.argv[3])


def child(folder):
    os.setsid()
    code = 1
    with open(os.path.join(folder, "out.txt"), "w") as out, open(
        os.path.join(folder, "err.txt"), "w"
    ) as err:
        os.dup2(out.fileno(), 1)  # what C code writes too
        os.dup2(err.fileno(), 2)
        sys.stdout, sys.stderr, sys.argv = out, err, ["-c", folder]
        try:
            exec(script, {"__name__": "__main__"})
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
        try:
            atexit._run_exitfuncs()
        finally:
            out.flush()
            err.flush()
            os._exit(code)


def wait(pid, began):
    while time.perf_counter() - began < bound:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return time.perf_counter() - began, os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None, None


results = []
for folder in sys.argv[4:]:
    began = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        child(folder)
    seconds, rc = wait(pid, began)
    try:  # workers left behind by a child that ended
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    read = lambda name: open(os.path.join(folder, name)).read().strip()
    results.append([seconds, rc, read("out.txt"), read("err.txt")[-3000:]])
print(json.dumps(results))
"""


@dataclass(frozen=True)
class Run:
    """One run: its seconds (``None``: killed at the bound), exit code, stdout and stderr."""

    seconds: float | None
    returncode: int | None
    out: str
    err: str


def run_forked(preload: str, script: str, folders: list[Path], bound_s: float) -> list[Run]:
    """Run ``script`` once per folder (its ``sys.argv[1]``), one after another, each within
    ``bound_s`` seconds, in children forked from an interpreter that ran ``preload`` first."""
    argv = [sys.executable, "-c", _FORKING_PARENT, preload, script, str(bound_s)]
    done = subprocess.run(
        [*argv, *map(str, folders)],
        capture_output=True,
        text=True,
        timeout=len(folders) * (bound_s + 30) + 120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [Run(*run) for run in json.loads(done.stdout.strip().splitlines()[-1])]
